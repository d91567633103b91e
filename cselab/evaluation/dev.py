"""The dev scorers ``training.dev`` names: the checkpoint ``OUT/best`` keeps is the one that scores best on them.

- ``stsb``: STS-B dev (SimCSE's ``metric_for_best_model stsb_spearman``, its example scripts' choice);
- ``sickr``: SICK-R's dev split (SentEval's ``SICK_trial.txt``);
- ``sts-dev-avg``: the mean of the two (SimCSE's ``eval_avg_sts``);
- ``mr``, ``cr``, ``subj``, ``mpqa``, ``sst2``, ``trec``, ``mrpc``: a transfer task's ``devacc``, and
  ``transfer-dev-avg``: the mean over the seven (SimCSE's ``eval_avg_transfer``, its ``--eval_transfer``).

An STS probe scores Spearman's rho x 100 between the cosine of a pair's vectors and its gold score on the first
``limit`` pairs (all by default). A transfer probe scores SentEval's ``devacc`` (accuracy x 100) under the ``fast``
classifier setup SimCSE evaluates with (5 folds; RMSprop, batch 128, tenacity 3, epoch size 2), reading ``limit``
lines per file and never the test split: MR, CR, SUBJ, MPQA's inner cross-validation, SST-2's dev split, TREC's and
MRPC's cross-validation on train. Sentences are encoded whole (the checkpoint's max length, not training's), as
SimCSE evaluates.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any

import numpy as np

from cselab.checksum import sha256
from cselab.data import STSPairs, load_sts
from cselab.data.transfer import TRANSFER_TASKS, load_transfer
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError, did_you_mean
from cselab.evaluation.scoring import DevScorer, Result
from cselab.evaluation.transfer import NCLASSES, sentence_vectors, task_features
from cselab.evaluation.validation import classifier_setup, dev_accuracy
from cselab.evaluation.sts import similarities, subset_limit
from cselab.metrics import MIN_PAIRS, spearman
from cselab.registry import get, names, register

# name -> the (task, split) sets it scores; the headline is their mean
STS_DEV = {"stsb": (("stsb", "dev"),), "sickr": (("sickr", "trial"),),
           "sts-dev-avg": (("stsb", "dev"), ("sickr", "trial"))}
# name -> the transfer tasks it scores (SentEval's devacc); the headline is their mean
TRANSFER_DEV = {**{task.lower(): (task,) for task in TRANSFER_TASKS}, "transfer-dev-avg": TRANSFER_TASKS}
TRANSFER_SETUP = "fast"  # SimCSE's evaluate(): kfold 5, classifier nhid 0, rmsprop, batch 128, tenacity 3, epoch 2
NONE = "none"  # training.dev without a dev set: every evaluation saves OUT/best
BATCH_SIZE = 128


def _known(name: str, table: dict) -> None:
    if name not in table:
        raise ConfigError(f"dev scorer {name!r}{did_you_mean(name, dev_names())}; known: {', '.join(dev_names())}")


def _headline(scores: dict[str, float]) -> float:
    values = list(scores.values())
    return float(np.mean(values)) if len(values) > 1 else values[0]


class STSDevScorer(DevScorer):
    """Spearman x 100 on STS dev sets (:data:`STS_DEV`); ``scores`` holds each set's figure by task."""

    def __init__(self, name: str, data_dir: str | os.PathLike | None = None, limit: int | None = None):
        _known(name, STS_DEV)
        if limit is not None and limit < MIN_PAIRS:
            raise ConfigError(f"--eval-limit {limit}: a dev score needs at least {MIN_PAIRS} pairs")
        self.name, self.limit, self.data_dir = name, limit, data_dir

    @cached_property
    def sets(self) -> list[STSPairs]:
        return [pairs for task, split in STS_DEV[self.name] for pairs in load_sts(task, split, self.data_dir)]

    def identity(self) -> dict[str, Any]:
        digests = [sha256(pairs.files[0]) for pairs in self.sets]
        return {"set": self.name, "sha256": digests[0] if len(digests) == 1 else digests, "limit": self.limit}

    def run(self, encoder: Encoder) -> Result:
        scores = {}
        for pairs in subset_limit(self.sets, self.limit):  # each set encoded alone
            (sims,) = similarities(encoder, [pairs], BATCH_SIZE, show_progress_bar=False)
            scores[pairs.task] = 100 * spearman(sims, pairs.scores)
        return Result(scores, _headline(scores), files=[pairs.files[0] for pairs in self.sets])


class TransferDevScorer(DevScorer):
    """SentEval's ``devacc`` x 100 of transfer tasks (:data:`TRANSFER_DEV`) under the ``fast`` setup; ``scores``
    holds each task's figure. Test splits are neither read nor encoded."""

    def __init__(self, name: str, data_dir: str | os.PathLike | None = None, limit: int | None = None):
        _known(name, TRANSFER_DEV)
        if limit is not None and limit < 2 * classifier_setup(TRANSFER_SETUP).kfold:
            raise ConfigError(f"--eval-limit {limit}: a transfer dev score needs at least "
                              f"{2 * classifier_setup(TRANSFER_SETUP).kfold} lines per file (two per fold)")
        self.name, self.limit, self.data_dir = name, limit, data_dir

    @cached_property
    def tasks(self) -> dict[str, dict[str, Any]]:
        return {task: {split: part for split, part in load_transfer(task, self.data_dir, self.limit).items()
                       if split != "test"} for task in TRANSFER_DEV[self.name]}

    def files(self) -> list:
        return [path for splits in self.tasks.values() for part in splits.values() for path in part.files]

    def identity(self) -> dict[str, Any]:
        return {"set": self.name, "sha256": [sha256(path) for path in dict.fromkeys(self.files())],
                "limit": self.limit, "classifier": TRANSFER_SETUP}

    def run(self, encoder: Encoder) -> Result:
        vectors = sentence_vectors(encoder, self.tasks, BATCH_SIZE, show_progress_bar=False)
        scores = {}
        for task, splits in self.tasks.items():
            X, y, rows = task_features(splits, vectors)
            scores[task] = dev_accuracy(X, y, rows, NCLASSES[task], classifier_setup(TRANSFER_SETUP))
        return Result(scores, _headline(scores), files=list(dict.fromkeys(self.files())))


for _name in STS_DEV:  # plug-ins of the registry's kind dev_scorer, one class serving several names
    register("dev_scorer", _name)(STSDevScorer)
for _name in TRANSFER_DEV:
    register("dev_scorer", _name)(TransferDevScorer)


def dev_names() -> tuple[str, ...]:
    """What ``training.dev`` accepts: every dev scorer (cselab's and the ``cselab.dev_scorers`` entry points'), and
    ``none``."""
    return (*names("dev_scorer"), NONE)


def dev_scorer(name: str, data_dir: str | os.PathLike | None = None, limit: int | None = None) -> DevScorer | None:
    """The dev scorer ``name``, built as every one is, ``cls(name, data_dir, limit)`` (its data read when it first
    runs or says its identity); None for ``none``."""
    if name == NONE:
        return None
    return get("dev_scorer", name, "training.dev").cls(name, data_dir, limit)


def log_key(name: str) -> str:
    """The name a dev score has in ``OUT/log.jsonl`` and the run summary (``best_`` + it)."""
    return name.replace("-", "_") if name.endswith("avg") else f"{name}_dev"
