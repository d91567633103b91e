"""A run's saves: ``OUT/last`` (the state to resume from, :mod:`cselab.train.out.state`) and ``OUT/best`` (the best
checkpoint, with ``training.json``), each written to a ``.tmp`` folder and renamed into place, so that a kill at any
moment leaves one complete copy; restoring from either; and a full disk turned into one line."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accelerate import Accelerator
import torch
from safetensors.torch import load_file, load_model

from cselab.atomic import disk_full, write_json_atomic, write_text_atomic
from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.heads import HEAD_FILE
from cselab.encoders.transformer import is_sharded
from cselab.errors import TrainingError
from cselab.files import clipped, read_json, remove_path
from cselab.train.model import TrainingEncoder, save_checkpoint
from cselab.train.out import folder as run_folder
from cselab.train import sharding
from cselab.train.out import state

BEST_STATE = "training.json"  # in OUT/best: the step and score it was saved at
RESUME_HELP = (f"resume from the best checkpoint with --restart-from best (its weights, a fresh optimizer), or "
               f"{run_folder.AFRESH}")


def _load_weights(module: torch.nn.Module, path: Path) -> None:
    """A safetensors file into ``module``, cut to this process's shards where it is sharded (FSDP2)."""
    if is_sharded(module):
        sharding.load_full_model_state(module, load_file(str(path)))
    else:
        load_model(module, str(path))


def replace_folder(temporary: Path, final: Path) -> None:
    """Put ``temporary`` at ``final``; at every moment one complete copy exists (``final`` or ``final.old``)."""
    old = final.with_name(final.name + ".old")
    if final.exists() or final.is_symlink():
        remove_path(old)
        final.rename(old)
    temporary.rename(final)
    remove_path(old)


