import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cselab.augment.cache import AugmentConfig, _write_chunk, write_manifest
from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.train.methods import load_method
from cselab.train.trainer import TrainingError, train

SUBJECTS = ["The old bridge", "My neighbour", "The committee", "A small bird", "The river", "Our team"]
VERBS = ["crosses the valley", "likes fresh bread", "meets every week", "sings at dawn", "flows to the sea"]


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory) -> Path:
    """A finished augment cache of 96 rows, a third of them without paraphrase or negation."""
    folder = tmp_path_factory.mktemp("cache") / "key"
    folder.mkdir()
    texts = [f"{SUBJECTS[i % 6]} {VERBS[i % 5]} in {1900 + i}." for i in range(96)]
    rows = {"id": list(range(96)), "text": texts,
            "paraphrase": [None if i % 3 == 0 else f"In {1900 + i}, {t[:-9].lower()}." for i, t in enumerate(texts)],
            "paraphrase_mer": [None if i % 3 == 0 else 0.5 for i in range(96)],
            "negation": [None if i % 3 == 1 else t.replace(" in ", " not in ", 1) for i, t in enumerate(texts)],
            "negation_rule": [None if i % 3 == 1 else "test" for i in range(96)],
            "negation_reason": [None] * 96}
    _write_chunk(folder, 0, rows, [])
    write_manifest(folder, AugmentConfig(backend="none"), "synthetic", "0" * 64, 1)
    return folder


def small(method: str, **training) -> dict:
    settings = {"batch_size": 16, "max_length": 24, "eval_steps": 10, "lr": 1e-4, **training}
    return load_method(method, [f"training.{k}={json.dumps(v)}" for k, v in settings.items()])


@pytest.mark.parametrize("method", ["simcse", "osscse", "simcse-bt"])
def test_short_cpu_run_writes_a_best_checkpoint_the_probe_loads(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                                 method):
    summary = train(small(method, max_steps=30, epochs=10), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
                    data_dir, eval_limit=40, progress=False)
    assert summary["steps"] == 30
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "stsb_dev" in r] == [10, 20, 30]
    losses = {key for r in log if "loss" in r for key in r}
    expected = {"simcse": {"info_nce"}, "simcse-bt": {"info_nce"},
                "osscse": {"info_nce", "two_way_margin", "recall"}}[method]
    assert expected <= losses
    info = json.loads((tmp_path / "run" / "best" / "cselab.json").read_text())
    assert info["method"] == method
    encoder = load_encoder(str(tmp_path / "run" / "best"), device="cpu")
    assert encoder.encode(["a test sentence"]).shape == (1, 32)


def test_resume_after_a_kill_matches_a_straight_run(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    overrides = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4",
                 "--set", "training.eval_steps=10", "--set", "training.max_steps=40", "--set", "training.epochs=10"]
    command = [sys.executable, "-m", "cselab.cli", "train", "--method", "osscse", "--model", str(tiny_bert_dir),
               "--data", str(tiny_cache), "--data-dir", str(data_dir), "--eval-limit", "40", *overrides]
    straight = subprocess.run([*command, "--out", str(tmp_path / "straight")], capture_output=True, timeout=600)
    assert straight.returncode == 0, straight.stderr.decode()[-2000:]

    process = subprocess.Popen([*command, "--out", str(tmp_path / "killed")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    state = tmp_path / "killed" / "last" / "trainer_state.json"
    deadline = time.time() + 300
    while time.time() < deadline and not state.exists():
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert json.loads(state.read_text())["step"] < 40  # killed part-way
    resumed = subprocess.run([*command, "--out", str(tmp_path / "killed")], capture_output=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]

    a = load_file(str(tmp_path / "straight" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_a_diverging_loss_stops_with_the_step_named(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    method = small("simcse", max_steps=5)
    method["losses"]["info_nce"]["temperature"] = 0.0
    with pytest.raises(TrainingError, match=r"the loss became nan at step 1; the last good state is"):
        train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", data_dir, eval_limit=20, progress=False)


def test_bad_keys_are_named(capsys):
    assert main(["train", "--out", "x", "--set", "training.lrr=1"]) == 2
    assert "unknown key 'training.lrr'" in capsys.readouterr().err
    assert main(["train", "--out", "x", "--method", "osscse", "--set", "losses.two_way_margin.gama=1"]) == 2
    assert "unknown key(s) gama in losses.two_way_margin" in capsys.readouterr().err
    assert main(["train", "--out", "x", "--method", "nosuch"]) == 2
    assert "presets are osscse, simcse, simcse-bt" in capsys.readouterr().err
