"""FSDP2 (cselab.train.sharding) over two CPU processes (torchrun, gloo), asked for as accelerate's FSDP config
asks (ACCELERATE_USE_FSDP, FSDP_VERSION: what `accelerate launch --use_fsdp --fsdp_version 2` and a config file with
distributed_type: FSDP set): the sharded run trains one process's weights, resumes after a kill to the straight run's
weights, and leaves a checkpoint that loads unsharded. A method that cannot shard is refused in one line.

The two-process runs are cached InfoNCE (training.mini_batch_size=3: each process encodes its 8 rows 3 at a time),
so that a mini-batch with no paraphrase on one process still takes its pass (each pass of a sharded model gathers the
weights from every process; without the placeholder pass the run broke off in gloo), and score the initial model
first (eval_at_start: the dev scorer's pass before any training pass; under inference mode it left FSDP's gathered
buffers unwritable for the steps after).

The tolerances are measured (2026-12-03, this machine; simcse-bt, a dropout-free 2-layer BERT, 3 steps of 2
accumulated batches of 16 at lr 1e-4, each run through the CLI as below): one process against itself over
OMP_NUM_THREADS 1/2/4 x ATEN_CPU_CAPABILITY default/avx2 differs by up to 5.5e-6 in a weight (its losses by 6.6e-7);
two FSDP processes (threads 1/2 x default/avx2, cached and not) against one process by up to 2.3e-5 (FSDP_SPREAD;
DDP's two processes: 5.9e-6; the gradient norms agree to 1e-6 of their size: FSDP2 reduce-scatters each pass's
gradient, summing in another order, and Adam steps a coordinate whose gradient is at rounding level by about lr
either way), the logged losses by up to 9.6e-7 (LOSS_SPREAD), OUT/best's vectors (norm 5.7) by up to 1.35e-4
(VECTOR_SPREAD; one process against itself: 1.0e-4). Each tolerance is twice its spread; a planted change (lr 1.5e-4
instead of 1e-4, one process) moves the weights by 1.2e-4, beyond it (1.1e-4 moved them by 2.2e-5, within it).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cselab.cli import main
from tests.conftest import save_tiny_bert
from tests.runs import one_line_error

pytestmark = [pytest.mark.slow,  # trains with two processes
              pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                                 reason="no torchrun")]

ROOT = Path(__file__).resolve().parents[3]
FSDP = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}  # as `accelerate launch --use_fsdp --fsdp_version 2`
# measured (see the module docstring); the tolerances are twice these
FSDP_SPREAD, LOSS_SPREAD, VECTOR_SPREAD = 2.3e-5, 9.6e-7, 1.35e-4
WEIGHTS, LOSSES, VECTORS = 2 * FSDP_SPREAD, 2 * LOSS_SPREAD, 2 * VECTOR_SPREAD
SENTENCES = ["a man plays the guitar", "two dogs run on the beach", "the market fell sharply today"]
KILLED = """import sys
from tests.runs import train_killed_after_first_save
train_killed_after_first_save(sys.argv[1:])
"""


def train_args(model: Path, cache: Path, data_dir: Path, out: Path, *extra: str) -> list[str]:
    settings = ["training.batch_size=16", "training.max_length=24", "training.lr=1e-4", "training.eval_steps=2",
                "training.max_steps=4", "training.grad_accum=2", "training.eval_at_start=true", *extra]
    return ["train", "--method", "simcse-bt", "--model", str(model), "--data", str(cache), "--data-dir",
            str(data_dir), "--eval-limit", "40", *(part for s in settings for part in ("--set", s)), "--out", str(out)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_cache, data_dir):
    """One process (and a planted change of it), two FSDP processes straight (cached; and with packed passes), and
    two killed after their first save (step 2) then run again, by two FSDP processes and (a copy) by one process
    without FSDP."""
    from transformers import BertModel

    root = tmp_path_factory.mktemp("fsdp")
    bert = save_tiny_bert(root / "bert", BertModel, hidden=32, layers=2, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)
    (root / "killed.py").write_text(KILLED)
    environment = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    torchrun = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--nproc_per_node", "2"]

    def run(launcher: list[str], out: str, *extra: str, env=None):
        done = subprocess.run([*launcher, *train_args(bert, tiny_cache, data_dir, root / out, *extra)],
                              capture_output=True, timeout=600, env={**environment, **(env or {})}, cwd=ROOT)
        assert done.returncode == 0, done.stderr.decode()[-3000:]

    run([sys.executable, "-m", "cselab.cli"], "one")
    run([sys.executable, "-m", "cselab.cli"], "planted", "training.lr=1.5e-4")
    cached = "training.mini_batch_size=3"
    run([*torchrun, "--master_port", "29581", "-m", "cselab.cli"], "fsdp", cached, env=FSDP)
    run([*torchrun, "--master_port", "29584", "-m", "cselab.cli"], "fsdp-packed", cached, "training.packing=true",
        env=FSDP)
    run([*torchrun, "--master_port", "29582", str(root / "killed.py")], "half", cached, env=FSDP)
    assert json.loads((root / "half" / "last" / "trainer_state.json").read_text())["step"] == 2
    shutil.copytree(root / "half", root / "half-one")
    run([*torchrun, "--master_port", "29583", "-m", "cselab.cli"], "half", cached, env=FSDP)
    run([sys.executable, "-m", "cselab.cli"], "half-one", cached)  # the sharded state, resumed by one process
    return root


def weights(run: Path, folder: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run / folder / "model.safetensors"))


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_two_sharded_processes_train_the_weights_of_one(runs):
    logs = [[json.loads(line) for line in (runs / run / "log.jsonl").read_text().splitlines()]
            for run in ("one", "fsdp")]
    losses = [[r["info_nce"] for r in log if "loss" in r] for log in logs]
    assert losses[0] and losses[1] == pytest.approx(losses[0], abs=LOSSES)
    # the dev scorer, run on every process over the sharded model, scores the initial weights as one process does
    initial = [[r for r in log if r.get("initial")] for log in logs]
    assert len(initial[0]) == 1 and initial[0] == initial[1]
    one, fsdp = weights(runs / "one"), weights(runs / "fsdp")
    initial = load_file(str(runs / "bert" / "model.safetensors"))
    moved = max(float((one[f"backbone.{k}"] - v).abs().max()) for k, v in initial.items())
    assert moved > 3 * WEIGHTS  # the runs trained (2e-4 measured)
    assert largest_difference(one, fsdp) <= WEIGHTS
    assert largest_difference(one, weights(runs / "planted")) > WEIGHTS  # a real change is seen
    # OUT/last is a one-process run's: the optimizer's moments whole, every process's generators
    optimizers = [torch.load(runs / run / "last" / "optimizer.pt", weights_only=True) for run in ("one", "fsdp")]
    assert optimizers[0]["param_groups"] == optimizers[1]["param_groups"]
    assert all(optimizers[0]["state"][i]["exp_avg"].shape == optimizers[1]["state"][i]["exp_avg"].shape
               for i in optimizers[0]["state"])
    assert {"rng-0.pt", "rng-1.pt"} <= set(os.listdir(runs / "fsdp" / "last"))
    execution = json.loads((runs / "fsdp" / "run.json").read_text())["provenance"]["execution"]
    assert execution["processes"] == 2 and execution["sharding"]["kind"] == "fsdp2"
    # the sharding is not part of the run's identity, as the process count is not (the configs differ here by
    # training.mini_batch_size alone: config_sha256)
    identities = [{k: v for k, v in json.loads((runs / run / "run.json").read_text()).items()
                   if k not in ("provenance", "config_sha256")} for run in ("one", "fsdp")]
    assert identities[0] == identities[1]


def test_two_sharded_processes_train_packed_passes_to_the_weights_of_one(runs):
    """training.packing under FSDP2 (BERT's pooler layer runs inside the sharded pass, where its weights are
    gathered): measured 2026-12-03, 6.6e-6 from one process's padded run, as the padded sharded run (6.6e-6)."""
    assert largest_difference(weights(runs / "one"), weights(runs / "fsdp-packed")) <= WEIGHTS
    assert json.loads((runs / "fsdp-packed" / "run.json").read_text())["provenance"]["execution"]["packing"]


