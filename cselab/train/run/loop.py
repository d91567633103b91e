"""The loop: optimizer steps one after another, each over ``training.grad_accum`` batches (:meth:`Loop.steps` yields
each step's losses). It knows nothing of the run folder: the trainer saves, evaluates and stops it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from accelerate import Accelerator

from cselab.errors import TrainingError
from cselab.train.objective import Objective
from cselab.train.run.cached import cached_losses
from cselab.train.run.optim import clip_and_step
from cselab.train.plugins.hooks import perturb_weights, restore_weights
from cselab.train.run.setup import TrainingSetup


class Diverged(TrainingError):
    """The loss stopped being a finite number."""


def backward_pass(model, objective: Objective, rows, backward: Callable, initial_weights=None,
                  trainable: list[torch.Tensor] | None = None, mini_batch_size: int | None = None):
    """One batch's losses and their ``backward``; with a weight hook (SAM/AWP) the gradient is taken again at
    the perturbed ``trainable`` weights, which are then restored; with ``mini_batch_size``, cached
    (:mod:`cselab.train.run.cached`). Returns the (first pass's) loss and its parts; a loss that is not finite is
    returned without a backward pass."""
    if mini_batch_size is not None:
        parts, replay = cached_losses(model, objective, rows, mini_batch_size, initial_weights)
    else:
        parts, replay = objective(model, rows, initial_weights), None
    if not parts:
        raise TrainingError(f"no loss of {objective.method} could be computed on a batch: none of its rows has all "
                            f"the columns a loss reads ({', '.join(objective.columns)})")
    loss = objective.total(parts)
    if not torch.isfinite(loss):
        return loss, parts
    backward(loss)
    if replay is not None:
        replay()
    if objective.weight_hook is not None:  # the gradient at the perturbed weights updates the original ones
        originals = perturb_weights(trainable, objective.weight_hook)
        for parameter in trainable:
            parameter.grad = None
        backward(objective.total(objective(model, rows, initial_weights)))
        restore_weights(trainable, originals)
    return loss, parts


class Loop:
    """Optimizer steps of ``parts`` on ``accelerator``; ``encoder``, ``optimizer`` and ``loader`` are the ones
    accelerate prepared. ``step`` counts the steps taken (set by a resume)."""

    def __init__(self, accelerator: Accelerator, parts: TrainingSetup, encoder, optimizer, loader):
        self.accelerator, self.parts, self.encoder, self.optimizer, self.loader = (accelerator, parts, encoder,
                                                                                   optimizer, loader)
        self.cfg, self.step, self.batches = parts.cfg, 0, None  # batches: made at the first step
        self.trainable = parts.trainable

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

    def train_step(self) -> dict[str, float]:
        """One optimizer step over ``grad_accum`` batches; returns the loss and its parts (this process's) and the
        gradient norm before clipping. A loss that is not finite is :class:`Diverged`."""
        accum, parts_sum, objective = self.cfg.grad_accum, {}, self.parts.objective
        if self.batches is None:
            self.batches = self._batches()
        for _ in range(accum):
            local = next(self.batches)
            objective.new_batch()
            self.parts.encoder.new_batch()  # a momentum copy follows the weights this batch is encoded at
            with self.accelerator.accumulate(self.encoder):  # gradients synchronised at the step's last batch
                loss, parts = backward_pass(self.encoder, objective, local, self.accelerator.backward,
                                            self.parts.initial_weights, self.trainable, self.cfg.mini_batch_size)
            if not torch.isfinite(loss):
                raise Diverged(f"the loss became {loss.item()} at step {self.step + 1}")
            for key, value in {"loss": loss, **parts}.items():
                parts_sum[key] = parts_sum.get(key, 0.0) + value.item() / accum
        norm = clip_and_step(self.optimizer, self.parts.scheduler, self.trainable, self.cfg.max_grad_norm,
                             self.accelerator.clip_grad_norm_)
        if norm is not None:
            parts_sum["grad_norm"] = norm  # before clipping
        self.step += 1
        return parts_sum

    def steps(self) -> Iterator[dict[str, float]]:
        """Optimizer steps to the end of training, each step's losses (this process's) as it is taken."""
        while self.step < self.parts.total:
            yield self.train_step()

    def mean_over_processes(self, losses: dict[str, float]) -> dict[str, float]:
        """Each process holds its share of the batch; their mean is the batch's loss."""
        if self.accelerator.num_processes == 1:
            return losses
        means = self.accelerator.reduce(torch.tensor(list(losses.values()), device=self.accelerator.device),
                                        reduction="mean")
        return dict(zip(losses, means.tolist(), strict=True))
