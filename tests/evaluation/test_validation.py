import numpy as np

from cselab.evaluation.classifier import ClassifierConfig
from cselab.evaluation.validation import (CLASSIFIER_SETUPS, REGS, classifier_setup, inner_kfold, kfold_then_test,
                                         split)


def separable(n=400, seed=0):
    rs = np.random.RandomState(seed)
    y = np.arange(n) % 2
    X = rs.randn(n, 8).astype(np.float32) + 3 * (2 * y[:, None] - 1)
    return X, y


def test_nested_cross_validation_reports_each_outer_fold():
    X, y = separable()
    result = inner_kfold(X, y, 2, classifier_setup("fast"))
    assert len(result["fold_acc"]) == CLASSIFIER_SETUPS["fast"].kfold == 5
    assert set(result["reg"]) <= set(REGS)
    assert result["acc"] > 95 and result["devacc"] > 95
    assert result["acc"] == round(float(np.mean(result["fold_acc"])), 2)


def test_kfold_then_test_scores_the_test_rows_once():
    X, y = separable()
    result = kfold_then_test(X, y, np.arange(300), np.arange(300, 400), 2, classifier_setup("fast"))
    assert len(result["predictions"]) == 100
    assert result["acc"] == round(100 * float((result["predictions"] == y[300:]).mean()), 2)


def test_split_keeps_the_classifier_with_the_best_validation_accuracy():
    X, y = separable()
    rows = (np.arange(200), np.arange(200, 300), np.arange(300, 400))
    setup = classifier_setup("fast")
    candidates = [setup.classifier, ClassifierConfig(nhid=8, optim="rmsprop", batch_size=128, tenacity=3,
                                                     epoch_size=2)]
    best = split(X, y, *rows, 2, setup, candidates)
    alone = [split(X, y, *rows, 2, setup, [c]) for c in candidates]
    assert best["devacc"] == max(a["devacc"] for a in alone)
    same = next(a for a in alone if a["devacc"] == best["devacc"])
    assert best.keys() == same.keys()
    for key, value in best.items():
        assert np.array_equal(value, same[key]), key
    assert best["acc"] == round(100 * float((best["predictions"] == best["labels"]).mean()), 2)