def test_a_killed_sharded_run_resumes_to_the_straight_runs_weights(runs):
    # the run's 3 steps: 6 batches of 16 in 96 rows, 2 a step
    assert json.loads((runs / "half" / "last" / "trainer_state.json").read_text())["step"] == 3
    straight, resumed = weights(runs / "fsdp"), weights(runs / "half")
    assert largest_difference(straight, resumed) == 0.0  # the same processes, the same order: bit for bit
    assert len(json.loads((runs / "half" / "run.json").read_text())["resumed"]) == 1
    # OUT/last is a one-process run's: one process without FSDP resumes it (its own step 3 against two processes')
    assert json.loads((runs / "half-one" / "last" / "trainer_state.json").read_text())["step"] == 3
    assert largest_difference(straight, weights(runs / "half-one")) <= WEIGHTS


def test_the_sharded_runs_checkpoint_loads_unsharded(runs):
    from transformers import AutoModel

    from cselab.encoders.loading import load_encoder

    model = AutoModel.from_pretrained(runs / "fsdp" / "best")
    assert all(not type(p).__name__ == "DTensor" for p in model.parameters())
    assert load_file(str(runs / "fsdp" / "best" / "model.safetensors")).keys() == \
        load_file(str(runs / "one" / "best" / "model.safetensors")).keys()
    vectors = [load_encoder(str(runs / run / "best"), cache=False, device="cpu").encode(SENTENCES)
               for run in ("one", "fsdp")]
    assert torch.as_tensor(vectors[1]).sub(torch.as_tensor(vectors[0])).abs().max() <= VECTORS


@pytest.mark.parametrize(("method", "settings", "message"), [
    ("esimcse", FSDP, "esimcse cannot train with FSDP (accelerate's distributed_type: FSDP): encoder.momentum"),
    ("simcse", {**FSDP, "FSDP_VERSION": "1"}, "fsdp_version 1; cselab shards with FSDP2 only"),
    ("simcse", {**FSDP, "FSDP_OFFLOAD_PARAMS": "true"}, "fsdp_offload_params (CPU offload) is not applied"),
])
def test_what_cannot_shard_is_refused_in_one_line(tiny_bert_dir, tiny_cache, data_dir, tmp_path, monkeypatch,
                                                  capsys, method, settings, message):
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    args = ["train", "--method", method, "--model", str(tiny_bert_dir), "--data", str(tiny_cache), "--data-dir",
            str(data_dir), "--set", "training.max_steps=1", "--out", str(tmp_path / "run")]
    assert main(args) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "run").exists()  # refused before anything was written
