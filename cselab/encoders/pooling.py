"""Poolers: how a transformer's token states become one sentence vector.

Pure functions on model outputs, shared by the probes and the trainer.

- ``cls``: the model's pooler output (BERT's dense+tanh layer over [CLS]).
- ``cls_before_pooler``: the last layer's [CLS] state.
- ``avg``: mean of the last layer over non-padding tokens.
- ``avg_first_last``: mean over tokens of the average of the first transformer layer's
  output (``hidden_states[1]``, not the embeddings) and the last layer's.
- ``avg_top2``: mean over tokens of the average of the last two layers.
- ``mask``: the last layer's state at the prompt's mask token.
"""

from __future__ import annotations

import torch

from cselab.errors import ConfigError
from cselab.registry import get, names, register

LAYER_POOLERS = ("first", "avg", "max", "mask")
# the per-layer pooling that matches each sentence pooler (SSCL pools intermediate layers alike)
LAYER_POOLER = {"cls": "first", "cls_before_pooler": "first", "avg": "avg", "avg_first_last": "avg",
                "avg_top2": "avg", "mask": "mask"}


def needs_hidden_states(pooler: str) -> bool:
    """Whether the pooler reads intermediate layers (``output_hidden_states=True``)."""
    return "hidden_states" in get("pooler", pooler).needs


def masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``states`` (batch, tokens, dim) over the tokens where ``attention_mask`` is 1."""
    weights = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def pool_states(states: torch.Tensor, attention_mask: torch.Tensor, kind: str,
                mask_positions: torch.Tensor | None = None) -> torch.Tensor:
    """One vector per sentence from one layer's token states (batch, tokens, dim): the ``first`` token's, the
    ``avg`` or ``max`` over non-padding tokens, or the state at the prompt's ``mask`` token."""
    if kind == "first":
        return states[:, 0]
    if kind == "avg":
        return masked_mean(states, attention_mask)
    if kind == "max":
        return states.masked_fill(attention_mask.unsqueeze(-1) == 0, torch.finfo(states.dtype).min).max(dim=1).values
    if kind == "mask":
        if mask_positions is None:
            raise ValueError("pooler 'mask' needs the mask token's positions")
        return states[torch.arange(len(states), device=states.device), mask_positions]
    raise ConfigError(f"Unknown layer pooler {kind!r}; choose one of {', '.join(LAYER_POOLERS)}")


@register("pooler", "cls")
def _cls(outputs, attention_mask, mask_positions):
    """The model's pooler output (BERT's dense + tanh over [CLS])."""
    if getattr(outputs, "pooler_output", None) is None:
        raise ConfigError("pooler 'cls' needs a model with a pooler layer; use 'cls_before_pooler' instead")
    return outputs.pooler_output


def _last_layer(pooler: str):
    def pool_last(outputs, attention_mask, mask_positions):
        return pool_states(outputs.last_hidden_state, attention_mask, LAYER_POOLER[pooler], mask_positions)
    pool_last.__doc__ = {"cls_before_pooler": "The last layer's [CLS] state.",
                         "avg": "Mean of the last layer over non-padding tokens.",
                         "mask": "The last layer's state at the prompt's mask token."}[pooler]
    return pool_last


for _name in ("cls_before_pooler", "avg", "mask"):
    register("pooler", _name)(_last_layer(_name))


@register("pooler", "avg_first_last", needs=("hidden_states",))
def _avg_first_last(outputs, attention_mask, mask_positions):
    """Mean over tokens of the first transformer layer's and the last layer's average."""
    hidden = outputs.hidden_states
    return masked_mean((hidden[1] + hidden[-1]) / 2, attention_mask)


@register("pooler", "avg_top2", needs=("hidden_states",))
def _avg_top2(outputs, attention_mask, mask_positions):
    """Mean over tokens of the last two layers' average."""
    hidden = outputs.hidden_states
    return masked_mean((hidden[-1] + hidden[-2]) / 2, attention_mask)


POOLERS = tuple(names("pooler"))


def pool(pooler: str, outputs, attention_mask: torch.Tensor,
         mask_positions: torch.Tensor | None = None) -> torch.Tensor:
    """One vector per sentence from a transformers model output."""
    return get("pooler", pooler).function(outputs, attention_mask, mask_positions)
