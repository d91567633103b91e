"""Callbacks: what happens after each optimizer step, and the one contract they have with the loop.

After every step the trainer (:class:`cselab.train.recipe.Trainer`) calls each callback's :meth:`Callback.on_step`
with a read-only :class:`TrainerState` (the step just taken, the total, the epoch, the step's losses, the latest dev
score and the best, the method) and that step's :class:`TrainerControl`; after an evaluation it calls
:meth:`Callback.on_evaluate` with the new score in the state. A callback acts on the run only through the control:
``should_log`` (the losses and the learning rate to ``OUT/log.jsonl``), ``should_evaluate`` (run the dev scorer, keep
``OUT/best``, save ``OUT/last``), ``should_save`` (save ``OUT/last``) and ``should_stop`` (end the run after this step,
which is then evaluated and saved; :meth:`TrainerControl.stop` gives the reason written to the log). Writing stays with
the trainer. Built in, in this order: :class:`Schedule` (log every ``log_every`` steps, evaluate every
``training.eval_steps`` and at the last step) and, with ``training.early_stop``, :class:`EarlyStop`; then a caller's
own (``train(..., RunOptions(callbacks=[...]))``). Every process calls its callbacks with the same state (the main
process's dev score is shared); where a caller's callbacks are given, the main process's control holds on all of them.

A callback whose state must survive a resume (as :class:`EarlyStop`'s count) has ``state_dict`` and
``load_state_dict``: the trainer saves it in ``OUT/last`` under the callback's class name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from cselab.errors import TrainingError
from cselab.train.config.method import MethodConfig


@dataclass(frozen=True)
class TrainerState:
    """What a callback may read: ``step`` (the step just taken, counting optimizer steps), ``total`` (the run's
    steps), ``epoch`` (epochs done, a fraction within one), ``losses`` (the step's loss, each loss by name and
    ``grad_norm``: this process's share), ``dev`` (the latest dev score, None before the first or without a dev set),
    ``best`` (the best dev score so far, None before the first), ``improved`` (whether the latest evaluation gave the
    best; every one does without a dev set) and ``config`` (the method, a frozen
    :class:`~cselab.train.config.method.MethodConfig`)."""

    step: int
    total: int
    epoch: float
    losses: Mapping[str, float]
    dev: float | None
    best: float | None
    improved: bool
    config: MethodConfig
    main: bool = True  # whether this is the main process (the one that writes OUT)


@dataclass
class TrainerControl:
    """What a callback may ask of the step it is called after; every flag starts False at each step."""

    should_log: bool = False
    should_evaluate: bool = False
    should_save: bool = False
    should_stop: bool = False
    reason: str | None = None  # why the run stops, written to the log

    def stop(self, reason: str) -> None:
        """End the run after this step, saying why."""
        self.should_stop, self.reason = True, reason


class Callback:
    """A callback of the training loop; override either method (each does nothing by default)."""

    def on_step(self, state: TrainerState, control: TrainerControl) -> None:
        """Called after every optimizer step, on every process."""

    def on_evaluate(self, state: TrainerState, control: TrainerControl) -> None:
        """Called after each evaluation (``state.dev`` is its score), before ``OUT/last`` is saved."""


class Schedule(Callback):
    """Log every ``log_every`` steps, evaluate every ``eval_steps``; both at the last step too (with ``at_end``
    false, the last step is logged and saved to ``OUT/last``, not evaluated, unless the run is shorter than
    ``eval_steps``: then it is its only evaluation, so that ``OUT/best`` exists)."""

    def __init__(self, log_every: int, eval_steps: int, at_end: bool = True):
        self.log_every, self.eval_steps, self.at_end = log_every, eval_steps, at_end

    def on_step(self, state: TrainerState, control: TrainerControl) -> None:
        last = state.step == state.total
        control.should_log |= state.step % self.log_every == 0 or last
        control.should_evaluate |= state.step % self.eval_steps == 0 or (
            last and (self.at_end or state.step < self.eval_steps))
        control.should_save |= last


def early_stop_count(rule: str, count: int, score: float | None, previous: float, improved: bool) -> int:
    """The early-stop count after an evaluation that gave ``score`` (None without a dev set): with
    ``no_improvement``, evaluations in a row without a better best score (0 when ``improved``); with ``drops``
    (SG-BERT's rule), every evaluation so far that scored below the one before it (``previous``; 0 before the
    first), never reset."""
    if rule == "drops":
        return count + int(score is not None and score < previous)
    return 0 if improved else count + 1


class EarlyStop(Callback):
    """``training.early_stop``: ends the run once :func:`early_stop_count` under ``rule`` reaches ``patience``. The
    initial score (``training.eval_at_start``, step 0) is the best to beat but is not counted."""

    def __init__(self, patience: int, rule: str):
        self.patience, self.rule = patience, rule
        self.count, self.previous = 0, 0.0

    def on_evaluate(self, state: TrainerState, control: TrainerControl) -> None:
        score = state.dev
        self.count = early_stop_count(self.rule, self.count, score, self.previous, state.improved)
        self.previous = self.previous if score is None else score
        if self.count >= self.patience:
            rule = "scored below the one before" if self.rule == "drops" else "without a better dev score"
            control.stop(f"{self.count} evaluations {rule}")

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "previous": self.previous}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.previous = int(state["count"]), state["previous"]


class Stateful(Protocol):
    """A callback with a state saved in ``OUT/last``."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def stateful(callbacks: list[Callback]) -> dict[str, Stateful]:
    """The callbacks with a state to save, by class name (one each)."""
    found: dict[str, Stateful] = {}
    for callback in callbacks:
        name = type(callback).__name__
        if hasattr(callback, "state_dict"):
            if name in found:
                raise TrainingError(f"two callbacks of the class {name} have a state to save in OUT/last; give them "
                                    "classes of their own")
            found[name] = cast(Stateful, callback)  # (it has a state_dict)
    return found
