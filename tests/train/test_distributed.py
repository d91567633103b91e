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
    port = "29562" if cached else "29563" if method else "29561"
    two = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", port, *command, *cached, "--out",
                          str(tmp_path / "two")], capture_output=True, timeout=600, env=environment)
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


def _guided_process(rank: int, init: str, out: str) -> None:
    """One of two processes: an InfoNCE with a guide and both blocks, process 1 holding no row that has both views
    (only hard negatives); each writes its loss and the gradient of its hard negatives."""
    import torch.distributed as dist

    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective, apply_loss
    from cselab.train.plugins.kinds import LossContext

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(rank)
    method = load_method("simcse-sup", ["losses.info_nce.hard_negative_weight=null",
                                        "losses.info_nce.anchor_negatives=true",
                                        "losses.info_nce.positive_negatives=true",
                                        "losses.info_nce.transform={kind: guided, guide: minilm, margin: 0.1}"])
    loss = Objective(method).losses[0]
    loss.transform.length = 32
    rows = [0, 1] if rank == 0 else []
    texts = {"anchor": ["A man plays a guitar.", "A man is playing a guitar."][:len(rows)],
             "positive": ["Someone plays music.", "A person plays an instrument."][:len(rows)],
             "hard_negative": ["Nobody plays anything.", "A woman cooks."]}
    vectors = {name: torch.randn(len(texts[name]), 8, requires_grad=True) for name in texts}
    encoded = {name: (vectors[name], rows if name != "hard_negative" else [0, 1]) for name in texts}
    value = apply_loss(loss, LossContext(encoded, texts=lambda name: texts[name]))
    value.backward()
    torch.save({"loss": value.detach(), "grad": vectors["hard_negative"].grad}, f"{out}/{rank}.pt")
    dist.destroy_process_group()


def test_a_process_without_rows_takes_the_guides_gathers_and_backward_with_the_others(tmp_path):
    """Without its share of the gathers (the guide's columns, every anchor) and of their backward, the process with
    rows would wait on it forever: both finish, and the gradient reaches the other process's hard negatives."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    init = f"file://{tmp_path / 'init'}"
    processes = [context.Process(target=_guided_process, args=(rank, init, str(tmp_path))) for rank in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    for process in processes:
        process.kill()  # one that hangs (a gather the other never takes) is stopped, and fails the test
    assert [process.exitcode for process in processes] == [0, 0]
    first, second = (torch.load(tmp_path / f"{rank}.pt") for rank in (0, 1))
    assert torch.isfinite(first["loss"]) and second["loss"].item() == 0.0
    assert second["grad"].abs().sum() > 0  # process 0's anchors contrast with process 1's hard negatives
