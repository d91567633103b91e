"""Poolers: how a transformer's token states become one sentence vector.

:class:`Pooler` plug-ins (:mod:`cselab.registry` kind ``pooler``) on model outputs, shared by the probes and the
trainer.

- ``cls``: the model's pooler output (BERT's dense+tanh layer over [CLS]).
- ``cls_before_pooler``: the last layer's [CLS] state.
- ``avg``: mean of the last layer over non-padding tokens.
- ``avg_first_last``: mean over tokens of the average of the first transformer layer's
  output (``hidden_states[1]``, not the embeddings) and the last layer's.
- ``avg_top2``: mean over tokens of the average of the last two layers.
- ``mask``: the last layer's state at the prompt's mask token.
- ``last``: the last layer's state at each row's last non-padding token (a decoder LM's summary token), under right
  or left padding alike.
- ``weighted_mean``: SGPT's position-weighted mean of the last layer (Muennighoff, 2022): the i-th of a row's n
  tokens weighs i / (1 + ... + n), counted over its non-padding tokens, so under left or right padding alike.

:class:`LayerPooler` plug-ins (kind ``layer_pooler``) pool one layer's token states: ``first``, ``avg``, ``max``,
``mask``, ``last`` and ``weighted_mean``; the last-layer poolers above are made of them, and views that pool
intermediate layers name one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from cselab.errors import ConfigError
from cselab import boundary
from cselab.registry import contract, get, register

#: A transformers model's output (``BaseModelOutput`` and its kin, with ``pooler_output`` where the model has a pooler
#: layer), read by attribute: no one type of transformers declares what each pooler reads.
ModelOutput = Any


def matching_layer_pooler(pooler: str) -> str:
    """How each layer is pooled to match the sentence ``pooler`` (SSCL pools intermediate layers alike)."""
    layer_pooler: str = get("pooler", pooler).cls.layer_pooler
    return layer_pooler


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's last non-padding position (padding on either side; 0 for a row of padding alone)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(attention_mask)
    return torch.where(attention_mask.bool(), positions, -1).max(dim=1).values.clamp(min=0)


def pools_last_layer(pooler: str) -> bool:
    """Whether ``pooler`` pools the last layer's states with its layer pooler alone, so that it can pool another
    layer the same way (``layer``); not one that reads several layers or the model's pooler output."""
    return issubclass(get("pooler", pooler).cls, _LastLayer)


def masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``states`` (batch, tokens, dim) over the tokens where ``attention_mask`` is 1."""
    weights = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class LayerPooler:
    """A layer pooler (kind ``layer_pooler``): one vector per sentence from one layer's token states (batch, tokens,
    dim), the attention mask and the prompt's mask-token positions (None without a prompt). A view's
    ``layer_pooler`` and each :class:`Pooler`'s ``layer_pooler`` name one."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


contract("layer_pooler", LayerPooler, {"__call__": boundary.tensor(rows_of=1)})  # a vector per row


@register("layer_pooler", "first")
class First(LayerPooler):
    """The first token's state."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        return states[:, 0]


@register("layer_pooler", "avg")
class Mean(LayerPooler):
    """The mean over non-padding tokens."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        return masked_mean(states, attention_mask)


@register("layer_pooler", "max")
class Max(LayerPooler):
    """The maximum over non-padding tokens, per dimension."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        return states.masked_fill(attention_mask.unsqueeze(-1) == 0, torch.finfo(states.dtype).min).max(dim=1).values


@register("layer_pooler", "mask")
class MaskToken(LayerPooler):
    """The state at the prompt's mask token."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        if mask_positions is None:
            raise ValueError("pooler 'mask' needs the mask token's positions")
        return states[torch.arange(len(states), device=states.device), mask_positions]


@register("layer_pooler", "last")
class LastToken(LayerPooler):
    """The state at each row's last non-padding token."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        return states[torch.arange(len(states), device=states.device), last_positions(attention_mask)]


@register("layer_pooler", "weighted_mean")
class WeightedMean(LayerPooler):
    """The mean over non-padding tokens weighted by their position among them (1, 2, ..., n)."""

    def __call__(self, states: torch.Tensor, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        mask = attention_mask.to(states.dtype)
        weights = (mask.cumsum(dim=1) * mask).unsqueeze(-1)
        return (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)



def pool_states(states: torch.Tensor, attention_mask: torch.Tensor, kind: str,
                mask_positions: torch.Tensor | None = None) -> torch.Tensor:
    """One vector per sentence from one layer's token states with the layer pooler ``kind``."""
    pooler: LayerPooler = get("layer_pooler", kind).cls()
    return pooler(states, attention_mask, mask_positions)


class Pooler:
    """A pooler (kind ``pooler``): called with a transformers model output, the attention mask and the prompt's
    mask-token positions (None without a prompt), it gives one vector per sentence. ``hidden_states`` asks for
    every layer's states (``output_hidden_states=True``); ``layer_pooler`` names the :class:`LayerPooler` of one
    layer's states that matches it, for views that pool intermediate layers too."""

    hidden_states: ClassVar[bool] = False
    layer_pooler: ClassVar[str] = "avg"

    def __call__(self, outputs: ModelOutput, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


contract("pooler", Pooler, {"__call__": boundary.tensor(rows_of=1)})


@register("pooler", "cls")
class CLS(Pooler):
    """The model's pooler output (BERT's dense + tanh over [CLS])."""

    layer_pooler = "first"

    def __call__(self, outputs: ModelOutput, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        if getattr(outputs, "pooler_output", None) is None:
            raise ConfigError("pooler 'cls' needs a model with a pooler layer; use 'cls_before_pooler' instead")
        pooled: torch.Tensor = outputs.pooler_output
        return pooled


class _LastLayer(Pooler):
    def __call__(self, outputs: ModelOutput, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        return pool_states(outputs.last_hidden_state, attention_mask, self.layer_pooler, mask_positions)


@register("pooler", "cls_before_pooler")
class CLSBeforePooler(_LastLayer):
    """The last layer's [CLS] state."""

    layer_pooler = "first"


@register("pooler", "avg")
class Avg(_LastLayer):
    """Mean of the last layer over non-padding tokens."""

    layer_pooler = "avg"


@register("pooler", "mask")
class Mask(_LastLayer):
    """The last layer's state at the prompt's mask token."""

    layer_pooler = "mask"


@register("pooler", "last")
class Last(_LastLayer):
    """The last layer's state at each row's last non-padding token."""

    layer_pooler = "last"


@register("pooler", "weighted_mean")
class PositionWeightedMean(_LastLayer):
    """SGPT's position-weighted mean of the last layer."""

    layer_pooler = "weighted_mean"


@register("pooler", "avg_first_last")
class AvgFirstLast(Pooler):
    """Mean over tokens of the first transformer layer's and the last layer's average."""

    hidden_states = True

    def __call__(self, outputs: ModelOutput, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        hidden = outputs.hidden_states
        return masked_mean((hidden[1] + hidden[-1]) / 2, attention_mask)


@register("pooler", "avg_top2")
class AvgTop2(Pooler):
    """Mean over tokens of the last two layers' average."""

    hidden_states = True

    def __call__(self, outputs: ModelOutput, attention_mask: torch.Tensor,
                 mask_positions: torch.Tensor | None) -> torch.Tensor:
        hidden = outputs.hidden_states
        return masked_mean((hidden[-1] + hidden[-2]) / 2, attention_mask)

