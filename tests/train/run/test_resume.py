"""A run folder resumed, refused or interrupted (cselab.train.out: folder, state, checkpoint): the same run resumes to
the weights of a straight run; a different run, a damaged or planted state file, a second writer, a link or an
interrupt ends either in the identical result or in one line naming the file or field, with nothing lost."""

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

from cselab.cli import main
from cselab.train.out import state as training_state
from tests.runs import SETTINGS, Payload, best_still_loads, copy_of, one_line_error, train_args


@pytest.mark.slow
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


@pytest.mark.slow
def test_resuming_the_same_run_gives_the_weights_of_a_straight_run(finished_run, tmp_path, tiny_bert_dir,
                                                                     tiny_cache, data_dir):
    out = copy_of(finished_run, tmp_path)
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 0
    resumed, straight = (load_file(str(p / "last" / "model.safetensors")) for p in (out, finished_run / "full"))
    assert resumed.keys() == straight.keys()
    assert all((resumed[k] - straight[k]).abs().max() < 1e-5 for k in resumed)


@pytest.mark.slow
def test_a_run_begun_before_its_config_had_a_key_resumes_and_an_edited_config_does_not(
        finished_run, tmp_path, tiny_bert_dir, tiny_cache, data_dir, capsys):
    """OUT/config.yaml of an older cselab: no training.view_rows or eval_at_end yet, the cache path as data, the
    config hashed with its data. It is the same run as resolved now (the new keys take their defaults); the same
    file edited since the run began is refused."""
    import hashlib

    import yaml

    out = copy_of(finished_run, tmp_path)
    config = yaml.safe_load((out / "config.yaml").read_text())
    for key in ("view_rows", "eval_at_end"):
        config["training"].pop(key)
    config.pop("data")
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    identity = json.loads((out / "run.json").read_text())
    identity["config_sha256"] = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    (out / "run.json").write_text(json.dumps(identity))
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 0
    assert json.loads((out / "last" / "trainer_state.json").read_text())["step"] == 4
    config["training"]["lr"] = 0.5  # edited by hand since
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["train", "--method", str(out / "config.yaml"), "--model", str(tiny_bert_dir), "--data",
                 str(tiny_cache), "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out)]) == 2
    assert "config.yaml (edited since the run began)" in one_line_error(capsys)


@pytest.mark.slow
def test_a_run_on_a_relative_data_path_is_repeated_by_its_own_config(tmp_path, tiny_bert_dir, data_dir,
                                                                     monkeypatch):
    """--data t.jsonl from one folder: OUT/config.yaml records it absolute, so --method OUT/config.yaml (no --data)
    continues the same run from anywhere, and the run's data is compared by content."""
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text("".join(json.dumps({"text": f"Line {i} of the table."}) + "\n" for i in range(40)))
    first = ["train", "--model", str(tiny_bert_dir), "--data-dir", str(data_dir), "--eval-limit", "20",
             "--out", "run", *SETTINGS, "--set", "training.max_steps=2"]
    assert main([*first, "--method", "simcse", "--data", "t.jsonl"]) == 0
    monkeypatch.chdir(tmp_path / "run")
    assert main(["train", "--method", "config.yaml", "--model", str(tiny_bert_dir), "--data-dir", str(data_dir),
                 "--eval-limit", "20", "--out", "."]) == 0


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.parametrize("change", ["the base model's weights replaced", "another --eval-limit"])
def test_a_resume_whose_weights_or_dev_set_differ_is_refused_naming_the_field(finished_run, tmp_path, tiny_bert_dir,
                                                                             tiny_cache, data_dir, capsys, change):
    out, model = copy_of(finished_run, tmp_path), tmp_path / "base"
    shutil.copytree(tiny_bert_dir, model)
    argv = train_args(model, tiny_cache, data_dir, out)
    json_identity = json.loads((out / "run.json").read_text())
    json_identity["base_model"] = str(model)  # the same folder moved: only its weights may tell it apart
    (out / "run.json").write_text(json.dumps(json_identity))
    if change == "another --eval-limit":
        argv[argv.index("--eval-limit") + 1] = "30"
        field = "dev.limit (30 now, 20 in this OUT)"
    else:
        weights = load_file(str(model / "model.safetensors"))
        from safetensors.torch import save_file

        save_file({k: v + 0.01 for k, v in weights.items()}, str(model / "model.safetensors"))
        field = "base_weights_sha256"
    assert main(argv) == 2
    assert f"a different run: {field}" in one_line_error(capsys)
    best_still_loads(out)


@pytest.mark.parametrize("where", ["cache manifest.json", "last/MANIFEST.json"])
def test_a_manifest_naming_a_file_outside_its_folder_is_refused(finished_run, tmp_path, tiny_bert_dir, tiny_cache,
                                                                data_dir, capsys, where):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    record = {"bytes": outside.stat().st_size, "sha256": __import__("hashlib").sha256(b"secret").hexdigest()}
    if where.startswith("cache"):
        cache = tmp_path / "cache"
        shutil.copytree(tiny_cache, cache)
        manifest, argv = cache / "manifest.json", train_args(tiny_bert_dir, cache, data_dir, tmp_path / "run")
    else:
        out = copy_of(finished_run, tmp_path)
        manifest, argv = out / "last" / "MANIFEST.json", train_args(tiny_bert_dir, tiny_cache, data_dir, out)
    payload = json.loads(manifest.read_text())
    payload["files"]["../" * 12 + str(outside).lstrip("/")] = record
    manifest.write_text(json.dumps(payload))
    assert main(argv) == 2
    assert "which is not a file name inside" in one_line_error(capsys)


@pytest.mark.slow
def test_links_in_a_run_folder_are_never_followed(finished_run, tmp_path, tiny_bert_dir, tiny_cache, data_dir,
                                                   capsys):
    out, elsewhere = copy_of(finished_run, tmp_path), tmp_path / "elsewhere"
    (out / "last").rename(elsewhere)
    (out / "last").symlink_to(elsewhere)
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 2
    assert "last: a link, not the run's own folder" in one_line_error(capsys)
    (out / "best").rename(tmp_path / "best-elsewhere")
    (out / "best").symlink_to(tmp_path / "best-elsewhere")
    assert main([*train_args(tiny_bert_dir, tiny_cache, data_dir, out), "--overwrite"]) == 0
    assert (elsewhere / "MANIFEST.json").exists() and (tmp_path / "best-elsewhere" / "cselab.json").exists()
    assert not (out / "best").is_symlink()


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_says_what_it_kept_releases_its_lock_and_resumes(tmp_path, tiny_bert_dir, tiny_cache,
                                                                           data_dir, signal_name):
    import signal

    out = tmp_path / "run"
    command = [sys.executable, "-m", "cselab.cli", *train_args(tiny_bert_dir, tiny_cache, data_dir, out,
                                                               "--set", "training.max_steps=60",
                                                               "--set", "training.epochs=10")]
    # as at a terminal: SIGINT at its default (a non-interactive shell starts a background job, and so pytest and
    # its children, with SIGINT ignored)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    state, deadline = out / "last" / "trainer_state.json", time.time() + 300
    while time.time() < deadline and not state.exists():
        time.sleep(0.05)
    process.send_signal(getattr(signal, signal_name))
    _, err = process.communicate(timeout=120)
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("interrupted: ")]
    assert process.returncode == 130 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert f"{out}/last holds the run at step" in lines[0] and not (out / ".lock").exists()
    assert subprocess.run(command, capture_output=True).returncode == 0
    assert json.loads(state.read_text())["step"] == 60

