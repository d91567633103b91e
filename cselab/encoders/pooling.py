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

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "mask")
LAYER_POOLERS = ("first", "avg", "max", "mask")
# the per-layer pooling that matches each sentence pooler (SSCL pools intermediate layers alike)
LAYER_POOLER = {"cls": "first", "cls_before_pooler": "first", "avg": "avg", "avg_first_last": "avg",
                "avg_top2": "avg", "mask": "mask"}


def needs_hidden_states(pooler: str) -> bool:
    """Whether the pooler reads intermediate layers (``output_hidden_states=True``)."""
    return pooler in ("avg_first_last", "avg_top2")


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
    raise ValueError(f"Unknown layer pooler {kind!r}; choose one of {', '.join(LAYER_POOLERS)}")


def pool(pooler: str, outputs, attention_mask: torch.Tensor,
         mask_positions: torch.Tensor | None = None) -> torch.Tensor:
    """One vector per sentence from a transformers model output."""
    if pooler == "cls":
        if getattr(outputs, "pooler_output", None) is None:
            raise ValueError("pooler 'cls' needs a model with a pooler layer; use 'cls_before_pooler' instead")
        return outputs.pooler_output
    if pooler in ("cls_before_pooler", "avg", "mask"):
        return pool_states(outputs.last_hidden_state, attention_mask, LAYER_POOLER[pooler], mask_positions)
    if pooler == "avg_first_last":
        hidden = outputs.hidden_states
        return masked_mean((hidden[1] + hidden[-1]) / 2, attention_mask)
    if pooler == "avg_top2":
        hidden = outputs.hidden_states
        return masked_mean((hidden[-1] + hidden[-2]) / 2, attention_mask)
    raise ValueError(f"Unknown pooler {pooler!r}; choose one of {', '.join(POOLERS)}")
