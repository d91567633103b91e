"""How a run is carried out, beside what it trains (a method, a base model, data) and where (``OUT``): one object for
:func:`~cselab.train.recipe.train`, the run's start and its trainer, as transformers' ``TrainingArguments`` is."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from cselab.errors import TrainingError
from cselab.train.run.callbacks import Callback
from cselab.train.out.folder import RESTARTS


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """``data_dir``: the data root (None: ``CSELAB_DATA_DIR``); ``eval_limit``: dev pairs scored per evaluation (None:
    all); ``log_every``: steps between log lines; ``progress``: a progress bar; ``report_to``: trackers
    (:mod:`~cselab.train.run.launch`); ``overwrite``: delete the run's files first; ``restart_from="best"``: continue
    from the best checkpoint's weights with a fresh optimizer (when ``OUT/last`` is damaged); ``callbacks``: after the
    built-in ones (:mod:`~cselab.train.run.callbacks`)."""

    data_dir: str | os.PathLike | None = None
    eval_limit: int | None = None
    log_every: int = 10
    progress: bool = True
    report_to: Sequence[str] = ()
    overwrite: bool = False
    restart_from: str | None = None
    callbacks: Sequence[Callback] = ()

    def __post_init__(self) -> None:
        if self.restart_from not in (None, *RESTARTS):
            raise TrainingError(f"--restart-from {self.restart_from!r}: expected one of {', '.join(RESTARTS)}")
        if self.log_every < 1:
            raise TrainingError(f"log_every {self.log_every}: expected a whole number of steps >= 1")
        if self.eval_limit is not None and self.eval_limit < 2:
            raise TrainingError(f"--eval-limit {self.eval_limit}: expected a number of pairs >= 2 (a rank "
                                "correlation needs two)")
        object.__setattr__(self, "report_to", tuple(self.report_to))
        object.__setattr__(self, "callbacks", tuple(self.callbacks))

    @property
    def reporting(self) -> bool:
        """Whether the run reports to a tracker."""
        return bool(self.report_to)
