"""A method's objective: encode its views of a batch, then apply its losses.

Losses, view augmentations and generated negatives are plug-ins (:mod:`cselab.registry`; the losses
in :mod:`cselab.train.plugins.losses`); nothing here names one. A loss only sees the rows where all the
views it reads exist. On several processes, views are gathered from all of them with their gradient
(:mod:`cselab.train.distributed`) and each loss is reduced as its plug-in declares (``rows``: this
process's share of the mean over every process's rows; ``whole_batch``: views gathered first;
``replicated``: the same number everywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cselab.registry import Plugin, get
from cselab.train import plugins  # noqa: F401  (every plug-in registered)
from cselab.train.batches import Batch, Collator
from cselab.train.distributed import gather_rows, global_count, global_mean
from cselab.train.plugins.losses import LossContext

Encoded = dict[str, tuple[torch.Tensor, list[int]]]


def augment_plugin(view: dict[str, Any]) -> Plugin | None:
    """The plug-in of a view's ``augment``: an output augmentation for a view ``of`` another, else an input one."""
    augment = view.get("augment")
    if not augment:
        return None
    return get("output_augment" if view.get("of") else "input_augment", augment["kind"])


def _input_augment(view: dict[str, Any], name: str, captured: dict | None, directions: dict | None):
    """The word-embedding map of a view's ``augment`` (None when it has none at the input)."""
    plugin = augment_plugin(view)
    if plugin is None or view.get("of"):
        return None
    params = view["augment"]
    if "gradient" not in plugin.needs:
        return lambda embeddings: plugin.function(embeddings, params)
    if directions is not None and name in directions:
        return lambda embeddings: plugin.function(embeddings, params, directions[name])

    def capture(embeddings):
        if not embeddings.requires_grad:  # frozen embeddings: the gradient is still wanted here
            embeddings = embeddings.detach().requires_grad_(True)
        if captured is not None:
            captured[name] = embeddings
        return embeddings
    return capture


def _output_view(view: dict[str, Any], name: str, base: torch.Tensor, captured: dict | None,
                 directions: dict | None) -> torch.Tensor:
    """A view made from another view's vectors (``of``), through its output ``augment``."""
    plugin, params = augment_plugin(view), view["augment"]
    if "gradient" not in plugin.needs:
        return plugin.function(base, params)
    if directions is not None and name in directions:
        return plugin.function(base, params, directions[name])
    vectors = base * 1.0  # a node of its own, for the gradient with respect to this view
    if captured is not None:
        captured[name] = vectors
    return vectors


def _forward_view(model, encoder, view, name, batch: Batch, captured, directions) -> dict[str, tuple]:
    prompt = view.get("prompt")
    present, input_ids, attention_mask = batch.tokens[view["column"], prompt]
    if not present:
        empty = encoder.empty()
        return {name: (empty, present), **({f"{name}.layers": (empty.unsqueeze(1), present)}
                                          if view.get("layers") else {})}
    result = model(input_ids, attention_mask, prompt=prompt, layers=view.get("layers"),
                   layer_pooler=view.get("layer_pooler"), frozen=view.get("frozen", False),
                   input_augment=_input_augment(view, name, captured, directions))
    if view.get("layers"):
        return {name: (result[0], present), f"{name}.layers": (result[1], present)}
    return {name: (result, present)}


def as_batch(model, config: dict[str, Any], rows: Batch | dict[str, list]) -> Batch:
    """``rows`` as the training loader gives them (tokenised by :class:`~cselab.train.batches.Collator`): a
    :class:`Batch` as it is, plain rows (column -> values, a library call's) collated here."""
    return rows if isinstance(rows, Batch) else Collator(getattr(model, "module", model), config)(rows)


def encode_views(model, config: dict[str, Any], rows: Batch | dict[str, list], captured: dict | None = None,
                 directions: dict | None = None, reuse: Encoded | None = None) -> Encoded:
    """Each view's vectors for the rows that have its column, and those rows' positions in the batch; a view with
    ``layers`` also gives ``NAME.layers`` (rows, layers, dim); a view ``of`` another is made from its vectors.

    ``model`` is a :class:`~cselab.train.model.TrainingEncoder`, or its DDP wrapper (whose forward keeps the
    processes' gradients in step). Views of the same column and prompt share one tokenization; each still has its
    own forward pass (``rows``: a :class:`Batch`, tokenised by the loader, or plain rows, tokenised here). A view no
    row has is an empty tensor (other processes may still have rows of it).

    Views whose augment needs the gradient (FGSM) take two calls: the first fills ``captured`` (view -> the tensor
    whose loss gradient is wanted), the second gets those gradients as ``directions`` and re-encodes only those
    views, the rest coming from ``reuse``."""
    encoder = getattr(model, "module", model)
    batch, out = as_batch(model, config, rows), {}
    for name, view in config["views"].items():
        if reuse is not None and name not in directions and view.get("of") not in directions:
            out.update({key: reuse[key] for key in (name, f"{name}.layers") if key in reuse})
        elif view.get("of"):
            base, present = out[view["of"]]
            out[name] = (_output_view(view, name, base, captured, directions), present)
        else:
            out.update(_forward_view(model, encoder, view, name, batch, captured, directions))
    return out


