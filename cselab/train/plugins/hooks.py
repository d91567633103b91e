"""Step hooks that perturb the weights (simcse-improvements.txt section 4.2), registered as ``weight_hook``
plug-ins (:mod:`cselab.registry`), configured as ``hooks: {weights: {kind: sam|awp, size: ...}}``.

SAM (Foret et al.) and AWP (Wu et al.) take two forward-backward passes per step: the first
gives the gradient g; the weights move to w + delta; the second pass's gradient, taken there,
is the one the optimizer applies to the original weights, which are restored exactly first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cselab.registry import register, setting
from cselab.train.plugins.kinds import WeightHook


@register("weight_hook", "sam")
class SAM(WeightHook):
    """``delta = rho * g / ||g||`` over all weights together (rho = 0.05)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(WeightHook.Params):
        size: float = setting(0.05, "rho, the step's length", min=0.0)

    def forward(self, with_grad):
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in with_grad]))
        for p in with_grad:
            p.add_(p.grad, alpha=self.params.size / (float(norm) + 1e-12))


@register("weight_hook", "awp")
class AWP(WeightHook):
    """``delta_l = gamma * ||w_l|| * g_l / ||g_l||`` for each weight tensor l, a step relative to the weight's
    own size (gamma = 5e-3, AWP's default)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(WeightHook.Params):
        size: float = setting(5e-3, "gamma, the step relative to each weight's norm", min=0.0)

    def forward(self, with_grad):
        size = self.params.size
        for p in with_grad:
            p.add_(p.grad * (size * torch.linalg.vector_norm(p) / (torch.linalg.vector_norm(p.grad) + 1e-12)))


@torch.no_grad()
def perturb_weights(parameters: list[torch.Tensor], hook: WeightHook) -> list[torch.Tensor]:
    """Move ``parameters`` along their ``.grad`` with a weight ``hook``; returns their original values."""
    originals = [p.detach().clone() for p in parameters]
    hook([p for p in parameters if p.grad is not None])
    return originals


@torch.no_grad()
def restore_weights(parameters: list[torch.Tensor], originals: list[torch.Tensor]) -> None:
    for p, original in zip(parameters, originals, strict=True):
        p.copy_(original)
