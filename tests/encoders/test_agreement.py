"""A checkpoint whose files disagree with its cselab.json is refused in one line naming both files, by cselab's
loader and by sentence-transformers' (which goes through it), rather than encoded one way while a file says another."""

import json
import shutil

import pytest
from sentence_transformers import SentenceTransformer

from cselab.encoders import load_encoder
from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.pretrained import BIDIRECTIONAL_TYPE, mark_bidirectional
from cselab.encoders.st_module import write_checkpoint
from cselab.errors import ModelError


@pytest.fixture(scope="module")
def checkpoint(tiny_bert_dir, tmp_path_factory):
    """A cselab checkpoint of the tiny BERT (cselab's module: a prompt), as cselab writes it."""
    encoder = load_encoder(str(tiny_bert_dir), pooler="avg", device="cpu", cache=False)
    info = CheckpointInfo(pooler="avg", prompt="This sentence : {}", max_length=32, base_model=str(tiny_bert_dir))
    return write_checkpoint(tmp_path_factory.mktemp("agreement") / "best", encoder, info)


def _copy(checkpoint, tmp_path):
    folder = tmp_path / "best"
    shutil.copytree(checkpoint, folder)
    return folder


def _edit(path, **fields):
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _refused(folder, *names):
    with pytest.raises(ModelError) as refused:
        load_encoder(str(folder), device="cpu", cache=False)
    said = str(refused.value)
    assert "\n" not in said and all(str(folder / name) in said for name in names), said
    with pytest.raises(ModelError, match="disagree"):  # through sentence-transformers' own loader too
        SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    return said


def test_a_checkpoint_whose_files_agree_loads(checkpoint):
    assert load_encoder(str(checkpoint), device="cpu", cache=False).encode(["fine"]).shape == (1, 32)


def test_bidirectional_in_cselab_json_against_config_json(checkpoint, tmp_path):
    """cselab.json says causal, config.json carries cselab's bidirectional model type (the audit's case: encoded
    causally, vectors 0.99 off, without a word); and the other way round."""
    folder = _copy(checkpoint, tmp_path)
    mark_bidirectional(folder)
    said = _refused(folder, "cselab.json", "config.json")
    assert f"cselab.json says bidirectional: false, config.json that its model type is {BIDIRECTIONAL_TYPE}" in said
    shutil.rmtree(folder)
    folder = _copy(checkpoint, tmp_path)
    _edit(folder / "cselab.json", bidirectional=True)
    assert "says bidirectional: true, config.json that its model type is not cselab's" in \
        _refused(folder, "cselab.json", "config.json")


def test_a_head_file_that_cselab_json_does_not_name(checkpoint, tmp_path):
    folder = _copy(checkpoint, tmp_path)
    (folder / "head.safetensors").write_bytes(b"weights of a head")
    assert "head.safetensors holds a head's weights, cselab.json names no head" in \
        _refused(folder, "cselab.json", "head.safetensors")


def test_an_adapter_trained_on_another_base(checkpoint, tmp_path, tiny_bert_dir):
    folder = _copy(checkpoint, tmp_path)
    (folder / "adapter").mkdir()
    (folder / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "gpt2",
                                                                        "peft_type": "LORA"}))
    assert "base model is" in _refused(folder, "cselab.json", "adapter/adapter_config.json")
    _edit(folder / "adapter" / "adapter_config.json", base_model_name_or_path=str(tiny_bert_dir))
    assert load_encoder(str(folder), device="cpu", cache=False).encode(["fine"]).shape == (1, 32)
