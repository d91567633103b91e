"""The loop: optimizer steps one after another, each :class:`~cselab.train.step.Step` over ``training.grad_accum``
batches (:meth:`Loop.steps` yields each step's losses). It knows nothing of the run folder: the trainer saves,
evaluates and stops it.

Nothing is read back from the device in a step: the losses, their parts and the gradient norm stay there as
:class:`~cselab.train.step.StepLosses`, read when the trainer logs, evaluates or saves (or a callback reads them), and
a loss that is not finite is watched for on the device (:class:`Divergence`): :meth:`Loop.check` names the first step
that gave one before anything after it is logged or saved. The batches are tokenised ``training.prefetch`` ahead in
background threads (:class:`~cselab.train.batches.Ahead`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from accelerate import Accelerator

from cselab.errors import TrainingError
from cselab.train.batches import Ahead, Batch
from cselab.train.run.setup import TrainingSetup
from cselab.train.step import Step, StepLosses


class Diverged(TrainingError):
    """The loss stopped being a finite number."""


class Divergence:
    """The first step whose loss was not finite, and that loss, kept on the device (0: none yet)."""

    def __init__(self):
        self.step: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None

    def watch(self, step: int, loss: torch.Tensor) -> None:
        """Note ``loss`` of ``step`` (a device tensor; nothing is read back)."""
        loss = loss.detach().float()
        if self.step is None or self.loss is None:  # (set together)
            self.step = torch.zeros((), dtype=torch.int64, device=loss.device)
            self.loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
        first = ~torch.isfinite(loss) & (self.step == 0)
        self.step = torch.where(first, step, self.step)
        self.loss = torch.where(first, loss, self.loss)

    def check(self) -> None:
        """A :class:`Diverged` naming the first step whose loss was not finite, if one was (a read: the device
        waits)."""
        if self.step is not None and self.loss is not None and int(self.step):
            raise Diverged(f"the loss became {float(self.loss)} at step {int(self.step)}")


class Loop:
    """Optimizer steps of ``parts`` on ``accelerator``; ``encoder``, ``optimizer`` and ``loader`` are the ones
    accelerate prepared. ``step`` counts the steps taken (set by a resume)."""

    def __init__(self, accelerator: Accelerator, parts: TrainingSetup, encoder, optimizer, loader):
        self.accelerator, self.parts, self.encoder, self.optimizer, self.loader = (accelerator, parts, encoder,
                                                                                   optimizer, loader)
        self.cfg, self.step = parts.cfg, 0
        self.batches: Iterator[Batch] | None = None  # made at the first step
        self.execution = parts.execution
        self.take: Step = parts.step(encoder, optimizer, accelerator)
        self.divergence = Divergence()

    @property
    def epoch(self) -> float:
        """Epochs done: a fraction within one."""
        return self.step * self.cfg.grad_accum / self.parts.per_epoch

    def _batches(self) -> Iterator:
        """This process's batches, epoch after epoch (each in the order its seed gives), from the current step on:
        on a resume the epoch's first batches are skipped, not drawn."""
        epoch, skip = divmod(self.step * self.cfg.grad_accum, self.parts.per_epoch)
        while True:
            self.loader.set_epoch(epoch)
            yield from self.accelerator.skip_first_batches(self.loader, skip) if skip else self.loader
            epoch, skip = epoch + 1, 0

    def train_step(self) -> StepLosses:
        """One optimizer step over ``grad_accum`` batches (:class:`~cselab.train.step.Step`); returns the loss and its
        parts (this process's) and the gradient norm before clipping, on the device. A loss that is not finite is
        watched for, not read (:meth:`check`)."""
        if self.batches is None:
            depth, collate = self.execution.prefetch, self.parts.collator
            self.batches = Ahead(self._batches(), depth, collate) if depth else map(collate, self._batches())
        batches = self.batches
        losses = self.take(next(batches) for _ in range(self.cfg.grad_accum))  # each drawn when its turn comes
        self.step += 1
        for loss in losses.per_batch():
            self.divergence.watch(self.step, loss)
        return losses

    def check(self) -> None:
        """Raise :class:`Diverged` if a step so far gave a loss that is not finite."""
        self.divergence.check()

    def steps(self) -> Iterator[StepLosses]:
        """Optimizer steps to the end of training, each step's losses (this process's) as it is taken."""
        try:
            while self.step < self.parts.total:
                yield self.train_step()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread that tokenises ahead, if any."""
        if isinstance(self.batches, Ahead):
            self.batches.close()
        self.batches = None

    def mean_over_processes(self, losses: Mapping[str, float]) -> dict[str, float]:
        """Each process holds its share of the batch; their mean is the batch's loss."""
        if self.accelerator.num_processes == 1:
            return dict(losses)
        means = self.accelerator.reduce(torch.tensor(list(losses.values()), device=self.accelerator.device),
                                        reduction="mean")
        return dict(zip(losses, means.tolist(), strict=True))
