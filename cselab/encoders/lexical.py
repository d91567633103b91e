"""Lexical baselines: bag-of-words and TF-IDF vectors, a surface-form reference point.

Words (lower-cased ``\\w+`` runs) are hashed into ``n_features`` buckets, so any
vocabulary fits a fixed, dense size. TF-IDF's inverse document frequencies come from a
reference corpus given up front, never from the sentences being encoded, so a sentence's
vector does not depend on what it is encoded with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.preprocessing import normalize

from cselab.encoders.base import Encoder

DEFAULT_FEATURES = 2**13


class LexicalEncoder(Encoder):
    """Bag-of-words counts, or TF-IDF when an IDF corpus is given; rows are L2-normalised."""

    def __init__(self, idf_corpus: Sequence[str] | None = None, n_features: int = DEFAULT_FEATURES, spec: str = ""):
        self.vectorizer = HashingVectorizer(n_features=n_features, token_pattern=r"(?u)\b\w+\b",
                                            alternate_sign=False, norm=None)
        self.idf = TfidfTransformer(norm=None).fit(self.vectorizer.transform(idf_corpus)) if idf_corpus else None
        self.idf_documents = len(idf_corpus) if idf_corpus else 0
        self.spec = spec or ("tfidf" if idf_corpus else "bow")

    @property
    def dim(self) -> int:
        features: int = self.vectorizer.n_features
        return features

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "weighting": "tfidf" if self.idf else "counts",
                "idf_documents": self.idf_documents}

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        counts = self.vectorizer.transform(sentences)
        weighted = self.idf.transform(counts) if self.idf else counts
        vectors: np.ndarray = normalize(weighted).astype(np.float32).toarray()
        return vectors
