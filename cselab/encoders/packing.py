"""Packed (padding-free) forward passes: a right-padded batch's real tokens run as one row, so that the embeddings,
every linear layer and every layer norm compute no padding token (``training.packing``).

The batch (rows x width) is unpadded into one row of its T real tokens, each at the position the padded pass gives it
(:func:`positions`), and the model runs on it with its attention implementation switched, for that pass only, to
cselab's :func:`attention` (registered in transformers' ``AttentionInterface`` as :data:`NAME`; the config's saved
``attn_implementation`` is never touched: transformers does not write it). There each layer's queries, keys and values
are padded back to (rows, heads, width, dim), attend through transformers' own SDPA attention with the mask the padded
pass would build (its padding, and causality where the layer is causal), and are unpadded again. The model's states
come back padded (zeros at the padding), BERT's pooler layer reads them padded back, so the poolers read what they read
from a padded pass: the same numbers, up to the rounding of sums over another number of rows.

Dropout draws its masks over the padded batch, as the padded pass does (:func:`dropout_masks`): each dropout of a
packed row is padded back to (rows, width, ...), dropped, and unpadded, so that it draws as many numbers, in the same
order, as the padded pass, and the real tokens get the padded pass's masks. A packed pass with dropout on is then the
padded pass too, seed for seed (attention's own dropout runs on the re-padded batch already).

On CUDA with flash-attention installed, transformers' own padding-free path (``flash_attention_2`` with
``position_ids``) would spare the re-padding around attention too; it is not wired here (no machine to test it on).
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch

#: The attention implementation a packed pass runs (registered in transformers' ``AttentionInterface``).
NAME = "cselab_packed"
#: The model types whose packed passes were checked against their padded ones (tests/encoders/test_packing.py): their
#: positions and masks are those :func:`positions` and :func:`attention` rebuild. MiniLM is a BERT.
VERIFIED = ("bert", "roberta", "llama", "qwen2", "gpt2", "opt")


def config_refusal(config: Any) -> str | None:
    """Why the passes of a model of ``config`` (a transformers config) cannot be packed, read before it loads, or
    None."""
    kind = getattr(config, "model_type", "")
    if kind not in VERIFIED:
        return (f"{kind or 'the model'} is not among the model types whose packed passes were checked "
                f"({', '.join(VERIFIED)})")
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return "the model has sliding-window layers, whose masks a packed pass does not build"
    return None


def refusal(model: Any) -> str | None:
    """Why the loaded ``model``'s passes cannot be packed, or None."""
    config = model.config
    found = config_refusal(config)
    if found is not None:
        return found
    implementation = getattr(config, "_attn_implementation", None)
    if implementation != "sdpa":
        return (f"the model runs {implementation!r} attention, and a packed pass attends through SDPA; load it with "
                "attn_implementation 'sdpa'")
    windowed = [name for name, module in model.named_modules() if getattr(module, "sliding_window", None)]
    if windowed:
        return f"{windowed[0]} attends through a sliding window, whose mask a packed pass does not build"
    return None


@dataclass
class Packing:
    """A padded batch's real tokens: their flat positions among its ``rows`` x ``width`` tokens (``index``), and the
    masks of its padded pass (built on first use, by causality)."""

    index: torch.Tensor
    rows: int
    width: int
    masks: Callable[[bool], torch.Tensor | None]
    built: dict[bool, torch.Tensor | None] = field(default_factory=dict)

    def padded(self, packed: torch.Tensor) -> torch.Tensor:
        """(T, ...) -> (rows, width, ...), zeros at the padding."""
        out = packed.new_zeros((self.rows * self.width, *packed.shape[1:]))
        return out.index_copy(0, self.index, packed).view(self.rows, self.width, *packed.shape[1:])

    def packed(self, padded: torch.Tensor) -> torch.Tensor:
        """(rows, width, ...) -> (T, ...)."""
        return padded.flatten(0, 1).index_select(0, self.index)

    def mask(self, causal: bool) -> torch.Tensor | None:
        """The padded pass's attention mask of a layer that is ``causal`` or not."""
        if causal not in self.built:
            self.built[causal] = self.masks(causal)
        return self.built[causal]


