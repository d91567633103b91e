"""Representation geometry.

Alignment and uniformity (Wang & Isola, 2020) of normalized sentence vectors, as SimCSE measures
them: alignment ``E ||f(x) - f(y)||^2`` over positive pairs (STS-B pairs with gold >= 4),
uniformity ``log E exp(-2 ||f(x) - f(y)||^2)`` over all pairs of distinct sentences. Lower is
better for both.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from cselab.encoders import Encoder


def _normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def alignment(first: np.ndarray, second: np.ndarray, alpha: float = 2.0) -> float:
    """Mean ``||x_i - y_i||^alpha`` over pairs of rows, after normalization."""
    return float(np.mean(np.linalg.norm(_normalized(first) - _normalized(second), axis=1) ** alpha))


def uniformity(vectors: np.ndarray, t: float = 2.0) -> float:
    """``log`` of the mean of ``exp(-t ||x_i - x_j||^2)`` over pairs i < j, after normalization."""
    x = _normalized(vectors)
    squared = np.maximum(2.0 - 2.0 * (x @ x.T), 0.0)[np.triu_indices(len(x), k=1)]
    return float(np.log(np.mean(np.exp(-t * squared))))


def alignment_uniformity(encoder: Encoder, data_dir: str | os.PathLike | None = None, split: str = "dev",
                         threshold: float = 4.0) -> dict[str, Any]:
    """Alignment on the STS-B ``split`` pairs with gold >= ``threshold``, uniformity over all its sentences."""
    from cselab.data import load_sts

    (pairs,) = load_sts("stsb", split, data_dir)
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    vectors = encoder.encode(sentences)
    position = {text: i for i, text in enumerate(sentences)}
    positive = [i for i, score in enumerate(pairs.scores) if score >= threshold]
    first = vectors[[position[pairs.sentences1[i]] for i in positive]]
    second = vectors[[position[pairs.sentences2[i]] for i in positive]]
    return {"alignment": alignment(first, second), "uniformity": uniformity(vectors), "positive_pairs": len(positive),
            "sentences": len(sentences), "split": split}
