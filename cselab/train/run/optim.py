"""The optimizer and its schedule, every argument from ``training``.

- ``optimizer: adamw`` is :class:`torch.optim.AdamW`; ``adamw_legacy`` is :class:`LegacyAdamW`, the AdamW of
  transformers 4.x that SimCSE's, SSCL's and SG-BERT's released code step with. The two differ in where ε and the
  weight decay act: torch divides by ``sqrt(v / (1 - β₂ᵗ)) + ε`` and decays before the update; the legacy one
  divides by ``sqrt(v) + ε`` and rescales the step by ``sqrt(1 - β₂ᵗ) / (1 - β₁ᵗ)`` (so ε is ``ε / sqrt(1 - β₂ᵗ)``
  in torch's terms, 3.2e-7 for 1e-8 at the first step), then decays the updated weights.
- Parameters whose name contains one of ``no_decay`` (``bias``, ``LayerNorm.weight``, as both released trainers
  group them) take no weight decay.
- The learning rate warms up linearly over ``warmup`` (a fraction of the steps, or a count), then decays linearly to
  0 at the last step (Hugging Face's ``get_linear_schedule_with_warmup``), or, with ``lr_schedule: constant``, stays
  at its peak (``get_constant_schedule_with_warmup``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from cselab.train.config.sections import TrainingConfig, warmup_steps


class LegacyAdamW(torch.optim.Optimizer):
    """AdamW as transformers 4.x (``transformers.AdamW``, ``correct_bias=True``) steps::

        m ← β₁ m + (1 − β₁) g;   v ← β₂ v + (1 − β₂) g²
        θ ← θ − lr · sqrt(1 − β₂ᵗ) / (1 − β₁ᵗ) · m / (sqrt(v) + ε)
        θ ← θ − lr · λ · θ          (the weight decay, after the update)

    With ``fused`` (None: where the parameters are on a CUDA device) the update of the parameters that share a
    device, dtype and step count is torch's fused Adam kernel (``torch._fused_adam_``: one launch), given
    ``ε / sqrt(1 − β₂ᵗ)`` for ε, which is the same update (torch adds ε after dividing ``sqrt(v)`` by
    ``sqrt(1 − β₂ᵗ)``); the decay follows as above. The state is the same either way (``step`` a count,
    ``exp_avg``, ``exp_avg_sq``), so a run resumes on either path.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, fused: bool | None = None):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.fused = fused

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient: the same operations as one loop per parameter, applied
        with torch's ``_foreach`` kernels (or its fused Adam kernel, ``fused``) to all the parameters of a group that
        share a device, dtype and step count: a few kernel launches per group instead of a few per parameter (see
        benchmarks/RESULTS.md, GPU check)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            together: dict[tuple, list[torch.Tensor]] = {}
            for parameter in group["params"]:
                if parameter.grad is None:
                    continue
                state = self.state[parameter]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(parameter)
                    state["exp_avg_sq"] = torch.zeros_like(parameter)
                state["step"] += 1
                together.setdefault((parameter.device, parameter.dtype, state["step"]), []).append(parameter)
            for (device, _, step), parameters in together.items():
                grads = [p.grad for p in parameters]
                exp_avg = [self.state[p]["exp_avg"] for p in parameters]
                exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in parameters]
                if self.fused or (self.fused is None and device.type == "cuda"):
                    fused_update(parameters, grads, exp_avg, exp_avg_sq, group, step)
                    continue
                torch._foreach_mul_(exp_avg, beta1)
                torch._foreach_add_(exp_avg, grads, alpha=1.0 - beta1)
                torch._foreach_mul_(exp_avg_sq, beta2)
                torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1.0 - beta2)
                size = group["lr"] * math.sqrt(1.0 - beta2 ** step) / (1.0 - beta1 ** step)
                denominators = torch._foreach_sqrt(exp_avg_sq)
                torch._foreach_add_(denominators, group["eps"])
                torch._foreach_addcdiv_(parameters, exp_avg, denominators, value=-size)
                if group["weight_decay"] > 0.0:
                    torch._foreach_add_(parameters, parameters, alpha=-group["lr"] * group["weight_decay"])
        return loss


def fused_update(parameters: list[torch.Tensor], grads: list[torch.Tensor], exp_avg: list[torch.Tensor],
                 exp_avg_sq: list[torch.Tensor], group: dict[str, Any], step: int) -> None:
    """:class:`LegacyAdamW`'s update of ``parameters`` (one device, dtype and step count) in torch's fused Adam kernel,
    then the decay after it."""
    beta1, beta2 = group["betas"]
    steps = [torch.full((), float(step), dtype=torch.float32, device=parameters[0].device)] * len(parameters)
    torch._fused_adam_(parameters, grads, exp_avg, exp_avg_sq, [], steps, lr=group["lr"], beta1=beta1, beta2=beta2,
                       weight_decay=0.0, eps=group["eps"] / math.sqrt(1.0 - beta2 ** step), amsgrad=False,
                       maximize=False)
    if group["weight_decay"] > 0.0:
        torch._foreach_add_(parameters, parameters, alpha=-group["lr"] * group["weight_decay"])


def parameter_groups(named: Iterable[tuple[str, torch.Tensor]], cfg: TrainingConfig) -> list[dict[str, Any]]:
    """Two groups: the parameters that take ``weight_decay`` and those whose name contains one of ``no_decay``."""
    decay: list[torch.Tensor] = []
    exempt: list[torch.Tensor] = []
    for name, parameter in named:
        (exempt if any(part in name for part in cfg.no_decay) else decay).append(parameter)
    return [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": exempt, "weight_decay": 0.0}]


def build_optimizer(named: Iterable[tuple[str, torch.Tensor]], cfg: TrainingConfig, fused: bool = False
                    ) -> torch.optim.Optimizer:
    """The ``training.optimizer`` over the named trainable parameters, with every argument from ``cfg``: ``lr``,
    ``adam_betas``, ``adam_eps``, ``weight_decay`` (0 in most presets, as SimCSE's Hugging Face Trainer; torch's own
    default, 0.01, would pull the weights to 0) and ``no_decay``. ``fused``: the update in fused kernels (a CUDA
    device's run; the same update)."""
    groups = parameter_groups(named, cfg)
    beta1, beta2 = cfg.adam_betas
    if cfg.optimizer == "adamw_legacy":
        return LegacyAdamW(groups, lr=cfg.lr, betas=(beta1, beta2), eps=cfg.adam_eps, fused=fused)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(beta1, beta2), eps=cfg.adam_eps, fused=fused or None)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainingConfig, total: int):
    """Linear warm-up over ``training.warmup``, then linear decay to 0 at step ``total`` (``lr_schedule: linear``)
    or the peak rate to the end (``constant``)."""
    if cfg.lr_schedule == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup_steps(cfg.warmup, total))
    return get_linear_schedule_with_warmup(optimizer, warmup_steps(cfg.warmup, total), total)


def set_schedule_step(scheduler, step: int) -> None:
    """Put the schedule at ``step`` without stepping through it: its step count and the optimizer's learning rates
    those of that step (a restart from a checkpoint with a fresh optimizer)."""
    rates = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    scheduler.load_state_dict({**scheduler.state_dict(), "last_epoch": step, "_last_lr": rates})
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
