"""The embedding cache: vectors served again only while their chunk checks out, keyed by everything they depend on;
and the provenance results and run folders record."""

import hashlib
import json
import shutil
import subprocess
import sys

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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- Every member of the key, changed, is a miss (issue 34) ------------------------------------------------------

@pytest.fixture(scope="module")
def dense_stack(tiny_bert_dir, tmp_path_factory):
    """A sentence-transformers folder whose stack (Transformer, Pooling, Dense) cselab runs through the library."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    folder = tmp_path_factory.mktemp("st") / "dense"
    modules = [models.Transformer(str(tiny_bert_dir)), models.Pooling(32, pooling_mode="mean"),
               models.Dense(32, 8)]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def _new_weights(path):
    from safetensors.torch import load_file, save_file

    save_file({name: tensor + 0.5 for name, tensor in load_file(str(path)).items()}, str(path))


def _edit_json(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


FOLDER_CHANGES = {  # a change to the model folder, and the vectors it changes (or None: the key must change anyway)
    "a later module's weights (2_Dense)": lambda f: _new_weights(next((f / "2_Dense").glob("*.safetensors"))),
    "a later module's config (2_Dense/config.json)": lambda f: _edit_json(f / "2_Dense" / "config.json",
                                                                          activation_function="torch.nn.modules."
                                                                                              "activation.ReLU"),
    "a tokenizer file": lambda f: _edit_json(f / "tokenizer_config.json", model_max_length=64),
    "the transformer's weights": lambda f: _new_weights(f / "model.safetensors"),
}


@pytest.mark.parametrize("change", FOLDER_CHANGES)
def test_a_changed_file_of_any_module_is_a_miss(dense_stack, tmp_path, cache_dir, change):
    folder = tmp_path / "model"
    shutil.copytree(dense_stack, folder)
    before = load_encoder(str(folder), device="cpu")
    old = before.encode(SENTENCES)
    FOLDER_CHANGES[change](folder)
    after = load_encoder(str(folder), device="cpu")
    assert after.cache.folder != before.cache.folder
    vectors = after.encode(SENTENCES)
    assert after.cache.summary()["served"] == 0 and after.cache.summary()["encoded"] == 4
    np.testing.assert_array_equal(vectors, load_encoder(str(folder), device="cpu", cache=False).encode(SENTENCES))
    if change.startswith(("a later module's weights", "the transformer")):
        assert not np.allclose(vectors, old)  # what the old key would have served
    assert "2_Dense/model.safetensors" in after.weights


def _code(version="0.1.0", commit="a" * 40, dirty=False, source_sha256="b" * 64):
    return {"version": version, "commit": commit, "dirty": dirty, "changed": [], "source_sha256": source_sha256}


CODE_CHANGES = {"cselab's version": {"version": "0.2.0"}, "the commit": {"commit": "c" * 40},
                "a dirty tree": {"dirty": True}, "the package's files": {"source_sha256": "d" * 64}}
VERSION_CHANGES = ("torch", "transformers", "sentence-transformers")


@pytest.mark.parametrize("member", [*CODE_CHANGES, *VERSION_CHANGES, "the device"])
def test_the_code_the_libraries_and_the_device_are_members_of_the_key(tiny_bert_dir, cache_dir, monkeypatch,
                                                                       member):
    from cselab.encoders import cache

    real_versions = cache.package_versions
    monkeypatch.setattr(cache, "source", lambda: _code())
    first = load_encoder(str(tiny_bert_dir), device="cpu")
    first.encode(SENTENCES)
    if member in CODE_CHANGES:
        monkeypatch.setattr(cache, "source", lambda: _code(**CODE_CHANGES[member]))
    elif member in VERSION_CHANGES:
        monkeypatch.setattr(cache, "package_versions",
                            lambda names: {**real_versions(names), member: "99.0"})
    if member == "the device":
        assert cache.cache_key("x", {}, "cuda") != cache.cache_key("x", {}, "cpu")
        return
    second = load_encoder(str(tiny_bert_dir), device="cpu")
    second.encode(SENTENCES)
    assert second.cache.folder != first.cache.folder and second.cache.summary()["served"] == 0


def test_the_real_key_records_the_code_that_made_the_vectors(tiny_bert_dir, cache_dir):
    from cselab.provenance import source

    encoder = load_encoder(str(tiny_bert_dir), device="cpu")
    encoder.encode(SENTENCES)
    key = json.loads((encoder.cache.folder / "key.json").read_text())
    code = source()
    assert key["cselab"] == {name: code[name] for name in ("version", "commit", "dirty", "source_sha256")}
    assert len(key["cselab"]["source_sha256"]) == 64 and key["model_files_sha256"]


def test_a_chunk_moved_into_another_keys_folder_is_refused(tiny_bert_dir, cache_dir):
    avg = load_encoder(str(tiny_bert_dir), device="cpu")
    avg.encode(SENTENCES)
    cls = load_encoder(str(tiny_bert_dir), device="cpu", pooler="cls")
    (chunk,) = avg.cache.folder.glob("*.npz")
    cls.cache.folder.mkdir(parents=True)
    shutil.move(chunk, cls.cache.folder / chunk.name)
    with pytest.warns(UserWarning, match="not this folder's.*another key"):
        vectors = cls.encode(SENTENCES)
    assert cls.cache.summary()["served"] == 0
    np.testing.assert_array_equal(vectors, load_encoder(str(tiny_bert_dir), device="cpu", pooler="cls",
                                                        cache=False).encode(SENTENCES))
    assert not (cls.cache.folder / chunk.name).exists()


def test_a_folder_replaced_while_it_loads_is_refused(tiny_bert_dir, tmp_path, cache_dir, data_dir, monkeypatch,
                                                     capsys):
    from cselab.encoders import loading

    best = tmp_path / "run" / "best"
    shutil.copytree(tiny_bert_dir, best)
    newer = tmp_path / "run" / "best.tmp"
    shutil.copytree(tiny_bert_dir, newer)
    FOLDER_CHANGES["the transformer's weights"](newer)
    real = loading.load_pretrained

    def replaced_meanwhile(path, pooler=None):  # as a training run's evaluation does: best -> best.old, tmp -> best
        best.rename(best.with_name("best.old"))
        newer.rename(best)
        return real(path, pooler)

    monkeypatch.setattr(loading, "load_pretrained", replaced_meanwhile)
    assert main(["probe", "run", "--model", str(best), "--suite", "sts", "--tasks", "stsb", "--limit", "20",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert f"error: {best}: changed while it was being loaded (config.json, model.safetensors" in err
    assert not (tmp_path / "r.json").exists() and not _chunks(cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["a file where the folder goes", "writes refused (read-only)",
                                   "reads refused (no permission)"])
def test_an_unusable_cache_folder_is_a_warning_and_the_scores_are_those_without_it(tiny_bert_dir, tmp_path,
                                                                                   monkeypatch, data_dir, fault):
    import errno

    from cselab.encoders import cache

    argv = ["probe", "run", "--model", str(tiny_bert_dir), "--device", "cpu", "--suite", "sts", "--tasks", "stsb",
            "--limit", "20", "--data-dir", str(data_dir)]
    assert main([*argv, "--no-cache", "--out", str(tmp_path / "none.json")]) == 0
    folder = tmp_path / "embeddings"
    monkeypatch.setenv("CSELAB_CACHE_DIR", str(folder))
    if fault == "a file where the folder goes":
        folder.write_text("not a folder")
    elif fault.startswith("writes"):
        def read_only(path, data):
            raise OSError(errno.EROFS, "Read-only file system", str(path))

        monkeypatch.setattr(cache, "write_bytes_atomic", read_only)
    else:
        assert main([*argv, "--out", str(tmp_path / "warm.json")]) == 0  # chunks to read

        real = cache.Path.read_bytes

        def refused(self):  # the cache's files only
            if self.is_relative_to(folder):
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(cache.Path, "read_bytes", refused)
    with pytest.warns(UserWarning, match="embedding cache: cannot .* encoding goes on without the cache"):
        assert main([*argv, "--out", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["sts"] == json.loads((tmp_path / "none.json").read_text())["sts"]
    assert result["embedding_cache"]["failed"].startswith("cannot ")


def test_a_pooler_from_a_package_keys_the_vectors_by_its_version(tmp_path, monkeypatch, own_registry):
    from cselab.encoders.cache import cache_key
    from tests.conftest import installed

    (tmp_path / "acme_pool.py").write_text(
        "from cselab.encoders.pooling import Pooler\nfrom cselab.registry import register\n\n\n"
        "@register('pooler', 'acme_mean')\nclass AcmeMean(Pooler):\n    \"\"\"A package's pooler.\"\"\"\n")
    installed(tmp_path, monkeypatch, "acme-pool", "cselab.poolers", "acme_pool")
    own_registry._DISCOVERED.pop("cselab.poolers")
    monkeypatch.delitem(sys.modules, "acme_pool", raising=False)
    first = cache_key("x", {"pooler": "acme_mean"}, "cpu")
    assert first["pooler_package"] == "acme-pool==0.1" and "pooler_package" not in cache_key("x", {"pooler": "avg"},
                                                                                             "cpu")
    installed(tmp_path, monkeypatch, "acme-pool", "cselab.poolers", "acme_pool", "0.2")  # another release
    own_registry._DISCOVERED.pop("cselab.poolers")
    assert cache_key("x", {"pooler": "acme_mean"}, "cpu")["pooler_package"] == "acme-pool==0.2"
