"""How text becomes a vector is one type (:class:`cselab.encoders.encoding.Encoding`) with one rules function: no
other module declares its settings or lists them by hand, every way in (a method's YAML, an encoder built in code, a
checkpoint's cselab.json) meets the same rules, and a new setting (``lowercase``) reaches training, the checkpoint and
sentence-transformers from one field and its use."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer, models

import cselab
from cselab.encoders import load_encoder
from cselab.encoders.checkpoint import CHECKPOINT_FILE, CheckpointInfo, read_checkpoint_info
from cselab.encoders.encoding import ENCODING_FIELDS, Encoding
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import ConfigError, ModelError
from cselab.train.config.methods import load_method
from cselab.train.model import TrainingEncoder, save_checkpoint

PACKAGE = Path(cselab.__file__).parent
HOME = "cselab/encoders/encoding.py"
#: Fields of other types that share a name with a setting and mean something else.
OTHER_MEANINGS = {("TrainingConfig", "max_length"): "training's budget, which the training encoding is given",
                  ("ViewConfig", "prompt"): "a view's own template, put in place of the encoding's",
                  ("AugmentConfig", "max_length"): "a translation model's cut, in its own tokens",
                  ("Decoding", "max_length"): "a translation model's cut, in its own tokens"}
LISTED = 5  # a dict or call naming this many settings lists them by hand (b0f1993 did in nine places)
SENTENCES = ["A Man plays The Guitar", "Two DOGS run on the beach", "the market fell sharply today"]


def declarations(package: Path = PACKAGE) -> list[str]:
    """Where a setting of :class:`Encoding` is declared (a class's field) or listed by hand (a dict or a call naming
    :data:`LISTED` of them), outside its home and :data:`OTHER_MEANINGS`; and every mention of sentence-transformers'
    pooling keys outside the checkpoint format's module."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package.parent))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and where != HOME:
                found += [f"{where}:{item.lineno}: {node.name}.{item.target.id}" for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                          and item.target.id in ENCODING_FIELDS and (node.name, item.target.id) not in OTHER_MEANINGS]
            named = ([key.value for key in node.keys if isinstance(key, ast.Constant)] if isinstance(node, ast.Dict)
                     else [keyword.arg for keyword in node.keywords] if isinstance(node, ast.Call) else [])
            if len(set(named) & set(ENCODING_FIELDS)) >= LISTED:
                found.append(f"{where}:{node.lineno}: lists {', '.join(sorted(set(named) & set(ENCODING_FIELDS)))}")
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and "pooling_mode" in node.value
                    and where != "cselab/encoders/checkpoint.py"):
                found.append(f"{where}:{node.lineno}: sentence-transformers' pooling key {node.value!r}")
    return found


def test_the_encoding_settings_are_declared_in_one_type_and_listed_nowhere_else():
    assert declarations() == []


def test_the_count_sees_a_second_declaration_and_a_hand_made_list(tmp_path):
    fake = tmp_path / "cselab"
    (fake / "train").mkdir(parents=True)
    (fake / "train" / "info.py").write_text("class Info:\n    pooler: str\n    normalize: bool = False\n")
    (fake / "train" / "copy.py").write_text("def f(e):\n    return dict(pooler=e.pooler, prompt=e.prompt, denoise=1, "
                                            "head=2, bidirectional=3)\n")
    (fake / "train" / "st.py").write_text("MODES = {'avg': 'pooling_mode_mean_tokens'}\n")
    assert declarations(fake) == [
        "cselab/train/copy.py:2: lists bidirectional, denoise, head, pooler, prompt",
        "cselab/train/info.py:2: Info.pooler", "cselab/train/info.py:3: Info.normalize",
        "cselab/train/st.py:1: sentence-transformers' pooling key 'pooling_mode_mean_tokens'"]


RULES = [  # (settings, the message each way in gives)
    ({"pooler": "mask"}, "pooler: mask reads the prompt's \\[MASK\\] token"),
    ({"pooler": "avg", "denoise": True}, "denoise: template denoising subtracts the template's own"),
    ({"pooler": "avg", "prompt_pieces": True}, "prompt_pieces: a template tokenised in pieces needs a prompt"),
    ({"pooler": "avg", "pool_tokens": "last_copy", "prompt": "{}"}, "pool_tokens: last_copy pools the sentence's"),
    ({"pooler": "mask", "prompt": "{} [MASK]", "denoise": True, "head_before_denoise": True, "head": None},
     "head_before_denoise: the template's vector goes through the head before it is subtracted; it needs denoise "
     "and a head"),
    ({"pooler": "avg", "prompt": "no slot"}, "prompt: 'no slot' must contain '\\{\\}'"),
]


