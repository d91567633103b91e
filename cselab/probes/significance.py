"""How sure a difference between two encoders is: paired bootstrap intervals and paired permutation tests over the
items both were scored on, Holm-corrected across the tasks of a table.

A figure (an STS task's Spearman x 100, a suite's average, Cont./Oppn., a transfer task's accuracy ...) is a
weighted sum over *strata* of a per-stratum statistic of the items: the Spearman correlation of cosines with gold
scores, or the mean of per-item values (0/1 correctness, a paraphrase ranked above its negation, a cosine). The
interval resamples the items of each stratum with replacement - the same items for both models, so that the pairing
is kept - and recomputes both figures (:func:`scipy.stats.bootstrap`, percentile method). The p-value swaps the two
models' values item by item at random (:func:`scipy.stats.permutation_test`, ``permutation_type="samples"``; on 0/1
correctness this is McNemar's exact test by simulation). Both use the same seed and number of resamples, which the
results record.
"""

from __future__ import annotations

from collections.abc import Sequence
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from cselab.probes.names import RESAMPLES

LEVEL = 0.95
ALPHA = 0.05
BATCH = 50  # resamples computed at once (memory: BATCH x items)
UNDEFINED = 0.01  # the share of resamples whose figure may be undefined before the interval is


@dataclass(frozen=True)
class Stratum:
    """Items of one stratum: each model's per-item values, the gold scores (a Spearman stratum) or None (a mean
    stratum), and the stratum's weight in the figure."""

    a: np.ndarray
    b: np.ndarray
    gold: np.ndarray | None = None
    weight: float = 1.0


def _spearman(values: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman's rho along the last axis (ties ranked by their average, as scipy.stats.spearmanr)."""
    from scipy import stats  # imported on use: --help imports no SciPy

    x, y = stats.rankdata(values, axis=-1), stats.rankdata(gold, axis=-1)
    x, y = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(axis=-1) / np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))


def _statistic(values: np.ndarray, stratum: Stratum, index: np.ndarray | slice) -> np.ndarray:
    if stratum.gold is None:
        return values.mean(axis=-1)
    gold = stratum.gold[index]
    return _spearman(values, np.broadcast_to(gold, values.shape))


def figure(strata: Sequence[Stratum], side: str, scale: float = 1.0) -> float:
    """The figure of model ``side`` (``"a"`` or ``"b"``) on all items."""
    return scale * float(sum(s.weight * _statistic(getattr(s, side), s, slice(None)) for s in strata))


def _difference(strata: Sequence[Stratum], scale: float, indices: Sequence[np.ndarray | slice]
                ) -> np.ndarray | float:
    """B's figure minus A's on resampled items (one index array per stratum, leading batch dimensions)."""
    total: np.ndarray | float = 0.0
    for stratum, index in zip(strata, indices, strict=True):
        total = total + stratum.weight * (_statistic(stratum.b[index], stratum, index)
                                          - _statistic(stratum.a[index], stratum, index))
    return scale * total


