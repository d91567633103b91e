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

from cselab.registry import Checked, setting

OPTIMIZERS = ("adam", "rmsprop")


@dataclass(frozen=True)
class ClassifierConfig(Checked):
    """SentEval's classifier settings (its ``params['classifier']``); ``nhid=0`` is logistic regression."""

    where = "classifier"

    nhid: int = setting(0, "hidden units (0: logistic regression)", min=0)
    optim: str = setting("adam", "the optimizer", choices=OPTIMIZERS)
    batch_size: int = setting(64, "rows per update", min=1)
    tenacity: int = setting(5, "epoch_size rounds without a better dev accuracy before stopping", min=0)
    epoch_size: int = setting(4, "epochs per round", min=1)
    max_epoch: int = setting(200, "the most epochs", min=0)
    dropout: float = setting(0.0, "dropout before the output layer", min=0.0, max=1.0, below=True)


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

    def tested(self) -> tuple[float, np.ndarray]:
        """The test accuracy and predictions of a job that had test rows."""
        if self.test_accuracy is None or self.test_predictions is None:
            raise ValueError("a job without test rows has no test accuracy")
        return self.test_accuracy, self.test_predictions


def holdout_job(rows: np.ndarray, reg: float, seed: int, fraction: float = 0.05,
                test: np.ndarray | None = None) -> Job:
    """A model trained on ``rows`` that stops early on a random ``fraction`` of them (SentEval's
    ``validation_split``): the first permutation of the model's RNG draws that part."""
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(rows))
    cut = int(fraction * len(rows))
    return Job(rows[order[cut:]], rows[order[:cut]], reg, test, rng)


def _initial_weights(dim: int, nclasses: int, config: ClassifierConfig, seed: int) -> list[torch.Tensor]:
    """SentEval's starting weights: ``nn.Linear`` layers built right after ``torch.manual_seed(seed)``, in a forked
    generator: the caller's (a training run's dropout masks, when a transfer dev scorer scores it) go on as they were,
    where SentEval reseeds the global ones."""
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
        torch.manual_seed(seed)
        sizes = [dim, nclasses] if config.nhid == 0 else [dim, config.nhid, nclasses]
        weights = []
        for fan_in, fan_out in zip(sizes, sizes[1:]):
            layer = torch.nn.Linear(fan_in, fan_out)
            weights += [layer.weight.detach().T.contiguous(), layer.bias.detach().clone()]
    return weights


class _Stack:
    """The weights of S streams x R models. A stream is a set of models that train on the same rows in the same
    order (SentEval draws the same permutations for them); its mini-batch is gathered once and its models are
    the column blocks of one matrix product. First layer (S, dim, R*k) and (S, R*k); an MLP's second layer
    (S, R, hidden, classes) and (S, R, classes)."""

    def __init__(self, start: list[torch.Tensor], streams: int, width: int):
        w1, b1 = start[0], start[1]
        k = w1.shape[1]
        self.params = [w1.repeat(streams, 1, width).view(streams, -1, width * k).contiguous(),
                       b1.repeat(streams, width).contiguous()]
        if len(start) == 4:
            self.params += [start[2].expand(streams, width, *start[2].shape).contiguous(),
                            start[3].expand(streams, width, *start[3].shape).contiguous()]
        self.width, self.k = width, k

    def per_model(self, i: int, tensor: torch.Tensor) -> torch.Tensor:
        """Parameter ``i`` viewed with the model axis at dim 2 (first layer) or 1 (second layer)."""
        if i == 0:
            return tensor.view(tensor.shape[0], tensor.shape[1], self.width, self.k)
        if i == 1:
            return tensor.view(tensor.shape[0], self.width, self.k)
        return tensor

    def scores(self, x: torch.Tensor, keep: torch.Tensor | None = None, params=None) -> torch.Tensor:
        """(S, rows, dim) inputs -> (S, rows, R, classes) scores; ``keep`` is the MLP's scaled dropout mask."""
        params = params or self.params
        out = torch.baddbmm(params[1].unsqueeze(1), x, params[0]).view(x.shape[0], x.shape[1], self.width, self.k)
        if len(params) == 4:  # Linear -> Dropout -> Sigmoid -> Linear, per model
            out = torch.sigmoid(out if keep is None else out * keep).transpose(1, 2)
            out = (torch.matmul(out, params[2]) + params[3].unsqueeze(2)).transpose(1, 2)
        return out


