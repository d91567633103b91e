"""Step hooks that perturb the weights (simcse-improvements.txt section 4.2).

SAM (Foret et al.) and AWP (Wu et al.) take two forward-backward passes per step: the first
gives the gradient g; the weights move to w + delta; the second pass's gradient, taken there,
is the one the optimizer applies to the original weights, which are restored exactly first.

- ``sam``: ``delta = rho * g / ||g||`` over all weights together (rho = 0.05);
- ``awp``: ``delta_l = gamma * ||w_l|| * g_l / ||g_l||`` for each weight tensor l, a step relative
  to the weight's own size (gamma = 5e-3, AWP's default).
"""

from __future__ import annotations

import torch

KINDS = ("sam", "awp")


@torch.no_grad()
def perturb_weights(parameters: list[torch.Tensor], kind: str, size: float) -> list[torch.Tensor]:
    """Move ``parameters`` along their ``.grad`` (see the module docstring); returns their original values."""
    if kind not in KINDS:
        raise ValueError(f"Unknown weight perturbation {kind!r}; choose one of {', '.join(KINDS)}")
    originals = [p.detach().clone() for p in parameters]
    with_grad = [p for p in parameters if p.grad is not None]
    if kind == "sam":
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in with_grad]))
        for p in with_grad:
            p.add_(p.grad, alpha=size / (float(norm) + 1e-12))
    else:
        for p in with_grad:
            p.add_(p.grad * (size * torch.linalg.vector_norm(p) / (torch.linalg.vector_norm(p.grad) + 1e-12)))
    return originals


@torch.no_grad()
def restore_weights(parameters: list[torch.Tensor], originals: list[torch.Tensor]) -> None:
    for p, original in zip(parameters, originals, strict=True):
        p.copy_(original)
