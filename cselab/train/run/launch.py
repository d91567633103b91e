"""The launch: the accelerator a run trains on, once the processes, the batch split and the precision add up."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin

from cselab.errors import TrainingError
from cselab.train.config.sections import TrainingConfig


def launch(cfg: TrainingConfig, out: Path, tensorboard: bool) -> Accelerator:
    """The accelerator, once the launch adds up (processes, batch split, precision, tensorboard installed)."""
    if tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise TrainingError("tensorboard=True needs the tensorboard package: pip install 'cselab[tensorboard]'")
    if cfg.mixed_precision == "fp16" and not torch.cuda.is_available():
        raise _refused(cfg, "cpu")
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, log_with="tensorboard" if tensorboard else None,
                              project_dir=str(out),  # each batch split across the processes in rank order
                              dataloader_config=DataLoaderConfiguration(split_batches=True),
                              # a step's batches may span two epochs: its end, not the loader's, synchronises
                              gradient_accumulation_plugin=GradientAccumulationPlugin(
                                  num_steps=cfg.grad_accum, sync_with_dataloader=False))
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


def _refused(cfg: TrainingConfig, device) -> TrainingError:
    """accelerate trains in fp32, without a word, where the asked precision is not available: refuse instead."""
    return TrainingError(f"training.mixed_precision {cfg.mixed_precision} is not available on {device} (fp16 needs "
                         "a CUDA device); set training.mixed_precision=no")