@pytest.mark.parametrize(("settings", "message"), RULES)
def test_every_way_in_meets_the_same_rules(settings, message, tmp_path):
    with pytest.raises(ConfigError, match=f"^{message}"):
        Encoding(**settings)
    overrides = [f"encoder.{key}={json.dumps(value)}" for key, value in settings.items()]
    with pytest.raises(ConfigError, match=f"^encoder.{message}"):
        load_method("simcse", overrides)
    path = tmp_path / CHECKPOINT_FILE
    path.write_text(json.dumps({"format": "cselab-checkpoint", "version": 1, **settings}))
    with pytest.raises(ModelError, match=f"{path}: {message}"):
        read_checkpoint_info(path)


def test_sentence_transformers_folders_that_lowercase_are_encoded_as_that_library_does(tiny_roberta_dir, tmp_path):
    """sentence-transformers' ``do_lower_case``: version 6 writes it into the tokenizer's normalizer, which cselab
    reads with the tokenizer; earlier versions, and cselab's own checkpoints of its modules, into
    ``sentence_bert_config.json``, which cselab now reads as ``lowercase`` (before, it read the pooling and ignored
    it)."""
    transformer = models.Transformer(str(tiny_roberta_dir), do_lower_case=True)
    model = SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_word_embedding_dimension(),
                                                                     "mean")], device="cpu")
    model.save(str(tmp_path / "st6"))
    np.testing.assert_allclose(load_encoder(str(tmp_path / "st6"), device="cpu", cache=False).encode(SENTENCES),
                               SentenceTransformer(str(tmp_path / "st6"), device="cpu").encode(SENTENCES), atol=1e-5)
    encoder = TrainingEncoder.from_pretrained(tiny_roberta_dir, 32, pooler="avg", lowercase=True).eval()
    save_checkpoint(tmp_path / "own", encoder, CheckpointInfo(pooler="avg", lowercase=True, max_length=32))
    (tmp_path / "own" / CHECKPOINT_FILE).unlink()  # a sentence-transformers folder of the earlier form, as such
    ours = load_encoder(str(tmp_path / "own"), device="cpu", cache=False)
    assert ours.encoding.lowercase and ours.describe()["lowercase"] is True
    theirs = SentenceTransformer(str(tmp_path / "own"), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(ours.encode(SENTENCES), theirs, atol=1e-5)
    cased = TransformerEncoder(ours.model, ours.tokenizer, ours.encoding, lowercase=False)  # a byte-level BPE: cased
    assert not np.allclose(cased.encode(SENTENCES), theirs, atol=1e-3)


@pytest.mark.parametrize(("pooler", "prompt"), [("avg", None), ("mask", "This sentence : ' {} ' means <mask>.")])
def test_a_lowercasing_method_leaves_checkpoints_that_lowercase_in_cselab_and_sentence_transformers(
        tiny_roberta_dir, tmp_path, pooler, prompt):
    prompt = prompt and prompt.replace("<mask>", "[MASK]")
    encoder = TrainingEncoder.from_pretrained(tiny_roberta_dir, 32, pooler=pooler, prompt=prompt,
                                              lowercase=True).eval()
    method = load_method("simcse", [f"encoder.pooler={pooler}", f"encoder.prompt={json.dumps(prompt)}",
                                    "encoder.lowercase=true", "encoder.head=null"])
    at_test = method.encoder.at_test(encoder.view.limit, False)
    info = read_checkpoint_info(save_checkpoint(tmp_path / "best", encoder, CheckpointInfo.of(at_test)) /
                                CHECKPOINT_FILE)
    assert info.lowercase and info.encoding == at_test
    expected = encoder.embed(SENTENCES).detach().numpy()
    np.testing.assert_allclose(encoder.embed([s.lower() for s in SENTENCES]).detach().numpy(), expected)
    np.testing.assert_allclose(load_encoder(str(tmp_path / "best"), device="cpu", cache=False).encode(SENTENCES),
                               expected, atol=1e-5)
    model = SentenceTransformer(str(tmp_path / "best"), device="cpu", trust_remote_code=prompt is not None)
    np.testing.assert_allclose(model.encode(SENTENCES), expected, atol=1e-5)
