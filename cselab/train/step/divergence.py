"""A loss that stopped being a finite number, watched on the device: :class:`Divergence` notes the first step whose
loss was not finite without reading anything back; :meth:`Divergence.check` (a read: the device waits) raises
:class:`Diverged` naming it, before anything after that step is logged or saved."""

from __future__ import annotations

import torch

from cselab.errors import TrainingError


class Diverged(TrainingError):
    """The loss stopped being a finite number."""


class Divergence:
    """The first step whose loss was not finite, and that loss, kept on the device (0: none yet)."""

    def __init__(self) -> None:
        self.step: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None

    def watch(self, step: int, loss: torch.Tensor) -> None:
        """Note ``loss`` of ``step`` (a device tensor; nothing is read back)."""
        loss = loss.detach().float()
        if self.step is None or self.loss is None:  # (set together)
            self.step = torch.zeros((), dtype=torch.int64, device=loss.device)
            self.loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
        first = ~torch.isfinite(loss) & (self.step == 0)
        self.step = torch.where(first, step, self.step)
        self.loss = torch.where(first, loss, self.loss)

    def check(self) -> None:
        """A :class:`Diverged` naming the first step whose loss was not finite, if one was (a read: the device
        waits)."""
        if self.step is not None and self.loss is not None and int(self.step):
            raise Diverged(f"the loss became {float(self.loss)} at step {int(self.step)}")
