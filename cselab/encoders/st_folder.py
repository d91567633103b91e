"""Sentence-transformers model folders that sentence-transformers runs itself.

A folder whose modules are a Transformer, a mean or CLS Pooling and optionally Normalize
(most published models, the packaged MiniLM among them) is encoded by
:class:`~cselab.encoders.transformer.TransformerEncoder` with the matching pooler
(:func:`cselab.encoders.checkpoint.native_settings`); any other module stack by
:class:`SentenceTransformerEncoder`.
"""

from __future__ import annotations

import numpy as np

from cselab.encoders.base import Encoder
from cselab.errors import ModelError
from cselab.files import clipped

class SentenceTransformerEncoder(Encoder):
    """Any sentence-transformers model, run by that library."""

    def __init__(self, path: str, device: str | None = None):
        from sentence_transformers import SentenceTransformer

        try:
            self.model = SentenceTransformer(path, device=device)
        except Exception as err:  # a module stack the library cannot build from this folder
            raise ModelError(f"{path}: sentence-transformers cannot load it ({type(err).__name__}: "
                             f"{clipped(err, 160)})") from None
        self.spec = str(path)

    @property
    def dim(self) -> int:
        dim = self.model.get_sentence_embedding_dimension()
        if dim is None:
            raise ModelError(f"{self.spec}: sentence-transformers finds no embedding dimension in its modules")
        return dim

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        return self.model.encode(sentences, batch_size=batch_size, show_progress_bar=bool(show_progress_bar),
                                 convert_to_numpy=True)
