"""The embedding cache: vectors served again only while their chunk checks out, keyed by everything they depend on;
and the provenance results and run folders record."""

import hashlib
import json
import subprocess

import numpy as np
import pytest

from cselab.cli import main
from cselab.encoders import load_encoder

SENTENCES = ["A man is playing a guitar.", "A woman slices an onion.", "Two dogs run on the beach.", "It rains."]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "embeddings"
    monkeypatch.setenv("CSELAB_CACHE_DIR", str(folder))
    return folder


def _chunks(folder):
    return sorted(folder.glob("*/*.npz"))


def test_a_second_encoder_of_the_same_model_encodes_nothing(tiny_bert_dir, cache_dir):
    first = load_encoder(str(tiny_bert_dir), device="cpu")
    vectors = first.encode(SENTENCES)
    assert first.cache.summary()["encoded"] == 4 and len(_chunks(cache_dir)) == 1
    second = load_encoder(str(tiny_bert_dir), device="cpu")
    second._checked = None  # any encoding would fail: every vector must come from the cache
    assert np.array_equal(second.encode(SENTENCES[::-1]), vectors[::-1])
    assert second.cache.summary()["served"] == 4 and second.cache.summary()["encoded"] == 0
    key = json.loads((_chunks(cache_dir)[0].parent / "key.json").read_text())
    assert key["settings"]["pooler"] == "avg" and key["settings"]["dtype"] == "torch.float32"
    assert key["device"] == "cpu" and key["versions"]["torch"]


@pytest.mark.parametrize("damage", ["truncated", "edited", "not an archive"])
def test_a_damaged_chunk_is_encoded_again_with_a_warning(tiny_bert_dir, cache_dir, damage):
    expected = load_encoder(str(tiny_bert_dir), device="cpu", cache=False).encode(SENTENCES)
    load_encoder(str(tiny_bert_dir), device="cpu").encode(SENTENCES)
    (chunk,) = _chunks(cache_dir)
    data = chunk.read_bytes()
    if damage == "truncated":
        chunk.write_bytes(data[: len(data) // 2])
    elif damage == "edited":  # one float of one vector changed, the archive still parses
        with np.load(chunk) as archive:
            arrays = dict(archive)
        arrays["vectors"][1, 3] += 1.0
        with open(chunk, "wb") as handle:
            np.savez(handle, **arrays)
    else:
        chunk.write_text("not an archive")
    again = load_encoder(str(tiny_bert_dir), device="cpu")
    with pytest.warns(UserWarning, match=f"{chunk.name} is damaged"):
        vectors = again.encode(SENTENCES)
    assert np.array_equal(vectors, expected) and again.cache.summary()["encoded"] == 4
    (sound,) = _chunks(cache_dir)  # the damaged one replaced by a sound one (the same bytes: the same name)
    assert hashlib.sha256(sound.read_bytes()).hexdigest() == sound.stem


def test_each_setting_a_vector_depends_on_has_its_own_key(tiny_bert_dir, cache_dir):
    avg = load_encoder(str(tiny_bert_dir), device="cpu")
    cls = load_encoder(str(tiny_bert_dir), device="cpu", pooler="cls")
    short = load_encoder(str(tiny_bert_dir), device="cpu", max_length=4)
    assert len({avg.cache.folder, cls.cache.folder, short.cache.folder}) == 3
    assert not np.allclose(avg.encode(SENTENCES), cls.encode(SENTENCES))


def test_no_cache_keeps_nothing_and_the_size_cap_removes_the_oldest(tiny_bert_dir, cache_dir, monkeypatch):
    assert load_encoder(str(tiny_bert_dir), device="cpu", cache=False).cache is None
    monkeypatch.setenv("CSELAB_CACHE_MAX_MB", str(1.5 * 1300 / 2**20))  # room for one small chunk, not two
    encoder = load_encoder(str(tiny_bert_dir), device="cpu")
    encoder.encode(SENTENCES[:2])
    oldest = _chunks(cache_dir)
    encoder.encode(SENTENCES[2:])
    assert len(_chunks(cache_dir)) == 1 and _chunks(cache_dir) != oldest
    monkeypatch.setenv("CSELAB_CACHE_MAX_MB", "none")
    with pytest.raises(ValueError, match="CSELAB_CACHE_MAX_MB='none'"):  # before any sentence is encoded
        load_encoder(str(tiny_bert_dir), device="cpu")


def test_a_second_probe_run_is_served_from_the_cache_with_the_same_scores(tiny_bert_dir, cache_dir, data_dir,
                                                                            tmp_path, capsys):
    runs = []
    for name in ("cold", "warm"):
        assert main(["probe", "run", "--model", str(tiny_bert_dir), "--device", "cpu", "--suite", "sts", "--limit",
                     "20", "--data-dir", str(data_dir), "--out", str(tmp_path / f"{name}.json")]) == 0
        runs.append(json.loads((tmp_path / f"{name}.json").read_text()))
    printed = capsys.readouterr().out
    cold, warm = runs[0]["embedding_cache"], runs[1]["embedding_cache"]
    assert cold["encoded"] > 0  # (a sentence two tasks share is served to the second from the cache)
    assert warm == {**cold, "served": cold["served"] + cold["encoded"], "encoded": 0}
    assert runs[1]["sts"] == runs[0]["sts"] and "sentence(s) served, 0 encoded" in printed
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--device", "cpu", "--suite", "sts", "--limit", "20",
                 "--data-dir", str(data_dir), "--no-cache", "--out", str(tmp_path / "none.json")]) == 0
    assert json.loads((tmp_path / "none.json").read_text())["embedding_cache"] is None


def _sha256sum(path):
    return subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]


def test_results_and_run_folders_name_the_weights_sha256sum_gives(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    out = tmp_path / "run"
    settings = ["training.batch_size=16", "training.max_length=24", "training.max_steps=1", "training.eval_steps=1"]
    assert main(["train", "--method", "simcse", "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
                 "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out),
                 *(word for setting in settings for word in ("--set", setting))]) == 0
    provenance = json.loads((out / "run.json").read_text())["provenance"]
    assert provenance["weights_sha256"] == {"model.safetensors": _sha256sum(tiny_bert_dir / "model.safetensors")}
    assert provenance["command"].startswith("cselab train --method simcse")
    assert provenance["device"]["type"] == "cpu" and provenance["device"]["cpu"]
    assert set(provenance["determinism"]) >= {"deterministic_algorithms", "cudnn_deterministic"}
    assert provenance["cselab"]["version"]
    assert main(["probe", "run", "--model", str(out / "best"), "--suite", "sts", "--tasks", "stsb", "--limit", "20",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "best.json")]) == 0
    result = json.loads((tmp_path / "best.json").read_text())["provenance"]
    assert result["weights_sha256"] == {"model.safetensors": _sha256sum(out / "best" / "model.safetensors")}
    assert result["weights_sha256"] != provenance["weights_sha256"]
    # a resumed run keeps its first session's provenance and adds its own
    assert main(["train", "--method", str(out / "config.yaml"), "--model", str(tiny_bert_dir), "--data",
                 str(tiny_cache), "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out)]) == 0
    identity = json.loads((out / "run.json").read_text())
    assert identity["provenance"] == provenance and len(identity["resumed"]) == 1
