"""Fault injection: damaged run folders and caches, a different run on the same OUT, planted pickles, two writers,
nonsense values. Each case ends either in the identical result or in a one-line error (exit 2) that names the file
or value, with nothing lost (the previous best checkpoint still loads) and no traceback. The kills at random
points are tests/train/test_trainer.py::test_resume_after_a_kill_matches_a_straight_run and
tests/augment/test_cache.py::test_resume_after_a_kill_gives_the_same_rows."""

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from cselab.augment.cache import AugmentConfig, build_cache
from cselab.cli import main
from cselab.data.augmented import load_cache
from cselab.encoders import load_encoder
from cselab.train import state as training_state
from cselab.train.trainer import Run

SETTINGS = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4",
            "--set", "training.eval_steps=2", "--set", "training.max_steps=4"]


def train_args(model, cache, data_dir, out, *extra):
    return ["train", "--method", "simcse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), *SETTINGS, *extra]


class Killed(BaseException):
    """Stands for a kill right after a save."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_bert_dir, tiny_cache, data_dir):
    """A run of 4 steps (saved at 2 and 4), and the same run killed after its save at step 2."""
    root = tmp_path_factory.mktemp("runs")
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, root / "full")) == 0
    save = Run.evaluate_and_save

    def save_then_die(self):
        save(self)
        raise Killed

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Killed):
        patch.setattr(Run, "evaluate_and_save", save_then_die)
        main(train_args(tiny_bert_dir, tiny_cache, data_dir, root / "half"))
    assert json.loads((root / "half" / "last" / "trainer_state.json").read_text())["step"] == 2
    return root


def copy_of(finished_run, tmp_path, name="half") -> Path:
    out = tmp_path / name
    shutil.copytree(finished_run / name, out)
    return out


def one_line_error(capsys) -> str:
    """The one ``error:`` line (progress bars aside), without a traceback."""
    err = capsys.readouterr().err
    errors = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def best_still_loads(out: Path) -> None:
    assert load_encoder(str(out / "best"), device="cpu").encode(["still here"]).shape == (1, 32)


def test_a_different_run_on_the_same_out_is_refused_naming_the_field(finished_run, tmp_path, tiny_bert_dir,
                                                                      tiny_cache, data_dir, capsys):
    out = copy_of(finished_run, tmp_path)
    before = (out / "log.jsonl").read_text()
    assert main([*train_args(tiny_bert_dir, tiny_cache, data_dir, out), "--set", "training.lr=1e-3"]) == 2
    assert "a different run: training.lr (0.001 now, 0.0001 in this OUT)" in one_line_error(capsys)
    assert main(["train", "--method", "input-noise", "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
                 "--data-dir", str(data_dir), "--out", str(out), *SETTINGS]) == 2
    assert "a different run: " in one_line_error(capsys)
    assert (out / "log.jsonl").read_text() == before  # nothing ran
    best_still_loads(out)
    # its own config continues it; --overwrite starts afresh
    assert main([*train_args(tiny_bert_dir, tiny_cache, data_dir, out), "--set", "training.lr=1e-3",
                 "--overwrite"]) == 0
    assert json.loads((out / "last" / "trainer_state.json").read_text())["step"] == 4


def test_resuming_the_same_run_gives_the_weights_of_a_straight_run(finished_run, tmp_path, tiny_bert_dir,
                                                                     tiny_cache, data_dir):
    out = copy_of(finished_run, tmp_path)
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 0
    resumed, straight = (load_file(str(p / "last" / "model.safetensors")) for p in (out, finished_run / "full"))
    assert resumed.keys() == straight.keys()
    assert all((resumed[k] - straight[k]).abs().max() < 1e-5 for k in resumed)


@pytest.mark.parametrize("name", ["rng-0.pt", "model.safetensors", "optimizer.pt", "scheduler.pt",
                                  "trainer_state.json", "MANIFEST.json"])
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_each_damaged_state_file_is_named_and_nothing_is_lost(finished_run, tmp_path, tiny_bert_dir, tiny_cache,
                                                              data_dir, capsys, name, damage):
    out = copy_of(finished_run, tmp_path)
    path = out / "last" / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-3] + bytes([data[-3] ^ 1]) + data[-2:])
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 2
    err = one_line_error(capsys)
    assert str(path) in err and "--restart-from best" in err and "--overwrite" in err
    best_still_loads(out)
    # the way out it offers: continue from the best checkpoint's weights
    assert main([*train_args(tiny_bert_dir, tiny_cache, data_dir, out), "--restart-from", "best"]) == 0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["at_step"] for r in log if "restarted_from" in r] == [2]  # best was saved at step 2
    assert json.loads((out / "last" / "trainer_state.json").read_text())["step"] == 4


class Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("manifest_rewritten", [False, True])
def test_a_planted_pickle_in_any_state_file_is_refused_and_never_runs(finished_run, tmp_path, tiny_bert_dir,
                                                                      tiny_cache, data_dir, capsys,
                                                                      manifest_rewritten):
    for path in sorted((finished_run / "half" / "last").iterdir()):
        out = copy_of(finished_run, tmp_path / path.name)
        marker = tmp_path / f"ran-{path.name}"
        with open(out / "last" / path.name, "wb") as handle:
            pickle.dump(Payload(marker), handle)
        if manifest_rewritten and path.name != training_state.MANIFEST:  # a planter who also fixes the checksums
            training_state.write_manifest(out / "last")
        assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 2, path.name
        assert path.name in one_line_error(capsys)
        assert not marker.exists(), f"the payload in {path.name} ran"


def test_an_unlisted_file_in_the_state_is_refused(finished_run, tmp_path, tiny_bert_dir, tiny_cache, data_dir,
                                                   capsys):
    out = copy_of(finished_run, tmp_path)
    (out / "last" / "custom_checkpoint_0.pkl").write_bytes(pickle.dumps(Payload(tmp_path / "ran")))
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 2
    assert "custom_checkpoint_0.pkl: not written by the run" in one_line_error(capsys)
    assert not (tmp_path / "ran").exists()


def test_a_second_writer_is_refused_and_a_stale_lock_is_taken_over(finished_run, tmp_path, tiny_bert_dir,
                                                                    tiny_cache, data_dir, capsys, caplog):
    out = copy_of(finished_run, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"pid": holder.pid, "host": os.uname().nodename, "process_start": None, "started": "2026-11-23T10:00"}
        (out / ".lock").write_text(json.dumps(lock))
        assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 2
        assert f"being written by pid {holder.pid}" in one_line_error(capsys)
    finally:
        holder.kill()
        holder.wait()
    before = (out / "log.jsonl").read_text().count("\n")
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 0  # its holder is gone: taken over
    assert "taking over the lock" in caplog.text
    after = (out / "log.jsonl").read_text().splitlines()
    assert len(after) > before and len(after) == len(set(after)) and not (out / ".lock").exists()


def test_two_runs_started_together_on_one_out_leave_one_log(tmp_path, tiny_bert_dir, tiny_cache, data_dir):
    command = [sys.executable, "-m", "cselab.cli", *train_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "r")]
    runs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
    results = [(run.wait(timeout=600), run.stderr.read().decode()) for run in runs]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    if codes == [0, 2]:
        assert "being written by pid" in next(err for code, err in results if code == 2)
    steps = [json.loads(line)["step"] for line in (tmp_path / "r" / "log.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == [4]  # log_every 10: one logged step; a second writer would have logged it twice


def write_corpus(path: Path, lines: int) -> Path:
    path.write_text("".join(f"The river number {i} flows to the sea.\n" for i in range(lines)))
    return path


def test_a_damaged_cache_chunk_is_named_by_training_and_rebuilt_by_augment(tmp_path, capsys, tiny_bert_dir,
                                                                            data_dir):
    corpus = write_corpus(tmp_path / "c.txt", 120)
    config = AugmentConfig(backend="none", chunk_size=40)
    folder = build_cache(corpus, tmp_path / "cache", config, progress=False)
    rows = load_cache(folder).to_dict()
    chunk = folder / "chunk-00002.parquet"
    chunk.write_bytes(chunk.read_bytes()[:300])
    assert main(["train", "--model", str(tiny_bert_dir), "--data", str(folder), "--out", str(tmp_path / "run"),
                 *SETTINGS]) == 2
    assert f"{chunk}: damaged or missing" in one_line_error(capsys)
    again = ["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none",
             "--set", "chunk_size=40"]
    assert main(again) == 0
    assert load_cache(folder).to_dict() == rows  # the chunk was rebuilt, the rows are those of the first build


def test_an_empty_cache_is_an_error_naming_the_skip_reasons(tmp_path, capsys):
    corpus = tmp_path / "binary.txt"
    corpus.write_bytes(b"\xff\xfe\x80\x81 \xc3\x28\n" * 5 + b"\n" * 3)  # not UTF-8, then empty lines
    assert main(["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none"]) \
        == 2
    err = one_line_error(capsys)
    assert "no usable sentence" in err and "skipped input lines" in err


@pytest.mark.parametrize(("argv", "message"), [
    (["probe", "run", "--model", "bow", "--limit", "-5"], "argument --limit: -5 is out of range"),
    (["probe", "run", "--model", "bow", "--max-length", "0"], "argument --max-length: 0 is out of range"),
    (["probe", "run", "--model", "bow", "--batch-size", "0"], "argument --batch-size: 0 is out of range"),
    (["sweep", "--methods", "simcse", "--seeds", "0", "--out", "x"], "--seeds '0': no seed to run"),
    (["augment", "--set", "mer_band=[0.9,0.1]"], "mer_band: [0.9, 0.1] keeps no paraphrase"),
    (["augment", "--set", "max_chars=-1"], "max_chars: -1 is out of range"),
    (["train", "--set", "training.max_steps=-5", "--out", "x"], "training.max_steps: -5 is out of range"),
    (["probe", "run", "--model", "bow", "--device", "cuda:7"], "--device cuda:7: "),
])
def test_nonsense_values_are_refused_before_work_starts(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_info:  # argparse's own refusal
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_an_empty_idf_corpus_and_an_out_that_is_no_json_are_refused(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    assert main(["probe", "run", "--model", f"tfidf:{tmp_path / 'empty.txt'}", "--out", str(tmp_path / "r.json")]) \
        == 2
    assert "no sentence to take IDF weights from" in one_line_error(capsys)
    started = time.perf_counter()
    assert main(["probe", "run", "--model", "bow", "--out", str(tmp_path / "r.md")]) == 2
    assert "the results JSON's name must end in .json" in one_line_error(capsys)
    assert main(["probe", "run", "--model", "bow", "--out", str(tmp_path / "empty.txt" / "r.json")]) == 2
    assert "empty.txt is a file, not a folder" in one_line_error(capsys)
    assert time.perf_counter() - started < 5 and not list(tmp_path.glob("*.tmp"))  # refused before any scoring