def aligned(encoded: Encoded, names: list[str]) -> list[torch.Tensor]:
    """The views' vectors restricted to the rows all of them have (possibly none)."""
    common = sorted(set.intersection(*(set(encoded[n][1]) for n in names)))
    result = []
    for name in names:
        vectors, present = encoded[name]
        index = {row: k for k, row in enumerate(present)}
        result.append(vectors[[index[row] for row in common]])
    return result


def loss_plugin(name: str, params: dict[str, Any]) -> Plugin:
    return get("loss", params.get("type", name), f"losses.{name}.type")


def apply_loss(plugin: Plugin, params: dict[str, Any], context: LossContext) -> torch.Tensor | None:
    """One loss on the encoded views, reduced over processes as the plug-in declares; None when no row of the
    batch (on any process) can take a ``whole_batch`` loss."""
    views = aligned(context.encoded, [params[role] for role in plugin.roles]) if plugin.roles else []
    if plugin.prepare is not None:
        views = plugin.prepare(views, params)
    if plugin.reduce == "whole_batch":
        if global_count(len(views[0]), views[0].device) == 0:
            return None
        views = [gather_rows(view)[0] for view in views]
    value = plugin.function(views, params, context)
    return global_mean(value) if plugin.reduce == "rows" else value


def method_losses(config: dict[str, Any], encoded: Encoded, initial_weights: Callable[[], tuple] | None = None,
                  states: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """Each configured loss, unweighted; a loss no row of the batch (on any process) can take is left out.
    ``initial_weights()`` gives the current and initial parameters (for losses that need them); ``states`` (see
    :func:`build_states`) each loss's own state."""
    result = {}
    for name, params in config["losses"].items():
        context = LossContext(encoded, (states or {}).get(name), initial_weights)
        loss = apply_loss(loss_plugin(name, params), params, context)
        if loss is not None:
            result[name] = loss
    return result


def build_states(config: dict[str, Any]) -> dict[str, Any]:
    """Each loss's own state (e.g. a negative generator), for the losses whose plug-in makes one."""
    states = {}
    for name, params in config["losses"].items():
        plugin = loss_plugin(name, params)
        state = plugin.make_state(params) if plugin.make_state else None
        if state is not None:
            states[name] = state
    return states


def losses_need(config: dict[str, Any], need: str) -> bool:
    """Whether any of the method's losses declares ``need`` (e.g. ``initial_weights``)."""
    return any(need in loss_plugin(name, params).needs for name, params in config["losses"].items())


def gradient_view_names(config: dict[str, Any]) -> list[str]:
    """The views whose augment needs the loss gradient (FGSM): they take a second pass per step."""
    return [name for name, view in config["views"].items()
            if (plugin := augment_plugin(view)) is not None and "gradient" in plugin.needs]


def batch_losses(model, config: dict[str, Any], rows: Batch | dict[str, list], initial_weights=None,
                 states: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """Encode the views of ``rows`` and apply the losses; with views that need the gradient (FGSM), a first pass
    finds the direction that increases the loss, and those views are encoded again moved that way."""
    gradient_views, rows = gradient_view_names(config), as_batch(model, config, rows)
    if not gradient_views:
        return method_losses(config, encode_views(model, config, rows), initial_weights, states)
    captured = {}
    encoded = encode_views(model, config, rows, captured=captured)
    loss = total_loss(config, method_losses(config, encoded, initial_weights, states))
    gradients = torch.autograd.grad(loss, [captured[name] for name in gradient_views], retain_graph=True,
                                    allow_unused=True)
    directions = {name: torch.zeros_like(captured[name]) if g is None else g
                  for name, g in zip(gradient_views, gradients, strict=True)}
    encoded = encode_views(model, config, rows, directions=directions, reuse=encoded)
    return method_losses(config, encoded, initial_weights, states)


def total_loss(config: dict[str, Any], parts: dict[str, torch.Tensor]) -> torch.Tensor:
    return sum(config["losses"][name].get("weight", 1.0) * value for name, value in parts.items())
