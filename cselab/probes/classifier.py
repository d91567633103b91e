"""SentEval's classifier, many models trained at once.

SentEval (Conneau & Kiela, 2018) scores frozen sentence vectors with a logistic regression (``nhid=0``)
or a one-hidden-layer MLP, trained by Adam (or RMSprop) with L2 weight decay, scored on a validation
set after every ``epoch_size`` passes, stopped after ``tenacity`` epochs without improvement, the best
epoch kept. Cross-validation makes hundreds of such small, independent models. Here a group of them
is trained in lock-step: their weights are stacked, each step gathers every model's mini-batch and
runs one batched matrix product, and a model that stops early leaves the group.

Each model follows SentEval's recipe exactly: the same initialization (``torch.manual_seed(seed)``,
then ``nn.Linear``), the same mini-batch order (a ``numpy.random.RandomState(seed)`` permutation per
pass), the same update rule, the same stopping rule. So logistic-regression accuracies equal
SentEval's up to float rounding (see ``benchmarks/transfer_speed.py``). An MLP's dropout masks come
from a generator of its own (SentEval draws them from torch's global one), so a model's result does
not depend on the models trained beside it or on ``n_jobs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

OPTIMIZERS = ("adam", "rmsprop")


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's classifier settings (its ``params['classifier']``); ``nhid=0`` is logistic regression."""

    nhid: int = 0
    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    dropout: float = 0.0

    def __post_init__(self):
        if self.optim not in OPTIMIZERS:
            raise ValueError(f"Unknown optimizer {self.optim!r}; choose one of {', '.join(OPTIMIZERS)}")
        if self.nhid < 0 or self.batch_size < 1 or self.epoch_size < 1 or self.tenacity < 0:
            raise ValueError(f"invalid classifier settings: {self}")


@dataclass
class Job:
    """One model: rows it trains on, rows it stops early on, its L2 weight decay, optional rows it is scored on.

    ``rng`` draws the training order; SentEval seeds it afresh for every model.
    """

    train: np.ndarray
    dev: np.ndarray
    reg: float
    test: np.ndarray | None = None
    rng: np.random.RandomState | None = None


@dataclass(frozen=True)
class JobResult:
    dev_accuracy: float
    test_accuracy: float | None = None
    test_predictions: np.ndarray | None = None


def holdout_job(rows: np.ndarray, reg: float, seed: int, fraction: float = 0.05,
                test: np.ndarray | None = None) -> Job:
    """A model trained on ``rows`` that stops early on a random ``fraction`` of them (SentEval's
    ``validation_split``): the first permutation of the model's RNG draws that part."""
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(rows))
    cut = int(fraction * len(rows))
    return Job(rows[order[cut:]], rows[order[:cut]], reg, test, rng)


