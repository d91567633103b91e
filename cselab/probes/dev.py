"""The dev set ``training.dev`` names: a probe suite run on its dev split, whose headline picks the checkpoint
``OUT/best`` keeps. One STS and one transfer implementation serve both stages: the dev score is the suite's own.

``training.dev`` is a mapping, ``{suite: sts, tasks: [stsb]}`` (the suite's own settings, :attr:`~cselab.probes.
suite.Suite.Options`, with ``split: dev`` implied; a test split is refused), or one of the names SimCSE's and
SentEval's choices have (:data:`NAMED`):

- ``stsb``: STS-B dev (SimCSE's ``metric_for_best_model stsb_spearman``, its example scripts' choice);
- ``sickr``: SICK-R's dev split (SentEval's ``SICK_trial.txt``);
- ``sts-dev-avg``: the mean of the two (SimCSE's ``eval_avg_sts``);
- ``mr``, ``cr``, ``subj``, ``mpqa``, ``sst2``, ``trec``, ``mrpc``: a transfer task's ``devacc``, and
  ``transfer-dev-avg``: the mean over the seven (SimCSE's ``eval_avg_transfer``, its ``--eval_transfer``), under the
  ``fast`` classifier setup SimCSE evaluates with (5 folds; RMSprop, batch 128, tenacity 3, epoch size 2);
- ``none``: no dev set, every evaluation is the best.

A suite can be a dev set when it declares the ``split`` setting (:func:`~cselab.probes.suite.split_setting`) and says
which files it reads (:meth:`~cselab.probes.suite.Suite.files`): what the run's identity hashes. ``--eval-limit`` is
the suite's ``limit`` (the first N pairs or lines of each file); sentences are encoded whole (the checkpoint's max
length, not training's), 128 at a time, as SimCSE evaluates.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from cselab import progress
from cselab.checksum import sha256
from cselab.data.transfer import TRANSFER_TASKS
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError, did_you_mean
from cselab.evaluation.scoring import Result
from cselab.probes.suite import ProbeOptions, Suite, suites
from cselab.files import shown
from cselab.registry import check, schema_of

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

NONE = "none"  # training.dev without a dev set: every evaluation saves OUT/best
BATCH_SIZE = 128
WHERE = "training.dev"
#: The named dev sets: SimCSE's and SentEval's choices, each a suite's settings on its dev split.
NAMED: dict[str, dict[str, Any]] = {
    "stsb": {"suite": "sts", "tasks": ["stsb"]},
    "sickr": {"suite": "sts", "tasks": ["sickr"]},
    "sts-dev-avg": {"suite": "sts", "tasks": ["stsb", "sickr"]},
    **{task.lower(): {"suite": "transfer", "transfer_tasks": [task], "classifier": "fast"} for task in TRANSFER_TASKS},
    "transfer-dev-avg": {"suite": "transfer", "transfer_tasks": list(TRANSFER_TASKS), "classifier": "fast"},
}


def dev_names() -> tuple[str, ...]:
    """The names ``training.dev`` accepts besides a mapping: the named dev sets, and ``none``."""
    return (*sorted(NAMED), NONE)


def dev_suites() -> list[str]:
    """The suites that can score a dev split (a ``split`` setting with a ``dev`` choice)."""
    return [name for name, cls in suites().items() if _has_dev_split(cls)]


def _has_dev_split(cls: type[Suite]) -> bool:
    split = schema_of(cls.Options).get("split") if cls.Options is not None else None
    return split is not None and "dev" in (split.allowed() or ())


def resolve(value: str | Mapping[str, Any]) -> tuple[type[Suite], dict[str, Any]]:
    """The suite ``value`` names and its own settings on the dev split, checked (one line naming the key)."""
    if isinstance(value, str):
        if value not in NAMED:
            raise ConfigError(f"{WHERE}: {value!r} is not allowed{did_you_mean(value, dev_names())}; expected one of "
                              f"{', '.join(dev_names())}, or a mapping {{suite: NAME, ...its settings}}")
        value = NAMED[value]
    if not isinstance(value, Mapping) or not isinstance(value.get("suite"), str):
        raise ConfigError(f"{WHERE}: {shown(value)}: expected a dev set's name or a mapping with suite: NAME")
    settings = {key: item for key, item in value.items() if key != "suite"}
    known = suites()
    name = value["suite"]
    if name not in known or not _has_dev_split(known[name]):
        raise ConfigError(f"{WHERE}.suite: {name!r}{did_you_mean(name, dev_suites())} is not a suite that scores "
                          f"a dev split; those that do: {', '.join(dev_suites())}")
    if settings.get("split", "dev") != "dev":
        raise ConfigError(f"{WHERE}.split: {shown(settings['split'])}: a run selects its checkpoint on dev data; "
                          "a test split would be read to choose the model it reports")
    cls = known[name]
    assert cls.Options is not None  # (it has a split setting)
    checked = check({**settings, "split": "dev"}, schema_of(cls.Options), WHERE)
    built = asdict(cast("DataclassInstance", cls.Options(**checked)))  # its rules across settings too
    return cls, json.loads(json.dumps(built))  # as OUT/run.json holds them (lists), so that a resume compares alike


def dev_set(value: str | Mapping[str, Any], data_dir: str | os.PathLike | None = None, limit: int | None = None
            ) -> DevSet | None:
    """The dev set ``value`` names over the data root ``data_dir``, ``limit`` pairs or lines of each file (None:
    all); None for ``none``. Its data is read when it first runs or says its identity."""
    return None if value == NONE else DevSet(value, data_dir, limit)


class DevSet:
    """A suite run on its dev split with the run's ``limit`` (:func:`dev_set`)."""

    def __init__(self, value: str | Mapping[str, Any], data_dir: str | os.PathLike | None, limit: int | None):
        self.value, self.limit = value, limit
        self.cls, self.settings = resolve(value)
        least = self.cls.least_limit(self.settings)
        if limit is not None and limit < least:
            raise ConfigError(f"--eval-limit {limit}: a {self.cls.name} dev score needs at least {least} pairs or "
                              "lines per file")
        self.options = ProbeOptions(data_dir=data_dir, batch_size=BATCH_SIZE, limit=limit, settings=self.settings)

    @cached_property
    def suite(self) -> Suite:
        return self.cls(self.options)

    def run(self, encoder: Encoder) -> Result:
        """The suite's result on ``encoder``; its headline is the dev score. Nothing is shown while it runs."""
        with progress.current(progress.Progress(f"dev {self.cls.name}", enabled=False)):
            return self.suite.run(encoder)

    def score(self, encoder: Encoder) -> float:
        """The dev score of ``encoder``: the suite's headline; NaN where it has none (a constant encoder's rank
        correlation), which never counts as an improvement."""
        headline = self.run(encoder).headline
        return math.nan if headline is None else headline

    def identity(self) -> dict[str, Any]:
        """What the dev set reads, by content (its files' sha256), and its settings: a run resumed against another
        identity is refused."""
        digests = [sha256(path) for path in dict.fromkeys(self.suite.files())]
        return {"set": self.value, "suite": self.cls.name, "settings": self.settings,
                "sha256": digests[0] if len(digests) == 1 else digests, "limit": self.limit}



def describe(value: str | Mapping[str, Any]) -> str:
    """``training.dev`` in words: a name, or the suite and its settings as given (``sts (tasks: ['stsb'])``)."""
    if isinstance(value, str):
        return value
    return f"{value['suite']} ({', '.join(f'{k}: {v}' for k, v in value.items() if k != 'suite')})"


def log_key(value: str | Mapping[str, Any]) -> str:
    """The name a dev score has in ``OUT/log.jsonl`` and the run summary: a named set's (``stsb_dev``,
    ``sts_dev_avg``), else the suite's (``sts_dev``)."""
    if not isinstance(value, str):
        return f"{value['suite']}_dev"
    return value.replace("-", "_") if value.endswith("avg") else f"{value}_dev"
