"""SentEval's three ways of choosing the L2 strength and scoring a classifier on frozen vectors.

- :func:`inner_kfold` (MR, CR, SUBJ, MPQA): outer stratified k-fold; on each outer training part an
  inner k-fold picks the weight decay, a refit (5% held out for early stopping) is scored on the outer
  test part; the accuracy is the mean over outer folds.
- :func:`kfold_then_test` (TREC, MRPC): k-fold on the training set picks the weight decay, one refit on
  all of it is scored on the test set.
- :func:`split` (SST-2, probing tasks): the validation split picks the weight decay (and, for the probing
  tasks, the classifier), the test split scores it.
- :func:`dev_accuracy`: the ``devacc`` of the first step of each, without the test split (a dev scorer's score).

Folds, seeds, candidate weight decays and the rounding of scores follow SentEval's
``tools/validation.py``; the models are trained many at a time by :mod:`cselab.evaluation.classifier`. Each also
returns the test predictions and their labels (``predictions``, ``labels``; for :func:`inner_kfold` every row,
predicted by the fold that held it out), the per-item outputs a paired comparison needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cselab.errors import ConfigError
from cselab.evaluation.classifier import ClassifierConfig, Job, holdout_job, train_jobs
from cselab.evaluation.setups import CLASSIFIER_SETUPS as SETUPS

REGS = (1e-5, 1e-4, 1e-3, 1e-2)  # SentEval's weight decays for its PyTorch classifier
SEED = 1111


@dataclass(frozen=True)
class ClassifierSetup:
    """Number of folds and classifier settings; ``full`` is SentEval's recommended configuration, ``fast`` its
    prototyping one (``--classifier``)."""

    name: str
    kfold: int
    classifier: ClassifierConfig


CLASSIFIER_SETUPS = {name: ClassifierSetup(name, spec["kfold"], ClassifierConfig(**spec["classifier"]))
                     for name, spec in SETUPS.items()}


def classifier_setup(name: str) -> ClassifierSetup:
    try:
        return CLASSIFIER_SETUPS[name]
    except KeyError:
        raise ConfigError(f"Unknown classifier setup {name!r}; choose one of {', '.join(CLASSIFIER_SETUPS)}"
                          ) from None


def _folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold  # here: reading a method's schema need not load sklearn

    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _best(scores: Sequence[float] | np.ndarray) -> int:
    """SentEval's choice: the first of the highest (rounded) scores."""
    return int(np.argmax(scores))


def _inner_scores(X: np.ndarray, y: np.ndarray, nclasses: int, setup: ClassifierSetup, n_jobs: int
                  ) -> tuple[list, np.ndarray]:
    """The outer folds, and each one's inner cross-validated accuracy (x 100, rounded) per weight decay."""
    k, config = setup.kfold, setup.classifier
    outer = _folds(y, k, SEED)
    jobs, keys = [], []
    for o, (train, _) in enumerate(outer):
        inner = _folds(y[train], k, SEED)
        for r, reg in enumerate(REGS):
            jobs += [Job(train[a], train[b], reg) for a, b in inner]
            keys += [(o, r)] * len(inner)
    results = train_jobs(X, y, jobs, nclasses, config, SEED, n_jobs)
    scores = np.zeros((k, len(REGS)))
    for (o, r), result in zip(keys, results):
        scores[o, r] += result.dev_accuracy / k
    return outer, np.round(100 * scores, 2)


def inner_kfold(X: np.ndarray, y: np.ndarray, nclasses: int, setup: ClassifierSetup, n_jobs: int = 1) -> dict[str, Any]:
    """Nested cross-validation: mean test accuracy over the outer folds (SentEval's ``InnerKFoldClassifier``)."""
    outer, scores = _inner_scores(X, y, nclasses, setup, n_jobs)
    chosen = [_best(row) for row in scores]
    refits = [holdout_job(train, REGS[c], SEED, test=test) for (train, test), c in zip(outer, chosen)]
    results = train_jobs(X, y, refits, nclasses, setup.classifier, SEED, n_jobs)
    tests = [round(100 * r.tested()[0], 2) for r in results]
    predictions = np.empty(len(y), dtype=np.int64)
    for (_, test), result in zip(outer, results):
        predictions[test] = result.tested()[1]  # every row predicted once, by the fold that held it out
    return {"devacc": round(float(np.mean(scores.max(axis=1))), 2), "acc": round(float(np.mean(tests)), 2),
            "fold_acc": tests, "reg": [REGS[c] for c in chosen], "predictions": predictions, "labels": y}


