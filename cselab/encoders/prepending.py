"""Token Prepending (Fu et al. 2025): the template holds a placeholder token before the sentence; before each decoder
layer of a range, the placeholder's state is replaced by the sentence's last token's, so that in a causal decoder the
tokens after it read the whole sentence early (fuyuchenIfyw/token_prepending, senllm/modeling_llama.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from cselab.encoders.pooling import last_positions
from cselab.errors import ConfigError

PLACEHOLDER = "<PST>"


def add_placeholder(model: Any, tokenizer: Any) -> int:
    """Add :data:`PLACEHOLDER` to ``tokenizer`` (a token of its own) and its input embedding to ``model``: the mean of
    the rows below its id (the model's own embeddings); its id."""
    tokenizer.add_tokens([PLACEHOLDER])
    token: int = tokenizer.convert_tokens_to_ids(PLACEHOLDER)
    embeddings = model.get_input_embeddings()
    with torch.no_grad():
        mean = embeddings.weight[:token].float().mean(dim=0)
        if token >= embeddings.num_embeddings:
            model.resize_token_embeddings(token + 1, mean_resizing=False)
            embeddings = model.get_input_embeddings()
        embeddings.weight[token] = mean.to(embeddings.weight.dtype)
    return token


def decoder_layers(model: Any, where: str = "token_prepending") -> nn.ModuleList:
    """The model's list of decoder layers (``layers`` of a Llama, Qwen2, Mistral or Gemma base model, or of its
    ``model``), or a ConfigError."""
    for owner in (model, getattr(model, "model", None)):
        layers = getattr(owner, "layers", None)
        if isinstance(layers, nn.ModuleList):
            return layers
    raise ConfigError(f"{where}: {type(model).__name__} has no list of decoder layers (model.layers, as Llama, Qwen2, "
                      "Mistral and Gemma have) to prepend in")


@contextmanager
def prepending(layers: nn.ModuleList, start: int, stop: int, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token: int) -> Iterator[None]:
    """Within the block, each layer of ``layers[start:stop]`` reads each row's first ``token`` replaced by the row's
    last real token (right padding or none)."""
    rows = torch.arange(len(input_ids), device=input_ids.device)
    placeholder = (input_ids == token).int().argmax(dim=1)
    last = last_positions(attention_mask)

    def replace(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        hidden = args[0] if args else kwargs["hidden_states"]
        replaced = hidden.clone()
        replaced[rows, placeholder] = hidden[rows, last]
        return ((replaced, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": replaced})

    handles = [layer.register_forward_pre_hook(replace, with_kwargs=True) for layer in layers[start:stop]]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