class _Optimizer:
    """Adam or RMSprop with L2 weight decay (PyTorch's defaults, as SentEval uses them) over stacked models.

    A stream without a mini-batch in a step (a shorter one, at the end of a pass) keeps its weights and state.
    Models that stopped early keep being updated with their stream: their best epoch is already kept.
    """

    def __init__(self, kind: str, stack: _Stack, decay: torch.Tensor):
        self.kind, self.stack = kind, stack
        self.decay = [self._per_model(i, decay, p) for i, p in enumerate(stack.params)]
        self.steps = torch.zeros(len(decay))
        self.first = [torch.zeros_like(p) for p in stack.params] if kind == "adam" else None
        self.second = [torch.zeros_like(p) for p in stack.params]

    def _per_model(self, i: int, decay: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """(S, R) weight decays as a tensor broadcasting against parameter ``i``."""
        if i == 0:
            return decay[:, None, :, None].expand(-1, p.shape[1], -1, self.stack.k).reshape(p.shape)
        if i == 1:
            return decay[:, :, None].expand(-1, -1, self.stack.k).reshape(p.shape)
        return decay.view(*decay.shape, *([1] * (p.dim() - 2))).expand(p.shape).contiguous()

    def keep(self, rows: torch.Tensor) -> None:
        """Drop the state of streams that left."""
        self.decay, self.steps = [d[rows] for d in self.decay], self.steps[rows]
        self.second = [s[rows] for s in self.second]
        if self.first is not None:
            self.first = [f[rows] for f in self.first]

    def step(self, grads: list[torch.Tensor], active: torch.Tensor) -> None:
        """``active`` (S,) marks the streams that had a mini-batch."""
        masked = not bool(active.all())
        self.steps += active.float()
        for i, (p, g) in enumerate(zip(self.stack.params, grads)):
            shape = (-1,) + (1,) * (p.dim() - 1)
            g = g + self.decay[i] * p
            old = (p.clone(), self.second[i].clone(), None if self.first is None else self.first[i].clone()) \
                if masked else None
            if self.first is None:  # RMSprop (kind "rmsprop"): lr 0.01, alpha 0.99, eps 1e-8
                self.second[i].mul_(0.99).addcmul_(g, g, value=0.01)
                p.addcdiv_(g, self.second[i].sqrt().add_(1e-8), value=-0.01)
            else:  # Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8, bias-corrected as torch.optim.Adam does
                t = self.steps.clamp(min=1).view(shape)
                self.first[i].lerp_(g, 0.1)
                self.second[i].mul_(0.999).addcmul_(g, g, value=0.001)
                denom = (self.second[i].sqrt() / torch.sqrt(1 - 0.999 ** t)).add_(1e-8)
                p.sub_((1e-3 / (1 - 0.9 ** t)) * self.first[i] / denom)
            if old is not None:
                idle = ~active.view(shape)
                old_p, old_second, old_first = old
                p.copy_(torch.where(idle, old_p, p))
                self.second[i].copy_(torch.where(idle, old_second, self.second[i]))
                if self.first is not None and old_first is not None:
                    self.first[i].copy_(torch.where(idle, old_first, self.first[i]))


def _padded(rows: list[np.ndarray]) -> torch.Tensor:
    """Row-index lists of unequal length as one (lists, longest) index tensor (padded with row 0)."""
    index = np.zeros((len(rows), max(len(r) for r in rows)), dtype=np.int64)
    for k, r in enumerate(rows):
        index[k, : len(r)] = r
    return torch.from_numpy(index)


def _predict(stack: _Stack, X: torch.Tensor, rows: list[np.ndarray], params=None, budget: int = 2 ** 24
             ) -> list[np.ndarray]:
    """Each stream's models' predicted classes on the stream's rows: (rows, R) per stream."""
    index = _padded(rows)
    chunk = max(64, budget // (len(rows) * X.shape[1]))
    predictions = torch.empty((*index.shape, stack.width), dtype=torch.long)
    with torch.no_grad():
        for start in range(0, index.shape[1], chunk):
            part = index[:, start:start + chunk]
            predictions[:, start:start + chunk] = stack.scores(X[part], params=params).argmax(-1)
    return [predictions[k, : len(r)].numpy() for k, r in enumerate(rows)]


def _train_pass(stack: _Stack, optimizer: _Optimizer, X, Y, orders: list[np.ndarray], config: ClassifierConfig,
                generators: list[list[torch.Generator]]) -> None:
    """One pass of every stream over its rows in its own order, mini-batch by mini-batch (the last one smaller)."""
    bs = config.batch_size
    steps = max(math.ceil(len(o) / bs) for o in orders)
    index = _padded([np.pad(o, (0, steps * bs - len(o))) for o in orders])
    sizes = torch.tensor([[min(bs, max(len(o) - s * bs, 0)) for s in range(steps)] for o in orders])
    for s in range(steps):
        rows = index[:, s * bs:(s + 1) * bs]
        size = sizes[:, s]
        weights = (torch.arange(bs) < size.unsqueeze(1)).float() / size.clamp(min=1).unsqueeze(1)  # (S, bs)
        keep = None
        if config.nhid and config.dropout:
            keep = torch.stack([torch.stack([torch.empty(bs, config.nhid).bernoulli_(1 - config.dropout, generator=g)
                                             for g in row], dim=1) for row in generators]) / (1 - config.dropout)
        params = [p.requires_grad_() for p in stack.params]
        scores = stack.scores(X[rows], keep)  # (S, bs, R, c)
        losses = F.cross_entropy(scores.permute(0, 3, 1, 2), Y[rows].unsqueeze(-1).expand(-1, -1, stack.width),
                                 reduction="none")  # (S, bs, R)
        grads = torch.autograd.grad((losses * weights.unsqueeze(-1)).sum(), params)
        with torch.no_grad():
            for p in params:
                p.requires_grad_(False)
            optimizer.step(list(grads), size > 0)


def train_group(X: np.ndarray, y: np.ndarray, jobs: list[Job], nclasses: int, config: ClassifierConfig,
                seed: int = 1111, gather_budget: int = 2 ** 22) -> list[JobResult]:
    """Train every job's model with SentEval's recipe, in lock-step; score each on its test rows if any.

    Streams go in chunks whose mini-batches hold at most ``gather_budget`` numbers (wide vectors, smaller chunks).
    """
    Xt = torch.tensor(np.asarray(X), dtype=torch.float32)
    Yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    members = streams_of(jobs)
    chunk = max(1, gather_budget // (config.batch_size * Xt.shape[1]))
    results: dict[int, JobResult] = {}
    for start in range(0, len(members), chunk):
        part = members[start:start + chunk]
        flat = [k for m in part for k in m]
        for k, result in zip(flat, _train_streams(Xt, Yt, [jobs[k] for k in flat], _renumber(part), nclasses,
                                                  config, seed)):
            results[k] = result
    return [results[k] for k in range(len(jobs))]


def streams_of(jobs: list[Job]) -> list[list[int]]:
    """Jobs grouped by stream: same training, validation and test rows, and the order drawn from a fresh
    ``RandomState(seed)`` (a job with an RNG of its own is a stream of its own)."""
    keys: dict[tuple, list[int]] = {}
    for k, job in enumerate(jobs):
        key = (job.train.tobytes(), job.dev.tobytes(), None if job.test is None else job.test.tobytes(),
               k if job.rng is not None else -1)
        keys.setdefault(key, []).append(k)
    return list(keys.values())


def _renumber(members: list[list[int]]) -> list[list[int]]:
    """Streams of job indices as streams of positions in the flattened list of their jobs."""
    out, n = [], 0
    for m in members:
        out.append(list(range(n, n + len(m))))
        n += len(m)
    return out


def _train_streams(Xt: torch.Tensor, Yt: torch.Tensor, jobs: list[Job], members: list[list[int]], nclasses: int,
                   config: ClassifierConfig, seed: int) -> list[JobResult]:
    """The lock-step training of some streams (``members``: each stream's jobs, indices into ``jobs``)."""
    y = Yt.numpy()
    width = max(len(m) for m in members)
    first = [jobs[m[0]] for m in members]
    stack = _Stack(_initial_weights(Xt.shape[1], nclasses, config, seed), len(members), width)
    decay = torch.zeros(len(members), width)
    live = torch.zeros(len(members), width, dtype=torch.bool)
    for s, m in enumerate(members):
        decay[s, : len(m)] = torch.tensor([float(jobs[k].reg) for k in m])
        live[s, : len(m)] = True
    optimizer = _Optimizer(config.optim, stack, decay)
    rngs = [job.rng or np.random.RandomState(seed) for job in first]
    generators = [[torch.Generator().manual_seed(seed) for _ in range(width)] for _ in members]
    best = [p.clone() for p in stack.params]
    best_accuracy = np.full((len(members), width), -1.0)
    misses = np.zeros((len(members), width), dtype=int)
    streams = np.arange(len(members))  # original index of each stream still in the stack
    epoch = 0
    while len(streams) and epoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            orders = [first[s].train[rngs[s].permutation(len(first[s].train))] for s in streams]
            _train_pass(stack, optimizer, Xt, Yt, orders, config, [generators[s] for s in streams])
        epoch += config.epoch_size
        predictions = _predict(stack, Xt, [first[s].dev for s in streams])
        accuracy = np.stack([(p == y[first[s].dev][:, None]).mean(axis=0) for p, s in zip(predictions, streams)])
        running = live.numpy()
        improved = running & (accuracy > best_accuracy[streams])
        for r, c in zip(*np.nonzero(improved)):
            for i, (b, p) in enumerate(zip(best, stack.params)):
                stack.per_model(i, b)[streams[r]].select(-2 if i < 2 else 0, c).copy_(
                    stack.per_model(i, p)[r].select(-2 if i < 2 else 0, c))
        best_accuracy[streams] = np.where(improved, accuracy, best_accuracy[streams])
        stalled = running & ~improved
        stop = stalled & (misses[streams] >= config.tenacity)
        misses[streams] += stalled
        live &= ~torch.from_numpy(stop)
        kept = live.any(dim=1)
        if not kept.all():
            stack.params = [p[kept] for p in stack.params]
            optimizer.keep(kept)
            live, streams = live[kept], streams[kept.numpy()]
    results: dict[int, JobResult] = {}
    tests = {s: job.test for s, job in enumerate(first) if job.test is not None}
    tested = list(tests)
    outcome = dict(zip(tested, _predict(stack, Xt, list(tests.values()),
                                        params=[b[torch.tensor(tested)] for b in best]))) if tested else {}
    for s, m in enumerate(members):
        for c, k in enumerate(m):
            if s in outcome:
                pred = outcome[s][:, c]
                results[k] = JobResult(float(best_accuracy[s, c]), float((pred == y[jobs[k].test]).mean()), pred)
            else:
                results[k] = JobResult(float(best_accuracy[s, c]))
    return [results[k] for k in range(len(jobs))]


def train_jobs(X: np.ndarray, y: np.ndarray, jobs: list[Job], nclasses: int, config: ClassifierConfig,
               seed: int = 1111, n_jobs: int = 1) -> list[JobResult]:
    """:func:`train_group` over ``n_jobs`` worker processes (each takes every n-th stream)."""
    streams = streams_of(jobs)
    n_jobs = max(1, min(n_jobs, len(streams)))
    if n_jobs == 1:
        return train_group(X, y, jobs, nclasses, config, seed)
    from joblib import Parallel, delayed

    shares = [[k for stream in streams[w::n_jobs] for k in stream] for w in range(n_jobs)]
    outputs = Parallel(n_jobs=n_jobs)(
        delayed(_worker)(X, y, [jobs[k] for k in share], nclasses, config, seed) for share in shares)
    results: dict[int, JobResult] = {}
    for share, output in zip(shares, outputs):
        for k, result in zip(share, output):
            results[k] = result
    return [results[k] for k in range(len(jobs))]


def _worker(X, y, jobs, nclasses, config, seed) -> list[JobResult]:
    torch.set_num_threads(1)
    return train_group(X, y, jobs, nclasses, config, seed)
