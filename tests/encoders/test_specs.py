"""A model spec checked before any model library loads: a mistyped folder is "no model folder" with the closest
name beside it, an offline hub id not in the cache is one line with no retries."""

import pytest

from cselab.cli import main
from cselab.encoders.specs import EncoderNotFoundError, check_spec, looks_like_path
from tests.conftest import cache_as_hub_model
from tests.runs import one_line_error


def test_what_reads_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not looks_like_path("org/name") and not looks_like_path("my-model")
    assert looks_like_path("runs/osscse/bset") and looks_like_path("./model") and looks_like_path("~/model")
    (tmp_path / "runs").mkdir()
    assert looks_like_path("runs/best")  # its first part is a folder here


def test_a_mistyped_folder_names_the_closest_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "osscse" / "best").mkdir(parents=True)
    with pytest.raises(EncoderNotFoundError, match=r"^no model folder at runs/osscse/bset; did you mean "
                                                   r"runs/osscse/best\?$"):
        check_spec("runs/osscse/bset")
    assert main(["probe", "run", "--model", "runs/osscse/bset"]) == 2
    assert one_line_error(capsys) == "error: no model folder at runs/osscse/bset; did you mean runs/osscse/best?"
    with pytest.raises(EncoderNotFoundError, match=r"^no model folder at runs/elsewhere/x$"):
        check_spec("runs/elsewhere/x")


def test_an_offline_hub_id_is_one_line_at_once(capsys, tmp_path, tiny_bert_dir):
    """The tests run with HF_HUB_OFFLINE set: no retry, no request, one line."""
    with pytest.raises(EncoderNotFoundError, match="the Hugging Face hub cannot be reached from here"):
        check_spec("my-model")
    assert main(["probe", "run", "--model", "my-model", "--out", str(tmp_path / "r.json")]) == 2
    assert "'my-model' is not a local folder" in one_line_error(capsys)
    check_spec(cache_as_hub_model(tiny_bert_dir, "cselab-test/spec-check"))  # in the local cache: fine
    for spec in ("minilm", "bow", "tfidf:words.txt", "package.module:factory", str(tiny_bert_dir)):
        check_spec(spec)
