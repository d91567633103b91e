import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from cselab.train.distributed import gather_rows, global_mean
from cselab.train.run.options import RunOptions
from cselab.train.recipe import TrainingError, train
from tests.conftest import save_tiny_bert
from tests.train.run.test_trainer import small

pytestmark = pytest.mark.slow  # trains with two processes


@pytest.fixture(scope="module")
def dropout_free_bert(tmp_path_factory):
    """Without dropout, one process and two take the same steps exactly (up to float rounding)."""
    from transformers import BertModel

    return save_tiny_bert(tmp_path_factory.mktemp("bert-no-dropout"), BertModel, hidden=32, layers=2,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_without_a_process_group_gathering_is_the_identity():
    rows = torch.randn(3, 4)
    assert gather_rows(rows) == (rows, 0)
    assert global_mean(torch.tensor([1.0, 2.0, 6.0])).item() == pytest.approx(3.0)
    assert global_mean(torch.zeros(0)) is None


GUIDED = ["--set", "losses.info_nce.transform={kind: guided, guide: minilm, margin: 0.2}", "--set",
          "losses.info_nce.anchor_negatives=true", "--set", "losses.info_nce.positive_negatives=true"]


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
@pytest.mark.parametrize(("method", "cached"), [([], []), ([], ["--set", "training.mini_batch_size=3"]), (GUIDED, [])],
                         ids=["plain", "cached", "guided"])
def test_two_processes_take_the_same_steps_as_one(dropout_free_bert, tiny_cache, data_dir, tmp_path, method,
                                                  cached):
    # simcse-bt: rows without a paraphrase leave the two processes different numbers of positives to gather;
    # two batches accumulated per step; cached: the two processes encode their 8 rows 3 at a time (cached InfoNCE,
    # gathering, accumulation and clipping together) and still take the one uncached process's steps; guided: a
    # guide's columns (every process's anchors and positives among them) gathered as the model's are
    settings = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4",
                "--set", "training.eval_steps=2", "--set", "training.max_steps=4", "--set", "training.grad_accum=2",
                *method]
    command = ["-m", "cselab.cli", "train", "--method", "simcse-bt", "--model", str(dropout_free_bert),
               "--data", str(tiny_cache), "--data-dir", str(data_dir), "--eval-limit", "40", *settings]
    environment = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, *command, "--out", str(tmp_path / "one")], capture_output=True,
                         timeout=600, env=environment)
    assert one.returncode == 0, one.stderr.decode()[-2000:]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    two = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", "29562" if cached else "29563" if method else "29561",
                          *command, *cached, "--out", str(tmp_path / "two")], capture_output=True, timeout=600,
                         env=environment)
    assert two.returncode == 0, two.stderr.decode()[-3000:]

    assert {"rng-0.pt", "rng-1.pt"} <= set(os.listdir(tmp_path / "two" / "last"))
    logs = [[json.loads(line) for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
            for run in ("one", "two")]
    losses = [[r["info_nce"] for r in log if "loss" in r] for log in logs]
    assert losses[1] == pytest.approx(losses[0], abs=1e-4)  # the whole batch's negatives, on both processes
    assert [r for r in logs[0] if "stsb_dev" in r] == [r for r in logs[1] if "stsb_dev" in r]
    a = load_file(str(tmp_path / "one" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "last" / "model.safetensors"))
    initial = load_file(str(dropout_free_bert / "model.safetensors"))
    moved = max((a[f"backbone.{k}"] - v).abs().max() for k, v in initial.items() if f"backbone.{k}" in a)
    assert moved > 1e-4  # the runs trained (4 steps at lr 1e-4)
    # Adam steps every coordinate by about lr whatever its gradient's size, so a coordinate whose gradient is
    # at rounding level (one LayerNorm bias here) may step differently: up to lr / 2 on a few, 2e-5 on the rest
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=5e-5, rtol=1e-4)
    loose = sum(int((~torch.isclose(a[k], b[k], atol=2e-5, rtol=1e-4)).sum()) for k in a)
    assert loose <= 0.001 * sum(t.numel() for t in a.values())


def test_processes_accelerate_did_not_set_up_are_refused(tiny_bert_dir, tiny_cache, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; accelerate here runs one process
    with pytest.raises(TrainingError, match="2 processes were launched but accelerate set up 1"):
        train(small("simcse", max_steps=1), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
              RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