def _initial_weights(dim: int, nclasses: int, config: ClassifierConfig, seed: int) -> list[torch.Tensor]:
    """SentEval's starting weights: ``nn.Linear`` layers built right after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    sizes = [dim, nclasses] if config.nhid == 0 else [dim, config.nhid, nclasses]
    weights = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        layer = torch.nn.Linear(fan_in, fan_out)
        weights += [layer.weight.detach().T.contiguous(), layer.bias.detach().clone()]
    return weights


class _Optimizer:
    """Adam or RMSprop with L2 weight decay (PyTorch's defaults, as SentEval uses them) over stacked models;
    a model whose mask is off in a step keeps its weights and state."""

    def __init__(self, kind: str, params: list[torch.Tensor], decay: torch.Tensor):
        self.kind = kind
        self.decay = decay
        self.steps = torch.zeros(len(decay))
        self.first = [torch.zeros_like(p) for p in params] if kind == "adam" else None
        self.second = [torch.zeros_like(p) for p in params]

    def keep(self, rows: torch.Tensor) -> None:
        """Drop the state of models that left the group."""
        self.decay, self.steps = self.decay[rows], self.steps[rows]
        self.second = [s[rows] for s in self.second]
        if self.first is not None:
            self.first = [f[rows] for f in self.first]

    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor], mask: torch.Tensor) -> None:
        self.steps += mask
        for i, (p, g) in enumerate(zip(params, grads)):
            shape = (-1,) + (1,) * (p.dim() - 1)
            on = mask.view(shape).bool()
            g = g + self.decay.view(shape) * p
            if self.kind == "rmsprop":  # lr 0.01, alpha 0.99, eps 1e-8
                self.second[i] = torch.where(on, 0.99 * self.second[i] + 0.01 * g * g, self.second[i])
                p.sub_(torch.where(on, 0.01 * g / (self.second[i].sqrt() + 1e-8), 0.0))
                continue
            # Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8, bias-corrected as torch.optim.Adam does
            self.first[i] = torch.where(on, 0.9 * self.first[i] + 0.1 * g, self.first[i])
            self.second[i] = torch.where(on, 0.999 * self.second[i] + 0.001 * g * g, self.second[i])
            t = self.steps.clamp(min=1).view(shape)
            step_size = 1e-3 / (1 - 0.9 ** t)
            denom = self.second[i].sqrt() / torch.sqrt(1 - 0.999 ** t) + 1e-8
            p.sub_(torch.where(on, step_size * self.first[i] / denom, 0.0))


def _logits(params: list[torch.Tensor], x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Scores of stacked models: x is (models, rows, dim); ``keep`` is the MLP's dropout mask, already scaled."""
    out = torch.baddbmm(params[1].unsqueeze(1), x, params[0])
    if len(params) == 4:  # Linear -> Dropout -> Sigmoid -> Linear
        out = torch.sigmoid(out if keep is None else out * keep)
        out = torch.baddbmm(params[3].unsqueeze(1), out, params[2])
    return out


def _dropout_masks(generators: list[torch.Generator], rows: int, width: int, p: float) -> torch.Tensor:
    """Each model's own dropout mask from its own generator, so a model's run does not depend on its group."""
    masks = [torch.empty(rows, width).bernoulli_(1 - p, generator=g) for g in generators]
    return torch.stack(masks) / (1 - p)


def _padded(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-index lists of unequal length as one (models, longest) index tensor and a validity mask."""
    width = max(len(r) for r in rows)
    index = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=bool)
    for k, r in enumerate(rows):
        index[k, : len(r)] = r
        valid[k, : len(r)] = True
    return torch.from_numpy(index), torch.from_numpy(valid)


def _predict(params: list[torch.Tensor], X: torch.Tensor, rows: list[np.ndarray], chunk: int = 4096
             ) -> list[np.ndarray]:
    """Each model's predicted classes on its own rows."""
    index, valid = _padded(rows)
    predictions = torch.empty(index.shape, dtype=torch.long)
    with torch.no_grad():
        for start in range(0, index.shape[1], chunk):
            part = index[:, start:start + chunk]
            predictions[:, start:start + chunk] = _logits(params, X[part]).argmax(-1)
    return [predictions[k, : len(r)].numpy() for k, r in enumerate(rows)]


def _accuracy(params, X, y, rows: list[np.ndarray]) -> np.ndarray:
    return np.array([float((p == y[r]).mean()) for p, r in zip(_predict(params, X, rows), rows)])


def _train_pass(params, optimizer, X, Y, orders: list[np.ndarray], config: ClassifierConfig,
                generators: list[torch.Generator]) -> None:
    """One pass of every model over its rows in its own order, mini-batch by mini-batch (the last one smaller)."""
    bs = config.batch_size
    steps = max(math.ceil(len(o) / bs) for o in orders)
    index, valid = _padded([np.pad(o, (0, steps * bs - len(o))) for o in orders])
    sizes = np.array([[min(bs, max(len(o) - s * bs, 0)) for s in range(steps)] for o in orders])
    weights = torch.from_numpy(np.where(sizes > 0, 1.0 / np.maximum(sizes, 1), 0.0)).float()
    for s in range(steps):
        rows = index[:, s * bs:(s + 1) * bs]
        live = [p.requires_grad_() for p in params]
        keep = _dropout_masks(generators, bs, config.nhid, config.dropout) if config.nhid and config.dropout else None
        logits = _logits(live, X[rows], keep)
        losses = F.cross_entropy(logits.flatten(0, 1), Y[rows].flatten(), reduction="none").view(rows.shape)
        in_batch = (torch.arange(bs) < torch.from_numpy(sizes[:, s]).unsqueeze(1)).float()
        loss = (losses * in_batch * weights[:, s:s + 1]).sum()
        grads = torch.autograd.grad(loss, live)
        with torch.no_grad():
            for p in params:
                p.requires_grad_(False)
            optimizer.step(params, grads, (weights[:, s] > 0).float())


def train_group(X: np.ndarray, y: np.ndarray, jobs: list[Job], nclasses: int, config: ClassifierConfig,
                seed: int = 1111) -> list[JobResult]:
    """Train every job's model with SentEval's recipe, in lock-step; score each on its test rows if any."""
    Xt = torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32)
    Yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    y = np.asarray(y)
    start = _initial_weights(Xt.shape[1], nclasses, config, seed)
    params = [w.unsqueeze(0).repeat(len(jobs), *([1] * w.dim())) for w in start]
    best = [p.clone() for p in params]
    optimizer = _Optimizer(config.optim, params, torch.tensor([float(j.reg) for j in jobs]))
    rngs = [job.rng or np.random.RandomState(seed) for job in jobs]
    generators = [torch.Generator().manual_seed(seed) for _ in jobs]
    live = np.arange(len(jobs))
    best_accuracy = np.full(len(jobs), -1.0)
    misses = np.zeros(len(jobs), dtype=int)
    epoch = 0
    while len(live) and epoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            orders = [jobs[k].train[rngs[k].permutation(len(jobs[k].train))] for k in live]
            _train_pass(params, optimizer, Xt, Yt, orders, config, [generators[k] for k in live])
        epoch += config.epoch_size
        accuracy = _accuracy(params, Xt, y, [jobs[k].dev for k in live])
        improved = accuracy > best_accuracy[live]
        for r in np.flatnonzero(improved):
            for b, p in zip(best, params):
                b[live[r]] = p[r]
        best_accuracy[live[improved]] = accuracy[improved]
        stop = ~improved & (misses[live] >= config.tenacity)
        misses[live[~improved]] += 1
        if stop.any():
            keep = torch.from_numpy(np.flatnonzero(~stop))
            params = [p[keep] for p in params]
            optimizer.keep(keep)
            live = live[~stop]
    results = [JobResult(float(a)) for a in best_accuracy]
    scored = [k for k, job in enumerate(jobs) if job.test is not None]
    if scored:
        chosen = torch.tensor(scored)
        predictions = _predict([b[chosen] for b in best], Xt, [jobs[k].test for k in scored])
        for k, p in zip(scored, predictions):
            results[k] = JobResult(results[k].dev_accuracy, float((p == y[jobs[k].test]).mean()), p)
    return results


def train_jobs(X: np.ndarray, y: np.ndarray, jobs: list[Job], nclasses: int, config: ClassifierConfig,
               seed: int = 1111, n_jobs: int = 1) -> list[JobResult]:
    """:func:`train_group` over ``n_jobs`` worker processes (each takes an interleaved share of the jobs)."""
    n_jobs = max(1, min(n_jobs, len(jobs)))
    if n_jobs == 1:
        return train_group(X, y, jobs, nclasses, config, seed)
    from joblib import Parallel, delayed

    shares = [list(range(w, len(jobs), n_jobs)) for w in range(n_jobs)]
    outputs = Parallel(n_jobs=n_jobs)(
        delayed(_worker)(X, y, [jobs[k] for k in share], nclasses, config, seed) for share in shares)
    results: list[JobResult | None] = [None] * len(jobs)
    for share, output in zip(shares, outputs):
        for k, result in zip(share, output):
            results[k] = result
    return results


def _worker(X, y, jobs, nclasses, config, seed) -> list[JobResult]:
    torch.set_num_threads(1)
    return train_group(X, y, jobs, nclasses, config, seed)