def padded_dropout(packing: Packing, dropout: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``dropout`` (torch's functional one) that draws the mask of a packed row's tokens, (1, T, ...) or (T, ...), over
    the padded batch (rows, width, ...) and keeps the real tokens' part (see the module docstring); any other tensor's
    as it is."""
    tokens = len(packing.index)

    def drop(states: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        row = states.dim() >= 2 and states.shape[:2] == (1, tokens)
        if not (row or (states.dim() >= 2 and states.shape[0] == tokens)):  # (T, ...): OPT's MLP flattens its rows
            return dropout(states, p, training, inplace)
        dropped = packing.packed(dropout(packing.padded(states[0] if row else states), p, training))
        return dropped.unsqueeze(0) if row else dropped
    return drop


def padded_augment(augment: Callable[[torch.Tensor], torch.Tensor], embeddings: torch.Tensor) -> torch.Tensor:
    """``augment`` (an input augment) of a pass's word embeddings; in a packed pass, of the padded batch's, packed
    again, so that it draws what it draws in the padded pass (and sees a row as a row)."""
    packing = ACTIVE.get()
    if packing is None or embeddings.shape[:2] != (1, len(packing.index)):
        return augment(embeddings)
    return packing.packed(augment(packing.padded(embeddings[0]))).unsqueeze(0)


#: The packing of the packed pass running now (for a layer that gradient checkpointing recomputes after it).
ACTIVE: ContextVar[Packing | None] = ContextVar("cselab_packing", default=None)


@contextlib.contextmanager
def dropout_masks(packing: Packing | None, training: bool = True) -> Iterator[None]:
    """Inside, in a training pass, ``torch.nn.functional.dropout`` (which ``nn.Dropout`` calls, and models such as OPT
    call themselves) is :func:`padded_dropout`'s, restored after. (A ``TorchFunctionMode``, which sees every torch call
    of the pass, made the tiny BERT's packed step 1.15x its padded one instead of 0.96x: benchmarks/packing_speed.py.)
    """
    if packing is None or not training:
        yield
        return
    functional = torch.nn.functional
    original = functional.dropout
    functional.dropout = padded_dropout(packing, original)
    try:
        yield
    finally:
        functional.dropout = original


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: Any, dropout: float = 0.0, scaling: float | None = None,
              cselab_packing: Packing | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """One layer's attention in a packed pass: (1, heads, T, dim) padded to (rows, heads, width, dim), SDPA with the
    padded pass's mask, and back to (1, T, heads, dim)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cselab_packing is None:
        raise RuntimeError(f"attention {NAME!r} runs in cselab's packed passes only (no packing given)")
    packing = cselab_packing
    query, key, value = (packing.padded(t[0].transpose(0, 1)).transpose(1, 2) for t in (query, key, value))
    mask = packing.mask(bool(getattr(module, "is_causal", False)))
    out, _ = sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
    return packing.packed(out).unsqueeze(0), None


def positions(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Each token's position in the padded pass of right-padded rows: counted from 0 in its row, or as RoBERTa's
    embeddings count from its token ids (after the padding index)."""
    embeddings: Any = getattr(getattr(model, "base_model", model), "embeddings", None)
    if hasattr(embeddings, "create_position_ids_from_input_ids"):
        counted: torch.Tensor = embeddings.create_position_ids_from_input_ids(input_ids, embeddings.padding_idx)
        return counted
    return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)


def pack(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, bidirectional: bool = False
         ) -> Packing | None:
    """The packing of a right-padded batch, or None where it has no padding (the padded pass computes no pad token).
    ``bidirectional``: every layer attends to its row's real tokens both ways (LLM2Vec), else as the model's
    layers do (causal where they are)."""
    index = attention_mask.flatten().nonzero().squeeze(1)
    rows, width = input_ids.shape
    if len(index) == rows * width:
        return None
    from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

    config, implementation = model.config, model.config._attn_implementation
    embeds = torch.empty((rows, width, 0), device=input_ids.device, dtype=next(model.parameters()).dtype)

    def masks(causal: bool) -> torch.Tensor | None:  # (built inside the packed pass: with the model's own masks)
        with switched(config, implementation):
            if causal and not bidirectional:
                mask = create_causal_mask(config=config, inputs_embeds=embeds, attention_mask=attention_mask,
                                          cache=None)
            else:
                mask = create_bidirectional_mask(config=config, inputs_embeds=embeds, attention_mask=attention_mask,
                                                 allow_is_bidirectional_skip=not bidirectional)
        return cast("torch.Tensor | None", mask)  # (sdpa's masks: a boolean tensor, or None)
    return Packing(index, rows, width, masks)


@contextlib.contextmanager
def switched(config: Any, implementation: str) -> Iterator[None]:
    """``config``'s attention implementation set to ``implementation`` inside, restored after."""
    before = config._attn_implementation
    config._attn_implementation = implementation
    try:
        yield
    finally:
        config._attn_implementation = before


def checkpoint_contexts(config: Any) -> Callable[[], tuple[Any, Any]]:
    """A ``context_fn`` for non-reentrant gradient checkpointing: a layer recomputed in the backward pass attends
    through the implementation its forward pass ran and draws its dropout as it did (a packed pass's, outside it)."""
    def contexts() -> tuple[Any, Any]:
        return contextlib.nullcontext(), recomputed(config, config._attn_implementation, ACTIVE.get())
    return contexts


@contextlib.contextmanager
def recomputed(config: Any, implementation: str, packing: Packing | None) -> Iterator[None]:
    """A recomputed layer's context: its pass's attention implementation and dropout (:func:`checkpoint_contexts`)."""
    with switched(config, implementation), dropout_masks(packing):
        yield


def forward(model: Any, input_ids: torch.Tensor, packing: Packing, **kwargs: Any) -> Any:
    """``model``'s outputs on the packed batch, padded back: ``last_hidden_state`` and ``hidden_states`` (rows,
    width, dim), zeros at the padding; ``pooler_output`` from the padded-back states."""
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, attention)
    ids = packing.packed(input_ids).unsqueeze(0)
    position_ids = packing.packed(positions(model, input_ids)).unsqueeze(0)
    pooler = getattr(model, "pooler", None)  # BERT's pooler layer: run inside the pass (a sharded model's weights are
    # gathered there), on the states padded back
    hook = pooler.register_forward_pre_hook(lambda module, args: (packing.padded(args[0][0]), *args[1:])) \
        if isinstance(pooler, torch.nn.Module) else None
    active = ACTIVE.set(packing)
    try:
        with switched(model.config, NAME), dropout_masks(packing, model.training):
            outputs = model(input_ids=ids, position_ids=position_ids, cselab_packing=packing, **kwargs)
    finally:
        ACTIVE.reset(active)
        if hook is not None:
            hook.remove()
    outputs["last_hidden_state"] = packing.padded(outputs.last_hidden_state[0])
    if outputs.get("hidden_states") is not None:
        outputs["hidden_states"] = tuple(packing.padded(states[0]) for states in outputs.hidden_states)
    return outputs