def _kfold_scores(X: np.ndarray, y: np.ndarray, train: np.ndarray, nclasses: int, setup: ClassifierSetup, n_jobs: int
                  ) -> np.ndarray:
    """The ``train`` rows' k-fold accuracy (x 100, rounded) per weight decay."""
    folds = _folds(y[train], setup.kfold, SEED)
    jobs = [Job(train[a], train[b], reg) for reg in REGS for a, b in folds]
    results = train_jobs(X, y, jobs, nclasses, setup.classifier, SEED, n_jobs)
    accuracy = np.array([r.dev_accuracy for r in results]).reshape(len(REGS), len(folds))
    return np.round(100 * accuracy.mean(axis=1), 2)


def kfold_then_test(X: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, nclasses: int,
                    setup: ClassifierSetup, n_jobs: int = 1) -> dict[str, Any]:
    """k-fold on the ``train`` rows picks the weight decay; a refit on all of them is scored on ``test``
    (SentEval's ``KFoldClassifier``). Also returns the test predictions."""
    scores = _kfold_scores(X, y, train, nclasses, setup, n_jobs)
    chosen = _best(scores)
    (refit,) = train_jobs(X, y, [holdout_job(train, REGS[chosen], SEED, test=test)], nclasses, setup.classifier,
                          SEED)
    accuracy, predictions = refit.tested()
    return {"devacc": float(scores[chosen]), "acc": round(100 * accuracy, 2), "reg": REGS[chosen],
            "predictions": predictions, "labels": y[test]}


def split(X: np.ndarray, y: np.ndarray, train: np.ndarray, dev: np.ndarray, test: np.ndarray, nclasses: int,
          setup: ClassifierSetup, classifiers: Sequence[ClassifierConfig] | None = None, n_jobs: int = 1
          ) -> dict[str, Any]:
    """Every classifier x weight decay trained on ``train``, stopped early and chosen on ``dev``, scored on
    ``test`` (SentEval's ``SplitClassifier``; SentEval retrains the chosen one, which gives the same model)."""
    classifiers = list(classifiers or [setup.classifier])
    best: dict[str, Any] = {}
    for config in classifiers:
        jobs = [Job(train, dev, reg, test) for reg in REGS]
        results = train_jobs(X, y, jobs, nclasses, config, SEED, n_jobs)
        scores = [round(100 * r.dev_accuracy, 2) for r in results]
        chosen = _best(scores)
        if not best or scores[chosen] > best["devacc"]:
            accuracy, predictions = results[chosen].tested()
            best = {"devacc": scores[chosen], "acc": round(100 * accuracy, 2),
                    "reg": REGS[chosen], "nhid": config.nhid, "dropout": config.dropout,
                    "predictions": predictions, "labels": y[test]}
    return best


def dev_accuracy(X: np.ndarray, y: np.ndarray, rows: dict[str, np.ndarray], nclasses: int, setup: ClassifierSetup,
                 n_jobs: int = 1) -> float:
    """The ``devacc`` SentEval reports for a task whose ``rows`` are split as :func:`cselab.evaluation.transfer.
    task_features` gives them (``all``; ``train``/``dev``; ``train``), computed without a test split: the best
    weight decay's inner k-fold accuracy averaged over the outer folds, its dev-split accuracy, or its k-fold
    accuracy on train."""
    if list(rows) == ["all"]:
        return round(float(np.mean(_inner_scores(X, y, nclasses, setup, n_jobs)[1].max(axis=1))), 2)
    if "dev" in rows:
        jobs = [Job(rows["train"], rows["dev"], reg) for reg in REGS]
        return max(round(100 * r.dev_accuracy, 2) for r in train_jobs(X, y, jobs, nclasses, setup.classifier, SEED,
                                                                      n_jobs))
    return float(_kfold_scores(X, y, rows["train"], nclasses, setup, n_jobs).max())
