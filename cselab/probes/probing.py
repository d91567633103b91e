"""Probing tasks (SentEval's ten, Conneau et al. 2018): what a frozen sentence vector encodes.

Each task's classifier is chosen on its validation part among SentEval's logistic regression and an MLP
with 50 hidden units and dropout 0, 0.1 or 0.2 (each with SentEval's weight decays), then scored on its
test part (accuracy x 100). WC is scored by logistic regression only, as SentEval does. The files come
from SentEval's ``data/probing/`` (``DATA_ROOT/probing`` by default) or from ``probe build-probing``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from cselab.data import DataNotFoundError, data_root
from cselab.data.probing import read_probing_file
from cselab import progress
from cselab.encoders import Encoder
from cselab.evaluation.scoring import Result
from cselab.probes.probing_builder import PROBING_FILES
from cselab.probes.accuracy import AccuracySuite, average_accuracy
from cselab.probes.suite import Score, register_suite
from cselab.registry import setting

PROBING_TASKS = tuple(PROBING_FILES)
MLP_DROPOUTS = (0.0, 0.1, 0.2)
MLP_HIDDEN = 50


def probing_dir(folder: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None) -> Path:
    """``folder``, else ``probing/`` under the data root; it must hold at least one task file."""
    path = Path(folder) if folder else data_root(data_dir) / "probing"
    if not any((path / name).is_file() for name in PROBING_FILES.values()):
        raise DataNotFoundError(
            f"No probing-task files ({', '.join(PROBING_FILES.values())}) in {path}. Put SentEval's data/probing "
            f"files there, or build them from a corpus: probe build-probing --corpus FILE --out DIR")
    return path


def run_probing(encoder: Encoder, folder: str | os.PathLike, tasks: Sequence[str] = PROBING_TASKS,
                classifier: str = "full", batch_size: int = 64, n_jobs: int = 1, limit: int | None = None,
                items: dict[str, np.ndarray] | None = None) -> tuple[dict[str, Any], list]:
    """Accuracy x 100 per task present in ``folder`` (missing ones listed under ``skipped``) and the files read;
    ``items`` (when given) receives the test predictions and labels, ``probing/TASK/pred`` and ``.../label``."""
    from cselab.evaluation.validation import classifier_setup, split  # imported on use: it imports torch

    setup = classifier_setup(classifier)
    folder = Path(folder)
    present = [t for t in tasks if (folder / PROBING_FILES[t]).is_file()]
    data = {task: read_probing_file(folder / PROBING_FILES[task], task, limit) for task in present}
    unique = list(dict.fromkeys(t for splits, _ in data.values() for part in splits.values() for t in part.texts))
    clock = time.perf_counter()
    vectors = dict(zip(unique, encoder.encode(unique, batch_size=batch_size)))
    scores: dict[str, Any] = {"folder": str(folder), "classifier": classifier, "sentences_encoded": len(unique),
                              "encode_s": round(time.perf_counter() - clock, 2)}
    progress.phase("classifiers", len(data), "task")
    for task, (splits, labels) in data.items():
        clock = time.perf_counter()
        parts = [splits["train"], splits["dev"], splits["test"]]
        X = np.stack([vectors[t] for part in parts for t in part.texts])
        y = np.concatenate([part.labels for part in parts])
        bounds = np.cumsum([0] + [len(part) for part in parts])
        train, dev, test = (np.arange(a, b) for a, b in zip(bounds, bounds[1:]))
        candidates = [setup.classifier] + ([] if task == "WC" else [
            replace(setup.classifier, nhid=MLP_HIDDEN, dropout=d) for d in MLP_DROPOUTS])
        result = split(X, y, train, dev, test, len(labels), setup, candidates, n_jobs)
        predictions, gold = result.pop("predictions"), result.pop("labels")
        if items is not None:
            items[f"probing/{task}/pred"], items[f"probing/{task}/label"] = predictions, gold
        scores[task] = {**result, "classes": len(labels), "n_train": len(parts[0]), "n_dev": len(parts[1]),
                        "n_test": len(parts[2]), "classifier_s": round(time.perf_counter() - clock, 2)}
        progress.advance()
    scores["skipped"] = [t for t in tasks if t not in present]
    return scores, [folder / PROBING_FILES[t] for t in present]


@register_suite
class ProbingSuite(AccuracySuite):
    """SentEval's probing tasks, from ``options.probing_dir`` (else the data root's ``probing/``)."""

    name, title, heading = "probing", "Probing (test accuracy x 100)", "Probing tasks"
    rank = 40
    main = {"avg": Score("Probing avg.")}

    @dataclass
    class Options(AccuracySuite.Options):
        probing_dir: str | os.PathLike | None = setting(None, "folder of probing-task files (default: "
                                                        "DATA_ROOT/probing)")
    optional = True
    params: Options

    def run(self, encoder: Encoder) -> Result:
        items: dict[str, np.ndarray] = {}
        o, p = self.options, self.params
        scores, files = run_probing(encoder, probing_dir(p.probing_dir, o.data_dir), classifier=p.classifier,
                                    batch_size=o.batch_size, n_jobs=p.n_jobs, limit=o.limit, items=items)
        metadata = {key: scores.pop(key) for key in self.metadata if key in scores}
        return Result(scores, average_accuracy(scores), items, files, metadata)
