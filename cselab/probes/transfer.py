"""Transfer tasks: classifiers on frozen sentence vectors, scored as SentEval scores them (accuracy x 100).

MR, CR, SUBJ, MPQA: nested 10-fold cross-validation; SST-2, SST-5 and SICK-E: train/dev/test; TREC and MRPC: 10-fold
cross-validation on train, one refit scored on test; MRPC's and SICK-E's features are ``[|u - v|, u * v]``, and
MRPC's F1 is reported too. SST-5 and SICK-E run by name (``--transfer-tasks SST5,SICKE``); the default is SimCSE's
seven. Rows are ordered as SentEval orders them (by token count, then label) so that the
folds are SentEval's. Every sentence of every task is encoded once, in one call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np

from cselab.data.transfer import TRANSFER_TASKS, LabelledText, load_transfer
from cselab import progress
from cselab.encoders import Encoder
from cselab.evaluation.scoring import Result
from cselab.evaluation.transfer import NCLASSES, sentence_vectors, task_features
from cselab.probes.accuracy import AccuracySuite
from cselab.probes.suite import Score, register_suite, split_setting
from cselab.registry import Param, setting


def score_task(task: str, splits: dict[str, LabelledText], vectors: dict[str, np.ndarray], classifier: str = "full",
               n_jobs: int = 1, items: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """One task's accuracy (x 100) from the vectors of its sentences; ``items`` (when given) receives the test
    predictions and labels, ``transfer/TASK/pred`` and ``.../label``."""
    from cselab.evaluation.validation import classifier_setup, inner_kfold, kfold_then_test, split  # on use: torch

    setup = classifier_setup(classifier)
    X, y, rows = task_features(splits, vectors)
    clock = time.perf_counter()
    if list(rows) == ["all"]:
        result = inner_kfold(X, y, NCLASSES[task], setup, n_jobs)
    elif "dev" in rows:
        result = split(X, y, rows["train"], rows["dev"], rows["test"], NCLASSES[task], setup, n_jobs=n_jobs)
    else:
        result = kfold_then_test(X, y, rows["train"], rows["test"], NCLASSES[task], setup, n_jobs)
        if task == "MRPC":
            from sklearn.metrics import f1_score  # imported on use: --help imports no scikit-learn

            result["f1"] = round(100 * f1_score(result["labels"], result["predictions"]), 2)
    predictions, labels = result.pop("predictions"), result.pop("labels")
    if items is not None:
        items[f"transfer/{task}/pred"], items[f"transfer/{task}/label"] = predictions, labels
    sizes = {f"n_{name}": len(r) for name, r in rows.items()}
    return {**result, **sizes, "classifier_s": round(time.perf_counter() - clock, 2)}


def run_transfer(encoder: Encoder, tasks: Sequence[str] = TRANSFER_TASKS, data_dir: str | os.PathLike | None = None,
                 classifier: str = "full", batch_size: int = 64, n_jobs: int = 1, limit: int | None = None,
                 items: dict[str, np.ndarray] | None = None, split: str = "test") -> tuple[dict[str, Any], list]:
    """Score ``encoder`` on transfer tasks; returns the scores (``avg`` = mean accuracy) and the files read. With
    ``split="dev"`` each task scores SentEval's ``devacc`` alone (``avg`` their mean) and its test split is neither
    encoded nor scored (MR, CR, SUBJ, MPQA's inner cross-validation, SST-2's dev split, TREC's and MRPC's
    cross-validation on train)."""
    data = transfer_data(tasks, data_dir, limit, split)
    clock = time.perf_counter()
    vectors = sentence_vectors(encoder, data, batch_size)
    encode_s = round(time.perf_counter() - clock, 2)
    progress.phase("classifiers", len(data), "task")
    scores: dict[str, Any] = {}
    for name, splits in data.items():
        scores[name] = score_task(name, splits, vectors, classifier, n_jobs, items) if split == "test" else \
            dev_score(name, splits, vectors, classifier, n_jobs)
        progress.advance()
    scores["avg"] = float(np.mean([scores[name]["acc" if split == "test" else "devacc"] for name in data]))
    scores["classifier"] = classifier
    if split == "dev":
        scores["split"] = split
    scores["sentences_encoded"] = len(vectors)
    scores["encode_s"] = encode_s
    files = [path for splits in data.values() for part in splits.values() for path in part.files]
    return scores, files


def transfer_data(tasks: Sequence[str], data_dir: str | os.PathLike | None = None, limit: int | None = None,
                  split: str = "test") -> dict[str, dict[str, LabelledText]]:
    """Each task's splits by its SentEval name, the first ``limit`` lines of each file; with ``split="dev"`` without
    the test split."""
    data = {task.upper().replace("-", ""): load_transfer(task, data_dir, limit) for task in tasks}
    return data if split == "test" else {name: {part: texts for part, texts in splits.items() if part != "test"}
                                         for name, splits in data.items()}


def dev_score(task: str, splits: dict[str, LabelledText], vectors: dict[str, np.ndarray], classifier: str,
              n_jobs: int = 1) -> dict[str, Any]:
    """One task's ``devacc`` (x 100) from the vectors of its splits other than test."""
    from cselab.evaluation.validation import classifier_setup, dev_accuracy  # on use: torch

    X, y, rows = task_features(splits, vectors)
    return {"devacc": dev_accuracy(X, y, rows, NCLASSES[task], classifier_setup(classifier), n_jobs),
            **{f"n_{name}": len(r) for name, r in rows.items()}}


@register_suite
class TransferSuite(AccuracySuite):
    """SentEval's transfer tasks (``options.transfer_tasks``) with its classifier setup (``options.classifier``)."""

    name, title, heading = "transfer", "Transfer (test accuracy x 100)", "Transfer tasks"
    rank = 30
    main = {"avg": Score("Transfer avg.")}

    @dataclass
    class Options(AccuracySuite.Options):
        transfer_tasks: tuple[str, ...] = setting(TRANSFER_TASKS, "transfer tasks, e.g. MR,TREC (default: "
                                                  "SimCSE's seven; SST5 and SICKE by name)", items=Param(str))
        split: str = split_setting()

    params: Options

    def run(self, encoder: Encoder) -> Result:
        items: dict[str, np.ndarray] = {}
        o, p = self.options, self.params
        scores, files = run_transfer(encoder, p.transfer_tasks, o.data_dir, p.classifier, o.batch_size, p.n_jobs,
                                     o.limit, items, p.split)
        metadata = {key: scores.pop(key) for key in self.metadata if key in scores}
        return Result(scores, scores["avg"], items, files, metadata)

    def files(self) -> list[Path]:
        data = transfer_data(self.params.transfer_tasks, self.options.data_dir, self.options.limit, self.params.split)
        return [path for splits in data.values() for part in splits.values() for path in part.files]

    @classmethod
    def least_limit(cls, settings: Mapping[str, Any]) -> int:
        """Two lines per fold of the classifier setup's cross-validation."""
        from cselab.evaluation.validation import classifier_setup  # on use: torch

        return 2 * classifier_setup(settings["classifier"]).kfold
