"""One model's vectors under several prompt templates, averaged (MetaEOL's): each sentence encoded in each template
by the same weights, the vector the mean of those."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cselab.encoders.base import Encoder
from cselab.encoders.transformer import TransformerEncoder


class TemplateMean(Encoder):
    """The mean of ``members``' vectors (one :class:`TransformerEncoder` per template, sharing one model, none
    normalising), scaled to unit length with ``normalize``."""

    def __init__(self, members: list[TransformerEncoder], normalize: bool = False) -> None:
        if len(members) < 2 or any(m.model is not members[0].model or m.normalize for m in members):
            raise ValueError("a template mean is two or more encoders of one model, none normalising")
        self.members, self.normalize = members, normalize
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
                "prompt": [member.prompt for member in self.members], **({"normalize": True} if self.normalize else {})}

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        vectors = [member._encode_unique(sentences, batch_size, show_progress_bar) for member in self.members]
        mean = np.asarray(np.stack(vectors).mean(axis=0), dtype=np.float32)
        return mean / np.linalg.norm(mean, axis=1, keepdims=True) if self.normalize else mean
