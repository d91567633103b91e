"""A head kept at test and denoising in the checkpoint (``encoder.head_at_test``, ``encoder.denoise_at_test``,
``encoder.head_before_denoise``): PromptBERT's supervised runs, whose evaluation encodes through the trained head and
subtracts the template's own [MASK] vector."""

import json

import pytest
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from cselab.cli import main
from cselab.encoders.checkpoint import read_checkpoint_info
from cselab.encoders.heads import HEAD_FILE
from cselab.encoders.loading import load_encoder
from cselab.errors import ConfigError, ModelError
from cselab.train.config.methods import load_method
from cselab.train.model import save_checkpoint
from cselab.train.out.checkpoint import Checkpoints
from cselab.train.run.setup import build_encoder

SENTENCES = ["A man plays a guitar.", "Two dogs run across a wide green field.", "It rains."]
TEMPLATE = ('This sentence of "', '" means [MASK] .')


def nli_csv(folder):
    rows = [(f"Sentence {i} is here.", f"Here is sentence {i}.", f"Sentence {i} is not here.") for i in range(40)]
    path = folder / "nli_for_simcse.csv"
    path.write_text("sent0,sent1,hard_neg\n" + "".join(f'"{a}","{b}","{c}"\n' for a, b, c in rows))
    return path


@pytest.fixture(scope="module")
def sup_run(tmp_path_factory, tiny_bert_dir, data_dir):
    """promptbert-sup trained two steps on a tiny BERT from an NLI table."""
    folder = tmp_path_factory.mktemp("promptbert-sup")
    out = folder / "run"
    assert main(["train", "--method", "promptbert-sup", "--model", str(tiny_bert_dir), "--data",
                 str(nli_csv(folder)), "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out),
                 "--set", "training.batch_size=8", "--set", "training.max_steps=2", "--set",
                 "training.eval_steps=2", "--set", "training.lr=1e-3"]) == 0
    return out


def released_vectors(best, sentences):
    """evaluation.py of kongds/Prompt-BERT at 690ba6e with --mask_embedding_sentence_org_mlp and
    --mask_embedding_sentence_delta (run.sh sup-bert), restated: the template alone, its tokens after the sentence's
    place moved on by each length (get_delta, 47-70), each sentence filled in (193-202, without the full stop it
    adds), the [MASK] state through the head transform less the template's through it (271-280)."""
    model, tokenizer = AutoModel.from_pretrained(best).eval(), AutoTokenizer.from_pretrained(best)
    weights = load_file(best / HEAD_FILE)
    dense = torch.nn.Linear(*weights["dense.weight"].shape[::-1])
    norm = torch.nn.LayerNorm(weights["LayerNorm.weight"].shape[0], eps=model.config.layer_norm_eps)
    dense.load_state_dict({"weight": weights["dense.weight"], "bias": weights["dense.bias"]})
    norm.load_state_dict({"weight": weights["LayerNorm.weight"], "bias": weights["LayerNorm.bias"]})

    def head(x):
        return norm(torch.nn.functional.gelu(dense(x)))
    before, after = TEMPLATE[0], TEMPLATE[1].replace("[MASK]", tokenizer.mask_token)
    alone = tokenizer([before + after], return_tensors="pt")["input_ids"].repeat(64, 1)
    positions = torch.arange(alone.shape[1]).repeat(64, 1)
    positions[:, len(tokenizer.encode(before)) - 1:] += torch.arange(64).unsqueeze(-1)
    with torch.no_grad():
        delta = model(input_ids=alone, attention_mask=torch.ones_like(alone),
                      position_ids=positions).last_hidden_state[alone == tokenizer.mask_token_id]
        batch = tokenizer([before + s + after for s in sentences], return_tensors="pt", padding=True)
        states = model(**batch).last_hidden_state[batch["input_ids"] == tokenizer.mask_token_id]
        return head(states) - head(delta[batch["attention_mask"].sum(-1) - alone.shape[1]])


