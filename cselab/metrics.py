"""Similarity and correlation functions shared by the probes."""

from __future__ import annotations

import numpy as np

#: The fewest pairs a correlation is computed on: a limit on pairs, a file of scored pairs, a split hold at least this.
MIN_PAIRS = 2


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``a`` with the same row of ``b`` (0 for a zero vector)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, 1e-12)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN when either side is constant or has fewer than two values."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"pearson() needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < MIN_PAIRS:
        return float("nan")
    xc, yc = x - x.mean(), y - y.mean()
    denominator = np.sqrt((xc * xc).sum() * (yc * yc).sum())
    return float((xc * yc).sum() / denominator) if denominator > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the ranks, ties given their average rank."""
    from scipy.stats import rankdata  # scipy.stats costs 0.6 s of start-up; --show-config needs no rank

    return pearson(rankdata(x), rankdata(y))
