"""The loop: optimizer steps one after another, each over ``training.grad_accum`` batches (:meth:`Loop.steps` yields
each step's losses). It knows nothing of the run folder: the trainer saves, evaluates and stops it.

Nothing is read back from the device in a step: the losses, their parts and the gradient norm stay there as
:class:`StepLosses`, read when the trainer logs, evaluates or saves (or a callback reads them), and a loss that is not
finite is watched for on the device (:class:`Divergence`): :meth:`Loop.check` names the first step that gave one
before anything after it is logged or saved. The batches are tokenised ``training.prefetch`` ahead in background
threads (:class:`~cselab.train.batches.Ahead`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import torch
from accelerate import Accelerator

from cselab.errors import TrainingError
from cselab.train.batches import Ahead, Batch
from cselab.train.objective import Objective
from cselab.train.plugins import functional
from cselab.train.run.cached import cached_losses
from cselab.train.run.optim import clip_and_step
from cselab.train.plugins.hooks import perturb_weights, restore_weights
from cselab.train.run.setup import TrainingSetup


class Diverged(TrainingError):
    """The loss stopped being a finite number."""


def backward_pass(model, objective: Objective, rows, backward: Callable, initial_weights=None,
                  trainable: list[torch.Tensor] | None = None, mini_batch_size: int | None = None,
                  check_finite: bool = True):
    """One batch's losses and their ``backward``; with a weight hook (SAM/AWP) the gradient is taken again at
    the perturbed ``trainable`` weights, which are then restored; with ``mini_batch_size``, cached
    (:mod:`cselab.train.run.cached`). Returns the (first pass's) loss and its parts. With ``check_finite`` a loss that
    is not finite is returned without a backward pass (a read of the loss: the device waits); without, the backward
    runs whatever the loss, and the caller watches for it (:class:`Divergence`)."""
    if mini_batch_size is not None:
        parts, replay = cached_losses(model, objective, rows, mini_batch_size, initial_weights)
    else:
        parts, replay = objective(model, rows, initial_weights), None
    if not parts:
        raise TrainingError(f"no loss of {objective.method} could be computed on a batch: none of its rows has all "
                            f"the columns a loss reads ({', '.join(objective.columns)})")
    loss = objective.total(parts)
    if check_finite and not torch.isfinite(loss):
        return loss, parts
    backward(loss)
    if replay is not None:
        replay()
    if objective.weight_hook is not None:  # the gradient at the perturbed weights updates the original ones
        if trainable is None:
            raise TrainingError(f"{objective.method}: its weight hook moves the trainable weights; none were given")
        originals = perturb_weights(trainable, objective.weight_hook)
        for parameter in trainable:
            parameter.grad = None
        backward(objective.total(objective(model, rows, initial_weights)))
        restore_weights(trainable, originals)
    return loss, parts


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


class StepLosses(Mapping):
    """One optimizer step's loss, its parts (each the mean over the step's ``accum`` batches) and the gradient norm
    before clipping, held as device tensors and read (one wait for the device) when first looked at."""

    def __init__(self, batches: list[dict[str, torch.Tensor]], accum: int, norm: torch.Tensor | None):
        self._batches, self._accum, self._norm = batches, accum, norm
        self._values: dict[str, float] | None = None

    def _read(self) -> dict[str, float]:
        if self._values is None:
            keys = list(dict.fromkeys(key for batch in self._batches for key in batch))
            tensors = [batch[key].detach().reshape(()).double() for batch in self._batches for key in batch]
            if self._norm is not None:
                tensors.append(self._norm.detach().reshape(()).double().to(tensors[0].device))
            read = iter(torch.stack(tensors).tolist()) if tensors else iter(())
            values: dict[str, float] = {}
            for batch in self._batches:  # summed in the batches' order, as each was read before
                for key in batch:
                    values[key] = values.get(key, 0.0) + next(read) / self._accum
            values = {key: values[key] for key in keys}
            if self._norm is not None:
                values["grad_norm"] = next(read)
            self._values = values
        return self._values

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __iter__(self):
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


class Loop:
    """Optimizer steps of ``parts`` on ``accelerator``; ``encoder``, ``optimizer`` and ``loader`` are the ones
    accelerate prepared. ``step`` counts the steps taken (set by a resume)."""

    def __init__(self, accelerator: Accelerator, parts: TrainingSetup, encoder, optimizer, loader):
        self.accelerator, self.parts, self.encoder, self.optimizer, self.loader = (accelerator, parts, encoder,
                                                                                   optimizer, loader)
        self.cfg, self.step = parts.cfg, 0
        self.batches: Iterator[Batch] | None = None  # made at the first step
        self.trainable = parts.trainable
        self.execution = parts.execution
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
        """One optimizer step over ``grad_accum`` batches; returns the loss and its parts (this process's) and the
        gradient norm before clipping, on the device. A loss that is not finite is watched for, not read
        (:meth:`check`)."""
        accum, objective, batches = self.cfg.grad_accum, self.parts.objective, []
        if self.batches is None:
            depth, collate = self.execution.prefetch, self.parts.collator
            self.batches = Ahead(self._batches(), depth, collate) if depth else map(collate, self._batches())
        for _ in range(accum):
            local = next(self.batches)
            objective.new_batch()
            self.parts.encoder.new_batch()  # a momentum copy follows the weights this batch is encoded at
            if self.execution.cuda_graphs:  # the graphs' outputs of the batch before are no longer read
                torch.compiler.cudagraph_mark_step_begin()
            with self.accelerator.accumulate(self.encoder), functional.compiled(self.execution.compile):
                loss, parts = backward_pass(self.encoder, objective, local, self.accelerator.backward,
                                            self.parts.initial_weights, self.trainable, self.cfg.mini_batch_size,
                                            check_finite=False)
            self.divergence.watch(self.step + 1, loss)
            batches.append({key: value.detach() for key, value in {"loss": loss, **parts}.items()})
        norm = clip_and_step(self.optimizer, self.parts.scheduler, self.trainable, self.cfg.max_grad_norm,
                             self.accelerator.clip_grad_norm_)
        self.step += 1
        return StepLosses(batches, accum, norm)

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
