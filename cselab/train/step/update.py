"""The update that ends a step: the gradients clipped, the optimizer and its schedule stepped, the gradients
cleared."""

from __future__ import annotations

import torch


def clip_and_step(optimizer, scheduler, parameters: list[torch.Tensor], max_grad_norm: float | None,
                  clip=torch.nn.utils.clip_grad_norm_) -> torch.Tensor | None:
    """One optimizer step: the gradients' total norm clipped to ``max_grad_norm`` (with ``clip``; None: not
    clipped), then the optimizer and the schedule stepped and the gradients cleared. Returns the norm before
    clipping, on the device (None when not clipped): nothing is read back."""
    norm = None if max_grad_norm is None else torch.as_tensor(clip(parameters, max_grad_norm)).detach()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return norm