@pytest.mark.slow
def test_the_checkpoint_keeps_the_head_and_denoises_as_the_released_evaluation(sup_run, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    best = sup_run / "best"
    info = json.loads((best / "cselab.json").read_text())
    assert info["head"] == {"kind": "mlm_transform", "activation": "gelu", "eps": 1e-12}
    assert info["denoise"] and info["head_before_denoise"] and (best / HEAD_FILE).is_file()
    encoder = load_encoder(str(best), cache=False)
    ours = encoder.encode(SENTENCES)
    torch.testing.assert_close(torch.from_numpy(ours), released_vectors(best, SENTENCES), atol=1e-5, rtol=1e-5)
    model = SentenceTransformer(str(best), device="cpu", trust_remote_code=True)
    assert abs(ours - model.encode(SENTENCES)).max() < 1e-6
    model.to(torch.float64)  # the kept head moves with the model (as to a GPU)
    assert abs(ours - model.encode(SENTENCES)).max() < 1e-5
    # the trained head, not the run's first one (set_seed(training.seed) before the encoder is built, as setup)
    set_seed(load_method("promptbert-sup").training.seed)
    start = build_encoder(load_method("promptbert-sup"), str(tiny_bert_dir))
    assert not torch.equal(start.head.dense.weight, encoder.head.dense.weight)


def test_a_checkpoint_naming_a_head_without_its_weights_is_refused(sup_run, tmp_path):
    import shutil

    copy = tmp_path / "best"
    shutil.copytree(sup_run / "best", copy)
    (copy / HEAD_FILE).unlink()
    with pytest.raises(ModelError, match="head.safetensors: missing beside cselab.json"):
        load_encoder(str(copy), cache=False)
    (copy / HEAD_FILE).write_bytes((sup_run / "best" / HEAD_FILE).read_bytes())
    settings = json.loads((copy / "cselab.json").read_text())
    (copy / "cselab.json").write_text(json.dumps({**settings, "head": {"kind": "mlp"}}))
    with pytest.raises(ModelError, match="not the weights of a mlp head of width 32"):
        load_encoder(str(copy), cache=False)


@pytest.mark.parametrize("damage", ["empty", "truncated", "not safetensors"])
def test_a_damaged_head_file_is_one_line_naming_it(sup_run, tmp_path, damage):
    import shutil

    copy = tmp_path / "best"
    shutil.copytree(sup_run / "best", copy)
    data = (copy / HEAD_FILE).read_bytes()
    (copy / HEAD_FILE).write_bytes({"empty": b"", "truncated": data[:len(data) // 2],
                                    "not safetensors": b"{}garbage"}[damage])
    with pytest.raises(ModelError, match=rf"{copy / HEAD_FILE}: not a readable weights file \("):
        load_encoder(str(copy), cache=False)


def test_restarting_from_best_restores_the_kept_head(sup_run, tiny_bert_dir, tmp_path):
    method = load_method("promptbert-sup")
    core = build_encoder(method, str(tiny_bert_dir))
    saved = {key: value.clone() for key, value in core.head.state_dict().items()}
    save_checkpoint(tmp_path / "best", core, read_checkpoint_info(sup_run / "best" / "cselab.json"))
    (tmp_path / "best" / "training.json").write_text(json.dumps({"step": 2, "best": 0.5}))
    with torch.no_grad():
        core.head.dense.weight.add_(1.0)
    Checkpoints(tmp_path, Accelerator(cpu=True)).restore_best(core)
    assert all(torch.equal(core.head.state_dict()[key], value) for key, value in saved.items())


@pytest.mark.parametrize(("overrides", "message"), [
    (["encoder.head=projection"], "encoder.head_at_test: a checkpoint keeps a head of kind mlp or mlm_transform, "
                                  "not 'projection'"),
    (["encoder.head=null", "encoder.head_before_denoise=false"], "not no head"),
    (["encoder.denoise=false", "encoder.head_before_denoise=false"],
     "encoder.denoise_at_test: checkpoints denoise as training does; set encoder.denoise too"),
    (["encoder.head_at_test=false"], "encoder.head_before_denoise: the template's vector goes through the head"),
])
def test_settings_that_do_not_go_together_are_refused_when_the_method_loads(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_method("promptbert-sup", overrides)


@pytest.mark.slow
def test_supervised_simcse_keeps_its_mlp_as_the_released_checkpoint_does(tiny_bert_dir, data_dir, tmp_path):
    """simcse_to_huggingface.py renames the trained MLP the model's pooler layer: the vectors are tanh(W [CLS] + b)
    with the trained W and b, in cselab and in sentence-transformers alike."""
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "run"
    assert main(["train", "--method", "simcse-sup", "--model", str(tiny_bert_dir), "--data", str(nli_csv(tmp_path)),
                 "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out), "--set",
                 "training.batch_size=8", "--set", "training.max_steps=2", "--set", "training.eval_steps=2"]) == 0
    best = out / "best"
    weights = load_file(best / HEAD_FILE)
    model, tokenizer = AutoModel.from_pretrained(best).eval(), AutoTokenizer.from_pretrained(best)
    with torch.no_grad():
        cls = model(**tokenizer(SENTENCES, return_tensors="pt", padding=True)).last_hidden_state[:, 0]
        released = torch.tanh(cls @ weights["dense.weight"].T + weights["dense.bias"])
    ours = load_encoder(str(best), cache=False).encode(SENTENCES)
    torch.testing.assert_close(torch.from_numpy(ours), released, atol=1e-6, rtol=1e-5)
    theirs = SentenceTransformer(str(best), device="cpu", trust_remote_code=True).encode(SENTENCES)
    assert abs(theirs - ours).max() < 1e-6


def test_a_byte_level_bpe_denoises_at_test_with_the_released_template(tiny_roberta_dir):
    """evaluation.py get_delta (47-70) for run.sh sup-roberta's template, restated: *sent_0* a space, underscores
    spaces, stripped, a run of three spaces made one; the sentence's place after the stripped side before it."""
    from cselab.encoders.transformer import TransformerEncoder

    tokenizer = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    template = "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"  # run.sh:116
    text = template.replace("*mask*", tokenizer.mask_token).replace("*sep+*", "").replace("*cls*", "").replace(
        "*sent_0*", " ")
    released_before = len(tokenizer.encode(text.split(" ")[0].replace("_", " ").strip())) - 2 + 1
    released_ids = tokenizer(text.replace("_", " ").strip().replace("   ", " "))["input_ids"]
    prompt = load_method("promptbert-sup", profile="roberta-base").encoder.prompt
    encoder = TransformerEncoder(AutoModel.from_pretrained(tiny_roberta_dir), tokenizer, pooler="mask", prompt=prompt,
                                 denoise=True)
    assert encoder.template_ids == released_ids and encoder._before_sentence == released_before
