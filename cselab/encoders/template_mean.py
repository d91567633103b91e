"""One model's vectors under several prompt templates, averaged (MetaEOL's): each sentence encoded in each template
by the same weights, the vector the mean of those."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cselab.encoders.base import Encoder
from cselab.encoders.transformer import TransformerEncoder


class TemplateMean(Encoder):
    """The mean of ``members``' vectors: one :class:`TransformerEncoder` per template, sharing one model."""

    def __init__(self, members: list[TransformerEncoder]) -> None:
        if len(members) < 2 or any(m.model is not members[0].model for m in members):
            raise ValueError("a template mean is two or more encoders of one model")
        self.members = members
        self.spec = members[0].spec

    @property
    def dim(self) -> int:
        return self.members[0].dim

    @property
    def device(self) -> torch.device:
        return self.members[0].device

    def describe(self) -> dict[str, Any]:
        """The first member's settings, ``prompt`` the list of templates averaged over (each as applied)."""
        return {**self.members[0].describe(), "class": type(self).__name__,
                "prompt": [member.prompt for member in self.members]}

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        vectors = [member._encode_unique(sentences, batch_size, show_progress_bar) for member in self.members]
        return np.asarray(np.stack(vectors).mean(axis=0), dtype=np.float32)
