"""Transfer tasks: classifiers on frozen sentence vectors, scored as SentEval scores them (accuracy x 100).

MR, CR, SUBJ, MPQA: nested 10-fold cross-validation; SST-2: train/dev/test; TREC and MRPC: 10-fold
cross-validation on train, one refit scored on test; MRPC's features are ``[|u - v|, u * v]`` and its
F1 is reported too. Rows are ordered as SentEval orders them (by token count, then label) so that the
folds are SentEval's. Every sentence of every task is encoded once, in one call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cselab.data.transfer import TRANSFER_TASKS, LabelledText, load_transfer
from cselab import progress
from cselab.encoders import Encoder
from cselab.evaluation.scoring import Result
from cselab.evaluation.transfer import NCLASSES, sentence_vectors, task_features
from cselab.probes.accuracy import AccuracySuite
from cselab.probes.suite import Score, register_suite
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
                 items: dict[str, np.ndarray] | None = None) -> tuple[dict[str, Any], list]:
    """Score ``encoder`` on transfer tasks; returns the scores (``avg`` = mean accuracy) and the files read."""
    data = {task.upper().replace("-", ""): load_transfer(task, data_dir, limit) for task in tasks}
    clock = time.perf_counter()
    vectors = sentence_vectors(encoder, data, batch_size)
    encode_s = round(time.perf_counter() - clock, 2)
    progress.phase("classifiers", len(data), "task")
    scores: dict[str, Any] = {}
    for name, splits in data.items():
        scores[name] = score_task(name, splits, vectors, classifier, n_jobs, items)
        progress.advance()
    scores["avg"] = float(np.mean([scores[name]["acc"] for name in data]))
    scores["classifier"] = classifier
    scores["sentences_encoded"] = len(vectors)
    scores["encode_s"] = encode_s
    files = [path for splits in data.values() for part in splits.values() for path in part.files]
    return scores, files


@register_suite
class TransferSuite(AccuracySuite):
    """SentEval's transfer tasks (``options.transfer_tasks``) with its classifier setup (``options.classifier``)."""

    name, title, heading = "transfer", "Transfer (test accuracy x 100)", "Transfer tasks"
    rank = 30
    main = {"avg": Score("Transfer avg.")}

    @dataclass
    class Options(AccuracySuite.Options):
        transfer_tasks: tuple[str, ...] = setting(TRANSFER_TASKS, "transfer tasks, e.g. MR,TREC",
                                                  items=Param(str))

    def run(self, encoder: Encoder) -> Result:
        items: dict[str, np.ndarray] = {}
        o = self.options
        scores, files = run_transfer(encoder, o.transfer_tasks, o.data_dir, o.classifier, o.batch_size, o.n_jobs,
                                     o.limit, items)
        metadata = {key: scores.pop(key) for key in self.metadata if key in scores}
        return Result(scores, scores["avg"], items, files, metadata)
