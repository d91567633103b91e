"""What happens after each optimizer step, as callbacks of the training loop.

The loop (:meth:`cselab.train.trainer.Run.run`) takes optimizer steps from a generator
(:meth:`~cselab.train.trainer.Run.steps`) and hands each step to its callbacks in order: :class:`LogLosses` (every
``log_every`` steps: the loss, its parts, the gradient norm, the learning rate to ``OUT/log.jsonl``),
:class:`EvaluateAndSave` (every ``training.eval_steps``: ``OUT/last``, the dev probe, ``OUT/best``, the early stop),
then a caller's own (``train(..., callbacks=[...])``). A callback that returns True ends the run after that step
(every callback still sees it; a step that was not an evaluation step is then evaluated and saved, so ``OUT/last``
and ``OUT/best`` are up to date); on several processes the main process's decision holds on all of them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cselab.train.trainer import Run


class Callback:
    """Called after every optimizer step, on every process, with the run (``run.step`` is the step just taken) and
    the step's loss parts (this process's share: ``loss``, each loss by name, ``grad_norm``); returns True to end
    the run."""

    def __call__(self, run: Run, parts: dict[str, float]) -> bool:
        raise NotImplementedError


class LogLosses(Callback):
    """Every ``every`` steps and at the last: the loss parts (their mean over processes), the learning rate and the
    seconds since the loop started, to ``OUT/log.jsonl`` (and tensorboard)."""

    def __init__(self, every: int):
        self.every, self.clock = every, time.perf_counter()

    def __call__(self, run: Run, parts: dict[str, float]) -> bool:
        if run.step % self.every == 0 or run.step == run.total:
            parts = run.mean_over_processes(parts)
            run.record({**parts, "lr": run.scheduler.get_last_lr()[0],
                        "seconds": round(time.perf_counter() - self.clock, 2)})
            run.shown["loss"] = f"{parts['loss']:.4f}"
        return False


class EvaluateAndSave(Callback):
    """Every ``training.eval_steps`` steps and at the last: save ``OUT/last``, score the dev probe, keep
    ``OUT/best``; ends the run once the early-stop count reaches ``training.early_stop``."""

    @staticmethod
    def due(run: Run) -> bool:
        """Whether the step just taken is one to evaluate at."""
        return run.step % run.cfg.eval_steps == 0 or run.step == run.total

    def __call__(self, run: Run, parts: dict[str, float]) -> bool:
        if not self.due(run):
            return False
        score = run.evaluate_and_save()
        if score is not None:
            run.shown.update(loss=f"{parts['loss']:.4f}", dev=f"{score:.2f}")
        patience = run.cfg.early_stop
        if patience is None or run.stale < patience:
            return False
        rule = "scored below the one before" if run.cfg.early_stop_rule == "drops" else "without a better dev score"
        run.record({"early_stop": f"{run.stale} evaluations {rule}"})
        return True
