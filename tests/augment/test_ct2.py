"""The ctranslate2 back-translation backend on tiny random Marian and FSMT models (tests/augment/tiny_mt.py): its
outputs against hf's, its conversion cache, its settings and its place in the augment cache."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from cselab.augment import ct2
from cselab.augment.backtranslate import HFTranslator
from cselab.augment.cache import AugmentConfig, build_cache
from cselab.augment.ct2 import CT2Translator
from cselab.augment.decoding import Decoding
from cselab.data.augmented import MANIFEST, load_cache
from cselab.errors import ConfigError, ModelError
from cselab.locking import FolderLock
from tests.augment.test_cache import write_corpus
from tests.augment.tiny_mt import save_fsmt, save_marian

pytest.importorskip("ctranslate2")

SENTENCES = ["The old bridge crosses the valley.", "A small bird sings in the morning near the river bank today.",
             "Our team won.", "The committee meets every week to discuss the budget of the museum and its new wing.",
             "My neighbour likes fresh bread.", "The river flows to the sea.", "It rained.",
             "Several researchers compared the two methods on every benchmark they could find."]
GREEDY = Decoding(num_candidates=1, num_beams=1, max_length=16, compute_type="float32", batch_sentences=3)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-mt")
    return {"marian": str(save_marian(folder / "marian")), "fsmt": str(save_fsmt(folder / "fsmt"))}


def both(folder: str, decoding: Decoding):
    pair = [(folder, folder)]
    return HFTranslator(pair, decoding, device="cpu"), CT2Translator(pair, decoding, device="cpu")


@pytest.mark.parametrize("family", ["marian", "fsmt"])
def test_greedy_float32_outputs_equal_hf_token_for_token(tiny_models, family):
    hf, fast = both(tiny_models[family], GREEDY)
    ours = fast.translate(fast.pairs[0][0], SENTENCES)
    assert ours == hf.translate(hf.pairs[0][0], SENTENCES)
    assert len({candidates[0] for candidates in ours}) >= 5  # the outputs follow the input: equality says something
    assert fast.round_trip(SENTENCES) == hf.round_trip(SENTENCES)


@pytest.mark.parametrize("family", ["marian", "fsmt"])
def test_beam_search_candidates_equal_hf_in_order(tiny_models, family):
    beams = Decoding(num_candidates=3, num_beams=4, max_length=12, compute_type="float32", batch_sentences=4)
    hf, fast = both(tiny_models[family], beams)
    ours = fast.translate(fast.pairs[0][1], SENTENCES, 3)
    assert ours == hf.translate(hf.pairs[0][1], SENTENCES, 3) and all(len(c) == 3 for c in ours)


def test_int8_is_an_approximation_that_changes_outputs(tiny_models):
    """The comparison above can fail: int8 weights change the tiny models' greedy outputs (docs/augment.md gives
    the share measured on transformer-base)."""
    folder = tiny_models["fsmt"]
    exact = CT2Translator([(folder, folder)], GREEDY, device="cpu")
    quantized = CT2Translator([(folder, folder)], replace(GREEDY, compute_type="int8"),
                              device="cpu")
    assert quantized.name.startswith("ctranslate2:int8:")
    assert exact.translate(exact.pairs[0][0], SENTENCES) != quantized.translate(quantized.pairs[0][0], SENTENCES)


def test_sampling_is_seeded_per_call(tiny_models):
    folder = tiny_models["marian"]
    sampled = Decoding(num_candidates=3, decoding="sample", max_length=10, batch_sentences=4, compute_type="float32")
    fast = CT2Translator([(folder, folder)], sampled, device="cpu")
    first = fast.translate(fast.pairs[0][1], SENTENCES, 3)
    fast.translate(fast.pairs[0][1], SENTENCES[:2], 3)  # other draws in between
    assert fast.translate(fast.pairs[0][1], SENTENCES, 3) == first
    assert len({c for candidates in first for c in candidates}) > len(SENTENCES)  # draws, not one beam
    other = CT2Translator([(folder, folder)], replace(sampled, seed=1), device="cpu")
    assert other.translate(other.pairs[0][1], SENTENCES, 3) != first


def test_a_model_is_converted_once_per_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CSELAB_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "marian"
    save_marian(source)
    conversions = []
    real = ct2.convert
    monkeypatch.setattr(ct2, "convert", lambda *args: conversions.append(args[2]) or real(*args))
    first = ct2.converted(source, "float32")
    assert ct2.converted(source, "float32") == first and conversions == ["float32"]
    record = json.loads((first / "cselab-conversion.json").read_text())
    assert record["compute_type"] == "float32" and record["loader"] == ct2.LOADER_VERSION
    # each member of the key, changed, converts again into another folder
    changed = [ct2.converted(source, "int8")]
    monkeypatch.setattr(ct2, "LOADER_VERSION", ct2.LOADER_VERSION + 1)
    changed.append(ct2.converted(source, "float32"))
    import ctranslate2

    monkeypatch.setattr(ctranslate2, "__version__", "0.0.0")
    changed.append(ct2.converted(source, "float32"))
    with open(source / "config.json", "a") as handle:
        handle.write("\n")
    changed.append(ct2.converted(source, "float32"))
    assert len({first, *changed}) == 5 and len(conversions) == 5


def test_a_conversion_killed_before_its_record_is_done_again(tmp_path):
    source = save_marian(tmp_path / "marian")
    folder = ct2.converted(source, "float32")
    (folder / "cselab-conversion.json").unlink()
    (folder / "model.bin").write_bytes(b"torn")
    assert ct2.converted(source, "float32") == folder and (folder / "cselab-conversion.json").is_file()
    assert (folder / "model.bin").stat().st_size > 100


def test_a_second_writer_waits_for_the_lock_then_proceeds(tmp_path):
    path = tmp_path / "x.lock"
    holder = FolderLock(path, ModelError, "elsewhere").__enter__()
    with pytest.raises(ModelError, match="being written by pid"):
        FolderLock(path, ModelError, "elsewhere", wait=0.3).__enter__()
    threading.Timer(0.5, holder.__exit__, (None, None, None)).start()
    start = time.monotonic()
    with FolderLock(path, ModelError, "elsewhere", wait=30):
        assert 0.4 < time.monotonic() - start < 10


def test_what_cannot_be_converted_or_run_is_refused_in_one_line(tiny_bert_dir, monkeypatch):
    with pytest.raises(ModelError, match="a bert model; the ctranslate2 backend converts Marian .opus-mt. and FSMT "
                                         ".WMT19. models; use backend=hf for this one"):
        ct2.converted(tiny_bert_dir, "float32")
    with pytest.raises(ConfigError, match="compute_type: float16 does not run on this cpu"):
        CT2Translator.resolved_compute_type("float16", "cpu")
    with pytest.raises(ConfigError, match="'int4' is not a ctranslate2 compute type"):
        CT2Translator.resolved_compute_type("int4", "cpu")
    with pytest.raises(ConfigError, match="int8 types are ctranslate2's"):
        AugmentConfig(backend="hf", compute_type="int8").resolved()
    with pytest.raises(ConfigError, match="num_beams: 2 beams give at most 2 candidates, and num_candidates is 4"):
        AugmentConfig(num_beams=2)
    with pytest.raises(ModelError, match="nothing/here: not a folder, and not fetched from the hub"):
        ct2.model_folder("nothing/here")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ConfigError, match=r"the ctranslate2 package is not installed; pip install "
                                          r"'cselab-toolkit\[fast\]'"):
        ct2.ctranslate2_module()


def test_each_decoding_setting_and_the_backend_key_another_cache():
    base = AugmentConfig(backend="hf", compute_type="float32")
    changes = {"backend": "ctranslate2", "decoding": "sample", "num_beams": 5, "sampling_topk": 10, "seed": 1,
               "batch_sentences": 8, "batch_tokens": 512, "max_length": 64, "compute_type": "bfloat16",
               "threads": 2}
    keys = {base.key("x")}
    for name, value in changes.items():
        keys.add(replace(base, **{name: value}).key("x"))
    assert len(keys) == len(changes) + 1


def test_an_hf_cache_is_never_served_for_ctranslate2_and_back(tiny_models, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 20)
    folder = tiny_models["fsmt"]
    common = {"hf_pivots": [[folder, folder]], "num_candidates": 1, "num_beams": 1, "max_length": 12,
              "compute_type": "float32", "chunk_size": 6, "mer_band": [0.0, 1.0]}  # every candidate kept: compared
    built = {backend: build_cache(corpus, tmp_path / "out", AugmentConfig(backend=backend, **common), progress=False)
             for backend in ("hf", "ctranslate2")}
    assert built["hf"] != built["ctranslate2"]
    for backend, cache in built.items():
        manifest = json.loads((cache / MANIFEST).read_text())
        assert manifest["models"]["backtranslation"] == backend and manifest["config"]["compute_type"] == "float32"
    assert "ctranslate2" in json.loads((built["ctranslate2"] / MANIFEST).read_text())["versions"]
    rows = {backend: load_cache(cache).to_dict() for backend, cache in built.items()}
    assert rows["hf"] == rows["ctranslate2"]  # float32 greedy: the same rows by two engines
    assert all(rows["hf"]["paraphrase"])


@pytest.mark.slow
def test_a_killed_build_with_ctranslate2_resumes_to_the_same_rows(tiny_models, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 240)
    folder = tiny_models["marian"]
    settings = ["backend=ctranslate2", f"hf_pivots=[[{folder}, {folder}]]", "decoding=sample", "num_candidates=2",
                "max_length=12", "chunk_size=20", "compute_type=int8", "seed=7", "mer_band=[0.0, 1.0]"]
    command = [sys.executable, "-m", "cselab.cli", "augment", "--corpus", str(corpus), "--out", str(tmp_path / "k"),
               *[arg for item in settings for arg in ("--set", item)]]
    env = {**os.environ, "CSELAB_CACHE_DIR": str(tmp_path / "cache")}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 300
    while time.time() < deadline and len(list((tmp_path / "k").glob("*/chunk-*.parquet"))) < 3:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    (cache,) = (tmp_path / "k").iterdir()
    done = len(list(cache.glob("chunk-*.parquet")))
    assert 3 <= done < 12 and not (cache / MANIFEST).exists()
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600, env=env)
    whole = build_cache(corpus, tmp_path / "fresh", AugmentConfig.from_overrides(settings), progress=False)
    resumed = load_cache(cache).to_dict()
    assert resumed == load_cache(whole).to_dict() and all(resumed["paraphrase"])
    assert json.loads((cache / MANIFEST).read_text())["models"]["backtranslation"] == "ctranslate2"
