"""The launch: the accelerator a run trains on, once the processes, the batch split and the precision add up, with the
experiment trackers ``--report-to`` names (accelerate's: TensorBoard in ``OUT/tensorboard``, W&B, MLflow, trackio,
Comet, Aim, ClearML, DVCLive, SwanLab), each checked to be installed."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.tracking import GeneralTracker, TensorBoardTracker
from accelerate.utils import DistributedDataParallelKwargs, DataLoaderConfiguration, GradientAccumulationPlugin

from cselab.errors import TrainingError
from cselab.files import check_folder, clipped
from cselab.train.config.sections import TrainingConfig
from cselab.train import sharding


# --report-to's names (accelerate's trackers) -> the module each needs; cselab's extras install the first four
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio",
            "comet_ml": "comet_ml", "aim": "aim", "clearml": "clearml", "dvclive": "dvclive", "swanlab": "swanlab"}
EXTRAS = ("tensorboard", "wandb", "mlflow", "trackio")


def trackers(names: Sequence[str], out: Path) -> list[str | GeneralTracker]:
    """What ``accelerate`` logs to for the tracker ``names``: TensorBoard writes to ``OUT/tensorboard``, the others
    where their own settings say (their environment variables: ``WANDB_*``, ``MLFLOW_TRACKING_URI`` ...). An unknown
    or uninstalled tracker is refused in one line naming what to install."""
    found: list[str | GeneralTracker] = []
    for name in dict.fromkeys(names):
        if name not in TRACKERS:
            raise TrainingError(f"--report-to {name}: not a tracker; choose from {', '.join(TRACKERS)}")
        if importlib.util.find_spec(TRACKERS[name]) is None:
            extra = f"'cselab-toolkit[{name}]'" if name in EXTRAS else TRACKERS[name]
            raise TrainingError(f"--report-to {name}: the {TRACKERS[name]} package is not installed: pip install "
                                f"{extra}")
        if name == "tensorboard":
            check_folder(out / "tensorboard", "--report-to tensorboard: its folder")
            found.append(_started(name, lambda: TensorBoardTracker("tensorboard", out)))
        else:
            found.append(name)
    return found


def _started(name: str, make):
    """What ``make()`` returns; a tracker that cannot start (its service or settings refuse) is one line."""
    try:
        return make()
    except Exception as err:  # each tracker's own errors: a refused URI, an unwritable folder, a login missing
        raise TrainingError(f"--report-to {name}: the tracker could not start ({type(err).__name__}: "
                            f"{clipped(err, 200)}); check its settings (environment variables) or leave it out"
                            ) from None


def start_trackers(accelerator: Accelerator, config: dict[str, Any], identity: dict[str, Any], out: Path) -> None:
    """Start the run in every tracker (the project ``cselab``; the run named after ``OUT`` in W&B, MLflow and
    trackio, the others by their own rule), with the config and identity as hyperparameters; before the model loads,
    so that a tracker that refuses (a URI MLflow does not take, a missing login) stops the run in one line."""
    names = {"wandb": {"name": out.name}, "mlflow": {"run_name": out.name}, "trackio": {"name": out.name}}
    _started(", ".join(t.name if isinstance(t, GeneralTracker) else str(t) for t in accelerator.log_with),
             lambda: accelerator.init_trackers("cselab", tracker_config(config, identity), names))


def tracker_config(config: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters every tracker records: the resolved config and the run's identity, flattened to dotted keys
    with scalar values (a list or mapping as its JSON)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat[prefix] = value if isinstance(value, (int, float, str, bool)) else json.dumps(value)

    walk("", {"config": config, "run": identity})
    return flat


def launch(cfg: TrainingConfig, out: Path, report_to: Sequence[str] = ()) -> Accelerator:
    """The accelerator, once the launch adds up (processes, batch split, precision, the trackers installed). With
    accelerate's FSDP config (:mod:`~cselab.train.sharding`, checked here) accelerate's own FSDP is kept off:
    cselab shards the encoder itself."""
    logging = trackers(report_to, out)
    if cfg.mixed_precision == "fp16" and not torch.cuda.is_available():
        raise _refused(cfg, "cpu")
    # accelerate keeps one state per process and refuses a second Accelerator of another precision: a run after
    # another in the same process (a sweep's, a notebook's) starts from a fresh one (the process group stays)
    AcceleratorState._reset_state(reset_partial_state=False)
    with sharding.without_accelerate_fsdp() if sharding.requested() else contextlib.nullcontext():
        accelerator = _accelerator(cfg, out, logging)
    if cfg.mixed_precision != "no" and not accelerator.native_amp:
        raise _refused(cfg, accelerator.device)
    processes, launched = accelerator.num_processes, int(os.environ.get("WORLD_SIZE", 1))
    if launched != processes:  # each process would train alone, all writing to OUT
        raise TrainingError(f"{launched} processes were launched but accelerate set up {processes} (no GPU? on CPU, "
                            "set ACCELERATE_USE_CPU=1 for torchrun, the gloo backend is then used)")
    if cfg.batch_size % processes:
        raise TrainingError(f"training.batch_size {cfg.batch_size} does not split evenly across {processes} "
                            "processes")
    if processes == 1 and torch.cuda.device_count() > 1:
        accelerator.print(f"{torch.cuda.device_count()} GPUs visible, training on one: DataParallel is not used "
                          "(its replicas would each see a part of the in-batch negatives); to use them all, run "
                          "`accelerate launch --multi_gpu -m cselab.cli train ...`")
    return accelerator


def _accelerator(cfg: TrainingConfig, out: Path, logging: list[str | GeneralTracker]) -> Accelerator:
    return Accelerator(mixed_precision=cfg.mixed_precision, log_with=logging or None,
                       project_dir=str(out),  # each batch split across the processes in rank order
                       dataloader_config=DataLoaderConfiguration(split_batches=True),
                       # a step's batches may span two epochs: its end, not the loader's, synchronises
                       gradient_accumulation_plugin=GradientAccumulationPlugin(
                           num_steps=cfg.grad_accum, sync_with_dataloader=False),
                       # no broadcast of the (constant) buffers at each forward: processes may run different
                       # numbers of passes (a view no row of a mini-batch has is not encoded)
                       kwargs_handlers=[DistributedDataParallelKwargs(broadcast_buffers=False)])


def _refused(cfg: TrainingConfig, device) -> TrainingError:
    """accelerate trains in fp32, without a word, where the asked precision is not available: refuse instead."""
    return TrainingError(f"training.mixed_precision {cfg.mixed_precision} is not available on {device} (fp16 needs "
                         "a CUDA device); set training.mixed_precision=no")
