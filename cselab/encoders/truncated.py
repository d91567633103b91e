"""An encoder's vectors cut to their first ``width`` components (``probe run --dims``): how a Matryoshka-trained model
is scored at each of its widths. Suites that compare cosines normalise the cut vectors as they do any others."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cselab.encoders.base import Encoder
from cselab.errors import ConfigError

if TYPE_CHECKING:
    import torch


class Truncated(Encoder):
    """``base``'s vectors, their first ``width`` components. It keeps no vectors of its own: ``base`` encodes (its
    memory and cache serve every width), so a run over several widths encodes each sentence once."""

    def __init__(self, base: Encoder, width: int):
        if not 1 <= width <= base.dim:
            raise ConfigError(f"--dims {width}: the model's vectors have {base.dim} components")
        self.base, self.width = base, width
        self.spec, self.weights = base.spec, base.weights

    @property
    def dim(self) -> int:
        return self.width

    @property
    def device(self) -> torch.device | None:
        device: torch.device | None = (getattr(self.base, "device", None)
                                       or getattr(getattr(self.base, "model", None), "device", None))
        return device

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "dim": self.width, "truncated_from": self.base.dim}

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        return self.base.encode(sentences, batch_size=batch_size, show_progress_bar=show_progress_bar)[:, :self.width]
