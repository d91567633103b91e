"""SentEval's own evaluation protocol, one model at a time, as the yardstick for cselab's transfer probe.

A re-implementation of SentEval's ``tools/classifier.py`` (``PyTorchClassifier``/``MLP``) and
``tools/validation.py`` (``InnerKFoldClassifier``, ``KFoldClassifier``, ``SplitClassifier``) with the
PyTorch back-end SentEval uses by default, run on the CPU: one ``nn.Sequential`` and one
``torch.optim`` optimizer per model, a Python loop over mini-batches, folds and L2 strengths.
SentEval itself is not on PyPI and cannot be fetched here.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold
from torch import nn

REGS = [10.0 ** t for t in range(-5, -1)]


class SentEvalMLP:
    """SentEval's ``MLP`` classifier on the CPU."""

    def __init__(self, config: dict, inputdim: int, nclasses: int, l2reg: float, seed: int = 1111):
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.batch_size = config.get("batch_size", 64)
        self.tenacity = config.get("tenacity", 5)
        self.epoch_size = config.get("epoch_size", 4)
        self.max_epoch = config.get("max_epoch", 200)
        if config["nhid"] == 0:
            self.model = nn.Sequential(nn.Linear(inputdim, nclasses))
        else:
            self.model = nn.Sequential(nn.Linear(inputdim, config["nhid"]), nn.Dropout(config.get("dropout", 0.0)),
                                       nn.Sigmoid(), nn.Linear(config["nhid"], nclasses))
        self.loss_fn = nn.CrossEntropyLoss()
        optimizer = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}[config.get("optim", "adam")]
        self.optimizer = optimizer(self.model.parameters(), weight_decay=l2reg)

    def fit(self, X, y, validation_data=None, validation_split=None):
        if validation_data is not None:
            (trainX, trainy), (devX, devy) = (X, y), validation_data
        else:
            permutation = np.random.permutation(len(X))
            cut = int(validation_split * len(X))
            trainX, trainy, devX, devy = X[permutation[cut:]], y[permutation[cut:]], X[permutation[:cut]], \
                y[permutation[:cut]]
        trainX, trainy = torch.FloatTensor(trainX), torch.LongTensor(trainy)
        epoch, best, misses, stop = 0, -1.0, 0, False
        while not stop and epoch <= self.max_epoch:
            self.model.train()
            for _ in range(self.epoch_size):
                permutation = np.random.permutation(len(trainX))
                for i in range(0, len(trainX), self.batch_size):
                    idx = torch.LongTensor(permutation[i:i + self.batch_size])
                    loss = self.loss_fn(self.model(trainX.index_select(0, idx)), trainy.index_select(0, idx))
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            epoch += self.epoch_size
            accuracy = self.score(devX, devy)
            if accuracy > best:
                best, best_model = accuracy, copy.deepcopy(self.model)
            else:
                if misses >= self.tenacity:
                    stop = True
                misses += 1
        self.model = best_model
        return best

    def predict(self, X) -> np.ndarray:
        self.model.eval()
        with torch.no_grad():
            return self.model(torch.FloatTensor(X)).argmax(1).numpy()

    def score(self, X, y) -> float:
        return float((self.predict(X) == np.asarray(y)).mean())


def cv_scores(X, y, folds, nclasses, config, seed):
    """Per L2 strength: mean accuracy x 100 over the folds, each model stopped early on its held-out fold."""
    scores = []
    for reg in REGS:
        fold_scores = []
        for a, b in folds.split(X, y):
            clf = SentEvalMLP(config, X.shape[1], nclasses, reg, seed)
            clf.fit(X[a], y[a], validation_data=(X[b], y[b]))
            fold_scores.append(clf.score(X[b], y[b]))
        scores.append(round(100 * np.mean(fold_scores), 2))
    return scores


def inner_kfold(X, y, nclasses, config, kfold=10, seed=1111):
    """MR, CR, SUBJ, MPQA: outer k-fold; the L2 strength chosen by an inner k-fold on each outer training part."""
    outer = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=1111)
    inner = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=1111)
    dev, test = [], []
    for train_idx, test_idx in outer.split(X, y):
        Xtr, ytr = X[train_idx], y[train_idx]
        scores = cv_scores(Xtr, ytr, inner, nclasses, config, seed)
        dev.append(np.max(scores))
        clf = SentEvalMLP(config, X.shape[1], nclasses, REGS[int(np.argmax(scores))], seed)
        clf.fit(Xtr, ytr, validation_split=0.05)
        test.append(round(100 * clf.score(X[test_idx], y[test_idx]), 2))
    return {"devacc": round(float(np.mean(dev)), 2), "acc": round(float(np.mean(test)), 2)}


def kfold_then_test(Xtr, ytr, Xte, yte, nclasses, config, kfold=10, seed=1111):
    """TREC, MRPC: k-fold on train chooses the L2 strength, one refit on all of train is scored on test."""
    scores = cv_scores(Xtr, ytr, StratifiedKFold(n_splits=kfold, shuffle=True, random_state=seed), nclasses, config,
                       seed)
    clf = SentEvalMLP(config, Xtr.shape[1], nclasses, REGS[int(np.argmax(scores))], seed)
    clf.fit(Xtr, ytr, validation_split=0.05)
    predictions = clf.predict(Xte)
    return {"devacc": float(np.max(scores)), "acc": round(100 * float((predictions == yte).mean()), 2),
            "predictions": predictions}


def split(Xtr, ytr, Xva, yva, Xte, yte, nclasses, config, seed=1111):
    """SST-2 and the probing tasks: the L2 strength chosen on the validation split, the refit scored on test."""
    scores = []
    for reg in REGS:
        clf = SentEvalMLP(config, Xtr.shape[1], nclasses, reg, seed)
        clf.fit(Xtr, ytr, validation_data=(Xva, yva))
        scores.append(round(100 * clf.score(Xva, yva), 2))
    clf = SentEvalMLP(config, Xtr.shape[1], nclasses, REGS[int(np.argmax(scores))], seed)
    clf.fit(Xtr, ytr, validation_data=(Xva, yva))
    return {"devacc": float(np.max(scores)), "acc": round(100 * clf.score(Xte, yte), 2)}
