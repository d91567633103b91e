"""One training step, written once: :class:`Step` takes a method's objective through its batches' forward and
backward passes (cached InfoNCE with ``training.mini_batch_size``, :mod:`cselab.train.step.cached`; a weight hook's
second pass at perturbed weights, SAM/AWP), then the update (:func:`~cselab.train.step.update.clip_and_step`). The
trainer's loop, the tests and the benchmarks drive it; nothing else writes a backward pass or an optimizer update
of a method (tests/train/test_step.py looks).

Each phase is a ``torch.profiler`` range (``forward``, ``backward``, ``optimizer``), so that a profile of training
parts a step the same way wherever it runs. Nothing is read back from the device: the losses come back as
:class:`~cselab.train.step.losses.StepLosses`, and a loss that is not finite is the caller's to watch (the recipe's
:class:`~cselab.train.step.divergence.Divergence`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.profiler import record_function

from cselab.errors import TrainingError
from cselab.train.objective import Objective
from cselab.train.plugins import functional
from cselab.train.plugins.hooks import perturb_weights, restore_weights
from cselab.train.step.cached import cached_losses
from cselab.train.step.losses import StepLosses
from cselab.train.step.update import clip_and_step

__all__ = ["Step", "StepLosses", "clip_and_step"]


def _backward(loss: torch.Tensor) -> None:
    loss.backward()


class Step:
    """A method's optimizer step over ``model`` (the module the passes run through: accelerate's or FSDP's wrapper
    where there is one) with ``objective``, ``optimizer`` and ``scheduler`` (None: a constant rate). Without an
    optimizer it takes backward passes only (:meth:`backward_pass`: the gradients of a batch, as tests read them).

    ``encoder`` is the unwrapped training encoder (a momentum copy follows its weights before each batch; default
    ``model``); ``trainable`` the parameters a weight hook perturbs and clipping reads; ``initial_weights`` what
    ``recall`` compares (a callable, :meth:`~cselab.train.run.setup.TrainingSetup.initial_weights`). ``backward``,
    ``clip`` and ``accumulate`` are accelerate's in the trainer (the loss scaled under fp16, the gradients unscaled
    before clipping, gradient synchronisation on the last batch of an accumulation); ``compile`` and
    ``cuda_graphs`` are the run's :class:`~cselab.train.run.execution.Execution`."""

    def __init__(self, model: torch.nn.Module, objective: Objective, optimizer: torch.optim.Optimizer | None = None,
                 scheduler: Any = None, trainable: list[torch.Tensor] | None = None, *,
                 max_grad_norm: float | None = None, mini_batch_size: int | None = None,
                 initial_weights: Callable | None = None, encoder: Any = None,
                 backward: Callable[[torch.Tensor], None] = _backward, clip: Callable = torch.nn.utils.clip_grad_norm_,
                 accumulate: Callable[[], AbstractContextManager] = contextlib.nullcontext, compile: bool = False,
                 cuda_graphs: bool = False):
        self.model, self.objective, self.optimizer = model, objective, optimizer
        if scheduler is None and optimizer is not None:
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        self.scheduler = scheduler
        self.trainable: list[torch.Tensor] = (trainable if trainable is not None
                                              else [p for p in model.parameters() if p.requires_grad])
        self.max_grad_norm, self.mini_batch_size, self.initial_weights = max_grad_norm, mini_batch_size, initial_weights
        self.encoder: Any = encoder if encoder is not None else model
        self.backward_fn, self.clip, self.accumulate = backward, clip, accumulate
        self.compile, self.cuda_graphs = compile, cuda_graphs

    def __call__(self, batches: Iterable[Any]) -> StepLosses:
        """One optimizer step over ``batches`` (``training.grad_accum`` of them, each drawn when its turn comes): each
        batch's losses and backward pass, then the update. Returns the step's losses (each the mean over the batches)
        and the gradient norm before clipping, on the device."""
        losses = []
        for batch in batches:
            loss, parts = self.backward_pass(batch)
            losses.append({key: value.detach() for key, value in {"loss": loss, **parts}.items()})
        return StepLosses(losses, len(losses), self.update())

    def backward_pass(self, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One batch (rows, or a collated :class:`~cselab.train.batches.Batch`): its losses, and their gradient
        added to the parameters'. Returns the loss and its parts (the first pass's, with a weight hook)."""
        self.objective.new_batch()
        self.encoder.new_batch()  # a momentum copy follows the weights this batch is encoded at
        if self.cuda_graphs:  # the graphs' outputs of the batch before are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        with self.accumulate(), functional.compiled(self.compile):
            return self._losses_and_backward(batch)

    def _losses_and_backward(self, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        objective = self.objective
        with record_function("forward"):
            if self.mini_batch_size is not None:
                parts, replay = cached_losses(self.model, objective, batch, self.mini_batch_size, self.initial_weights)
            else:
                parts, replay = objective(self.model, batch, self.initial_weights), None
        if not parts:
            raise TrainingError(f"no loss of {objective.method} could be computed on a batch: none of its rows has "
                                f"all the columns a loss reads ({', '.join(objective.columns)})")
        loss = objective.total(parts)
        with record_function("backward"):
            self.backward_fn(loss)
            if replay is not None:
                replay()
        if objective.weight_hook is not None:  # the gradient at the perturbed weights updates the original ones
            originals = perturb_weights(self.trainable, objective.weight_hook)
            for parameter in self.trainable:
                parameter.grad = None
            with record_function("forward"):
                again = objective.total(objective(self.model, batch, self.initial_weights))
            with record_function("backward"):
                self.backward_fn(again)
            restore_weights(self.trainable, originals)
        return loss, parts

    def update(self) -> torch.Tensor | None:
        """The update that ends the step (clipped to ``max_grad_norm``); returns the norm before clipping, on the
        device (None when not clipped)."""
        if self.optimizer is None:
            raise TrainingError("this step was built without an optimizer: it takes backward passes only")
        with record_function("optimizer"):
            return clip_and_step(self.optimizer, self.scheduler, self.trainable, self.max_grad_norm, self.clip)
