"""What one optimizer step gives back: its loss, the loss's parts and the gradient norm, held on the device until
something reads them (the trainer at its log, evaluation and save steps, or a callback)."""

from __future__ import annotations

from collections.abc import Mapping

import torch


class StepLosses(Mapping):
    """One optimizer step's loss, its parts (each the mean over the step's ``accum`` batches) and the gradient norm
    before clipping, held as device tensors and read (one wait for the device) when first looked at."""

    def __init__(self, batches: list[dict[str, torch.Tensor]], accum: int, norm: torch.Tensor | None):
        self._batches, self._accum, self._norm = batches, accum, norm
        self._values: dict[str, float] | None = None

    def _read(self) -> dict[str, float]:
        if self._values is None:
            keys = list(dict.fromkeys(key for batch in self._batches for key in batch))
            tensors = [batch[key].detach().reshape(()).double() for batch in self._batches for key in batch]
            if self._norm is not None:
                tensors.append(self._norm.detach().reshape(()).double().to(tensors[0].device))
            read = iter(torch.stack(tensors).tolist()) if tensors else iter(())
            values: dict[str, float] = {}
            for batch in self._batches:  # summed in the batches' order, as each was read before
                for key in batch:
                    values[key] = values.get(key, 0.0) + next(read) / self._accum
            values = {key: values[key] for key in keys}
            if self._norm is not None:
                values["grad_norm"] = next(read)
            self._values = values
        return self._values

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __iter__(self):
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def per_batch(self, key: str = "loss") -> list[torch.Tensor]:
        """``key`` of each of the step's batches, on the device (nothing read back)."""
        return [batch[key] for batch in self._batches if key in batch]
