"""STS scoring, for the probe suites (:mod:`cselab.probes.sts`, the bias and geometry suites): the first ``limit``
pairs of a set, and each pair's cosine similarity."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cselab.data import STSPairs
from cselab.encoders.base import Encoder
from cselab.metrics import cosine_rows


def subset_limit(subsets: list[STSPairs], limit: int | None) -> list[STSPairs]:
    """The first ``limit`` pairs of each subset (all of them when ``limit`` is None)."""
    if limit is None:
        return subsets
    return [STSPairs(s.task, s.subset, s.sentences1[:limit], s.sentences2[:limit], s.scores[:limit], s.files)
            for s in subsets]


def similarities(encoder: Encoder, subsets: Sequence[STSPairs], batch_size: int = 64,
                 show_progress_bar: bool | None = None) -> list[np.ndarray]:
    """Cosine similarity of every pair, one array per subset; the subsets' sentences are encoded in one call (each
    subset's first sentences, then its second)."""
    sentences = [text for s in subsets for text in (*s.sentences1, *s.sentences2)]
    vectors = encoder.encode(sentences, batch_size=batch_size, show_progress_bar=show_progress_bar)
    result, start = [], 0
    for s in subsets:
        n = len(s)
        result.append(cosine_rows(vectors[start:start + n], vectors[start + n:start + 2 * n]))
        start += 2 * n
    return result
