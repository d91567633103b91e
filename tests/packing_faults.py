"""Real changes planted in a packed pass, for the tests that must catch them (tests/encoders/test_packing.py,
tests/train/run/test_execution.py)."""

import torch

from cselab.encoders import packing


def plant(planted: str, monkeypatch) -> None:
    """``position``: every token one position further; ``padding``: the first row with padding attends to its first
    padding token (zeros re-padded, where the padded pass masks it)."""
    if planted == "position":
        positions = packing.positions
        monkeypatch.setattr(packing, "positions", lambda model, ids: positions(model, ids) + 1)
        return
    mask = packing.Packing.mask

    def leaky(self, causal):
        built, real = mask(self, causal).clone(), torch.zeros(self.rows * self.width, dtype=torch.bool)
        real[self.index] = True
        padded = ~real.view(self.rows, self.width)
        row = int(padded.any(dim=1).nonzero()[0])
        built[row, :, :, int(padded[row].nonzero()[0])] = True
        return built
    monkeypatch.setattr(packing.Packing, "mask", leaky)