class Checkpoints:
    """The saves of the run writing ``out`` on ``accelerator`` (the main process writes; every process saves its
    random generators)."""

    def __init__(self, out: Path, accelerator: Accelerator):
        self.out, self.accelerator, self.main = out, accelerator, accelerator.is_main_process
        self.tmp = out / "last.tmp"
        self.skeleton: torch.nn.Module | None = None  # sharded (FSDP2): the encoder's plain copy, which saves fill

    def remove_partials(self) -> None:
        """What a run killed (or stopped by a full disk) mid-save left."""
        if self.main:
            for partial in ("last.tmp", "best.tmp"):
                remove_path(self.out / partial)

    def verified_last(self) -> tuple[Path | None, dict[str, Any] | None]:
        """``OUT/last`` (or the ``last.old`` a kill between two renames left) once every file there is checked
        against its manifest, and the counters it holds; None when there is nothing to resume."""
        last = self.out / "last"
        if not last.exists() and last.with_name("last.old").exists():
            last = last.with_name("last.old")
        if not last.exists():
            return None, None
        try:
            return last, state.verify(last)
        except state.StateError as err:
            raise state.StateError(f"{err}; {RESUME_HELP}") from None

    def restore_last(self, last: Path, core: TrainingEncoder, optimizer, scheduler, objective) -> None:
        try:
            state.load_state(last, self.accelerator.process_index, core, optimizer, scheduler,
                             self.accelerator.scaler, objective, self.accelerator.num_processes)
        except state.StateError as err:
            raise state.StateError(f"{err}; {RESUME_HELP}") from None

    def restore_best(self, core: TrainingEncoder) -> dict[str, Any]:
        """Load ``OUT/best``'s weights into ``core`` and drop ``OUT/last``; returns the step and score it was saved
        at."""
        best = self.out / "best"
        if core.adapter is not None:
            raise state.StateError(f"{best}: holds the adapter's weights merged into the base, which an adapter run "
                                   f"cannot restart from; resume from OUT/last, or train from it afresh with --model "
                                   f"{best}")
        try:
            if best.is_symlink():
                raise state.StateError(f"{best}: a link, not the run's own folder")
            saved = read_json(best / BEST_STATE, state.StateError)
            if not isinstance(saved.get("step"), int) or not isinstance(saved.get("best"), (int, float)):
                raise state.StateError(f"{best / BEST_STATE}: expected the numbers step and best")
            _load_weights(core.backbone, best / "model.safetensors")
            if core.head_at_test and core.head is not None:  # the checkpoint keeps the head: it restarts from it too
                _load_weights(core.head, best / HEAD_FILE)
            # the momentum copy follows the weights the run restarts from
            if core.momentum is not None and core.frozen is not None:
                core.frozen.load_state_dict(core.backbone.state_dict())
        except Exception as err:
            raise state.StateError(f"{best}: cannot restart from it ({clipped(err, 200)}); "
                                   f"{run_folder.AFRESH}") from None
        for name in ("last", "last.tmp", "last.old"):
            shutil.rmtree(self.out / name, ignore_errors=True)
        return saved

    def begin(self, objective) -> None:
        """Start a save of ``OUT/last``: every process's random generators and objective state into ``last.tmp``."""
        if self.main:
            shutil.rmtree(self.tmp, ignore_errors=True)  # left by a killed run
        self.accelerator.wait_for_everyone()
        state.save_process_state(self.tmp, self.accelerator.process_index, objective)
        self.accelerator.wait_for_everyone()  # every process's own state is in last.tmp before it is renamed

    def commit(self, core: TrainingEncoder, optimizer, scheduler, counters: dict[str, Any]) -> None:
        """End the save: the shared state and the manifest into ``last.tmp``, renamed to ``OUT/last``."""
        optimizer_state = None
        if self.skeleton is not None:  # every process takes part in gathering the shards
            optimizer_state = sharding.full_optimizer_state(optimizer, self.main)
            core = self.whole(core)
        if self.main:
            state.save_shared_state(self.tmp, core, optimizer, scheduler, self.accelerator.scaler, counters,
                                    optimizer_state)
            state.write_manifest(self.tmp)
            replace_folder(self.tmp, self.out / "last")
        self.accelerator.wait_for_everyone()

    def save_best(self, core: TrainingEncoder, info: CheckpointInfo, step: int, best: float, card: str) -> None:
        """``OUT/best``: the checkpoint ``probe run --model`` reads, with the step and score it was saved at and its
        model ``card`` (``README.md``, :mod:`cselab.train.out.card`). Sharded, every process calls it (the weights
        are gathered) and the main process writes."""
        core = self.whole(core)
        if not self.main:
            return
        save_checkpoint(self.out / "best.tmp", core, info)
        write_json_atomic(self.out / "best.tmp" / BEST_STATE, {"step": step, "best": best})
        write_text_atomic(self.out / "best.tmp" / "README.md", card)
        replace_folder(self.out / "best.tmp", self.out / "best")

    def whole(self, core: TrainingEncoder) -> TrainingEncoder:
        """``core`` itself, or sharded, a plain copy with the gathered weights on the main process (every process
        calls it; the others get ``core`` back)."""
        if self.skeleton is None:
            return core
        full = sharding.full_model_state(core, self.main)
        return sharding.filled(self.skeleton, full) if self.main else core  # type: ignore[return-value]

    @contextlib.contextmanager
    def disk_guard(self, core: TrainingEncoder) -> Iterator[None]:
        """A disk that fills up inside ends the run with one line naming the folder and the space a save takes,
        the half-written ``last.tmp``/``best.tmp`` removed (``OUT/last`` and ``OUT/best`` stay as they were)."""
        need = 3 * sum(p.numel() * p.element_size() for p in core.parameters())
        try:
            yield
        except Exception as err:  # torch.save and safetensors say "disk full" in errors of their own
            if not disk_full(err, self.out, need):
                raise
            self.remove_partials()
            free = shutil.disk_usage(self.out).free / 2**20
            raise TrainingError(f"{self.out}: no space left on the device to save the run (a save takes about "
                                f"{need / 2**20:.0f} MiB: weights and the optimizer's two moments; {free:.0f} MiB "
                                f"free); free some space and run the same command again: it resumes from "
                                f"{self.out / 'last'}") from None
