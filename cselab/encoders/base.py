"""The encoder interface every probe scores: ``encode(list[str]) -> np.ndarray``.

It follows sentence-transformers' ``encode`` (so MTEB's v1 interface too) and also takes
MTEB v2's input, an iterable of batches each holding a ``"text"`` list. Each distinct
sentence is encoded once and the original order is restored.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from cselab import progress
from cselab.encoders.cache import EmbeddingCache
from cselab.errors import ConfigError, ModelError
from cselab.files import shown


def as_sentences(inputs: str | Iterable[Any]) -> list[str]:
    """A flat list of sentences from a list of strings or an iterable of ``{"text": [...]}`` batches."""
    sentences: list[str] = []
    for item in inputs:
        if isinstance(item, str):
            sentences.append(item)
        elif isinstance(item, dict) and "text" in item:
            sentences.extend(item["text"])
        else:
            raise TypeError(f"encode() takes strings or batches with a 'text' list, not {type(item).__name__}")
    return sentences


class Encoder(ABC):
    """Base class: subclasses encode a list of distinct sentences in :meth:`_encode_unique`."""

    #: Short description written into results files.
    spec: str = ""
    #: The weight files it encodes with, by name, with their sha256 (set by :func:`~cselab.encoders.load_encoder`).
    weights: dict[str, str] | None = None
    #: Where encoded vectors are kept across runs (:mod:`cselab.encoders.cache`); None: nowhere.
    cache: EmbeddingCache | None = None
    _memory: dict[str, np.ndarray] | None = None

    @contextmanager
    def remembering(self) -> Iterator[None]:
        """Within the block, each distinct sentence is encoded once across calls (several probe suites share the
        STS sentences); the vectors are forgotten at its end."""
        outer = self._memory
        self._memory = {} if outer is None else outer
        try:
            yield
        finally:
            self._memory = outer

    @property
    @abstractmethod
    def dim(self) -> int:
        """Embedding size."""

    @abstractmethod
    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        """Embeddings of distinct sentences, one row each, in the order given."""

    def describe(self) -> dict[str, Any]:
        """What identifies this encoder in a results file."""
        return {"spec": self.spec, "class": type(self).__name__, "dim": self.dim}

    def _checked(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        """:meth:`_encode_unique`'s vectors, once they are one non-empty, finite row per sentence: a score computed
        from anything else would be a silent null or a wrong number."""
        vectors = np.asarray(self._encode_unique(sentences, batch_size, show_progress_bar), dtype=np.float32)
        name = self.spec or type(self).__name__
        if vectors.ndim != 2 or len(vectors) != len(sentences) or vectors.shape[1] == 0:
            raise ModelError(f"{name}: encode() of {len(sentences)} sentences returned an array of shape "
                             f"{vectors.shape}; expected ({len(sentences)}, dim) with dim >= 1")
        bad = ~np.isfinite(vectors).all(axis=1)
        if bad.any():
            first = int(np.argmax(bad))
            raise ModelError(f"{name}: the vector of {shown(sentences[first])} holds NaN or infinite values"
                             + (f" ({int(bad.sum()) - 1} more sentences' too)" if bad.sum() > 1 else ""))
        return vectors

    def _vectors(self, unique: list[str], batch_size: int, show_progress_bar: bool | None) -> dict[str, np.ndarray]:
        """Each distinct sentence's vector: remembered (:meth:`remembering`), kept in the cache, or encoded now (and
        then kept)."""
        memory = self._memory if self._memory is not None else {}
        found = {text: memory[text] for text in unique if text in memory}
        if self.cache is not None and len(found) < len(unique):
            found.update(self.cache.lookup([text for text in unique if text not in found]))
        new = [text for text in unique if text not in found]
        if new:
            vectors = self._checked(new, batch_size, show_progress_bar)
            found.update(zip(new, vectors))
            if self.cache is not None:
                self.cache.store(new, vectors)
        memory.update(found)
        return found

    def encode(
        self,
        sentences: str | Iterable[Any],
        batch_size: int = 64,
        show_progress_bar: bool | None = None,
        normalize_embeddings: bool = False,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embed sentences as float32 rows (one 1-D vector for a single string).

        ``show_progress_bar=None`` shows a bar for long inputs on a terminal. Extra keyword arguments
        that MTEB passes (``task_name``, ``prompt_type``, ...) are accepted and ignored.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        single = isinstance(sentences, str)
        texts = [sentences] if isinstance(sentences, str) else as_sentences(sentences)
        unique = list(dict.fromkeys(texts))
        if unique:
            with progress.encoding(len(unique)):  # counted on a probe suite's bar, remembered ones at once
                found = self._vectors(unique, batch_size, show_progress_bar)
            vectors = np.stack([found[text] for text in texts])
        else:
            vectors = np.zeros((0, self.dim), dtype=np.float32)
        if normalize_embeddings:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return vectors[0] if single else vectors