def interval(strata: Sequence[Stratum], scale: float = 1.0, resamples: int = RESAMPLES, seed: int = 0,
             level: float = LEVEL) -> tuple[float, float]:
    """Paired, stratified bootstrap interval of B's figure minus A's. A resample whose figure is undefined (a
    Spearman stratum drawn with all values tied: a few items) is left out of the percentiles; when more than
    :data:`UNDEFINED` of them are, the interval is undefined (NaN, NaN)."""
    from scipy import stats  # imported on use: --help imports no SciPy

    samples = tuple(np.arange(len(s.a)) for s in strata)
    if all(np.array_equal(s.a, s.b) for s in strata):  # no difference to resample: the interval is the point 0
        return 0.0, 0.0
    with warnings.catch_warnings():  # scipy warns of the undefined resamples handled below
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(samples, lambda *indices, axis=-1: _difference(strata, scale, indices),
                                 vectorized=True, paired=False, n_resamples=resamples, batch=BATCH,
                                 confidence_level=level, method="percentile", rng=np.random.default_rng(seed))
    draws = result.bootstrap_distribution
    if np.isnan(draws).mean() > UNDEFINED:
        return float("nan"), float("nan")
    low, high = np.nanquantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def p_value(strata: Sequence[Stratum], scale: float = 1.0, resamples: int = RESAMPLES, seed: int = 0) -> float:
    """Two-sided paired permutation test of B's figure against A's: each item's two values swapped at random."""
    from scipy import stats  # imported on use: --help imports no SciPy

    bounds = np.cumsum([0] + [len(s.a) for s in strata])

    def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray | float:
        swapped = [Stratum(x[..., lo:hi], y[..., lo:hi], s.gold, s.weight)
                   for s, lo, hi in zip(strata, bounds, bounds[1:])]
        return _difference(swapped, scale, [slice(None)] * len(strata))

    a = np.concatenate([s.a for s in strata]).astype(np.float64)
    b = np.concatenate([s.b for s in strata]).astype(np.float64)
    if np.array_equal(a, b):
        return 1.0
    result = stats.permutation_test((a, b), statistic, permutation_type="samples", vectorized=True,
                                    n_resamples=resamples, batch=BATCH, alternative="two-sided",
                                    rng=np.random.default_rng(seed))
    null = result.null_distribution[~np.isnan(result.null_distribution)]  # undefined draws: as in interval()
    if len(null) < (1 - UNDEFINED) * len(result.null_distribution) or np.isnan(result.statistic):
        return float("nan")
    if len(null) == len(result.null_distribution):
        return float(result.pvalue)
    tolerance = 1e-14 * max(1.0, abs(result.statistic))  # scipy's: values equal up to rounding count as extreme
    extreme = min(np.sum(null >= result.statistic - tolerance), np.sum(null <= result.statistic + tolerance))
    return float(min(1.0, 2 * (extreme + 1) / (len(null) + 1)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: the k-th smallest of m p-values times (m - k + 1), made monotone, at most 1; an
    undefined (NaN) p-value stays undefined and is not counted in m."""
    values = np.asarray(p_values, dtype=np.float64)
    defined = np.flatnonzero(~np.isnan(values))
    adjusted = np.full(len(values), np.nan)
    running = 0.0
    for rank, index in enumerate(defined[np.argsort(values[defined])]):
        running = max(running, (len(defined) - rank) * values[index])
        adjusted[index] = min(1.0, running)
    return adjusted.tolist()


def holds(row: dict[str, Any]) -> bool:
    """Whether a compared difference holds: its Holm-corrected p-value (``p_holm``) below :data:`ALPHA` and its
    interval (``ci``) leaving 0 out."""
    return row["p_holm"] < ALPHA and not row["ci"][0] <= 0.0 <= row["ci"][1]


def compare(strata: Sequence[Stratum], scale: float = 1.0, resamples: int = RESAMPLES, seed: int = 0
            ) -> dict[str, Any]:
    """Both figures, their difference (B - A), its interval and p-value, the number of items."""
    low, high = interval(strata, scale, resamples, seed)
    a, b = figure(strata, "a", scale), figure(strata, "b", scale)
    return {"a": a, "b": b, "diff": b - a, "ci": [low, high], "p": p_value(strata, scale, resamples, seed),
            "n": int(sum(len(s.a) for s in strata))}


def t_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float] | None:
    """Student's t interval of the mean of ``values`` (seeds' scores); None for fewer than two."""
    from scipy import stats  # imported on use: --help imports no SciPy

    array = np.asarray(values, dtype=np.float64)
    if len(array) < 2:
        return None
    half = stats.t.ppf((1 + level) / 2, len(array) - 1) * array.std(ddof=1) / np.sqrt(len(array))
    return float(array.mean() - half), float(array.mean() + half)


def hierarchical(a: np.ndarray, b: np.ndarray, gold: np.ndarray, tasks: Sequence[slice], resamples: int = RESAMPLES,
                 seed: int = 0, level: float = LEVEL) -> dict[str, Any]:
    """Seed-level comparison of two methods' STS average (Spearman x 100 per task, averaged over ``tasks``), each
    method run with several seeds: rows of ``a`` and ``b`` are runs, columns the pairs (``gold`` their scores).

    A hierarchical bootstrap (Saravanan, Berman and Sober 2020): each resample draws each method's seeds with
    replacement, then the pairs of every task with replacement (the same pairs for every run, which keeps the
    pairing); B's mean over its drawn seeds minus A's is the resampled difference. The interval is its percentile
    interval; the p-value twice the smaller share of resampled differences on either side of 0, each share counted
    as (k + 1) / (resamples + 1) so that it is never 0 (at most 1)."""
    rng = np.random.default_rng(seed)
    runs = np.concatenate([a, b]).astype(np.float64)

    def figures(columns: Sequence[np.ndarray]) -> np.ndarray:  # (resamples, runs)
        return 100 * np.mean([_spearman(runs[:, c], gold[c]).T for c in columns], axis=0)

    point = figures([np.arange(t.start, t.stop)[None, :] for t in tasks])[0]
    batches = []
    for start in range(0, resamples, BATCH):
        size = min(BATCH, resamples - start)
        draws = [rng.integers(t.start, t.stop, size=(size, t.stop - t.start)) for t in tasks]
        per_run = figures(draws)
        seeds_a = rng.integers(0, len(a), size=(size, len(a)))
        seeds_b = len(a) + rng.integers(0, len(b), size=(size, len(b)))
        rows = np.arange(size)[:, None]
        batches.append(per_run[rows, seeds_b].mean(axis=1) - per_run[rows, seeds_a].mean(axis=1))
    diffs = np.concatenate(batches)
    tail = (1 - level) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    p = min(1.0, 2 * (min(np.sum(diffs <= 0), np.sum(diffs >= 0)) + 1) / (resamples + 1))
    return {"a": float(point[:len(a)].mean()), "b": float(point[len(a):].mean()),
            "diff": float(point[len(a):].mean() - point[:len(a)].mean()), "ci": [float(low), float(high)],
            "p": float(p), "seeds": [len(a), len(b)], "pairs": int(sum(t.stop - t.start for t in tasks))}
