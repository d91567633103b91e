"""A method's objective, built once from its resolved config: its views, its loss modules and its weight hook.

:class:`Objective` encodes a batch's views and applies the losses; nothing in a step looks up a plug-in or reads
the config. A loss only sees the rows where all the views it reads exist. On several processes, views are gathered
from all of them with their gradient (:mod:`cselab.train.distributed`) and each loss is reduced as its class
declares (``rows``: this process's share of the mean over every process's rows; ``whole_batch``: views gathered
first; ``replicated``: the same number everywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cselab.registry import build, build_plugin
from cselab.train import plugins  # noqa: F401  (every plug-in registered)
from cselab.train.batches import Batch, Collator, Key
from cselab.train.distributed import gather_rows, global_count, global_mean
from cselab.train.kinds import Augment, Loss, LossContext, NegativeSource
from cselab.train.schema import loss_plugin

Encoded = dict[str, tuple[torch.Tensor, list[int]]]


@dataclass(frozen=True)
class View:
    """One view of a method (``views.NAME``): a forward pass over ``column`` (with its ``prompt``, pooled
    ``layers``, on the ``frozen`` copy, its input embeddings through ``augment``), or vectors made ``of`` another
    view through an output ``augment``."""

    name: str
    column: str | None = None
    of: str | None = None
    prompt: str | None = None
    layers: list[int] | str | None = None
    layer_pooler: str | None = None
    frozen: bool = False
    augment: Augment | None = None

    @classmethod
    def from_config(cls, name: str, view: dict[str, Any]) -> View:
        augment = build_plugin("output_augment" if view.get("of") else "input_augment", view.get("augment"))
        settings = {key: view[key] for key in ("column", "of", "prompt", "layers", "layer_pooler", "frozen")
                    if key in view}
        return cls(name, **settings, augment=augment)

    @property
    def needs_gradient(self) -> bool:
        return self.augment is not None and self.augment.needs_gradient

    def input_augment(self, captured: dict | None, directions: dict | None) -> Callable | None:
        """The word-embedding map of a forward view's ``augment`` (None without one): FGSM's first pass captures
        the embeddings whose gradient it needs, its second moves them along ``directions``."""
        if self.augment is None:
            return None
        if not self.needs_gradient:
            return self.augment
        if directions is not None and self.name in directions:
            return lambda embeddings: self.augment(embeddings, directions[self.name])

        def capture(embeddings):
            if not embeddings.requires_grad:  # frozen embeddings: the gradient is still wanted here
                embeddings = embeddings.detach().requires_grad_(True)
            if captured is not None:
                captured[self.name] = embeddings
            return embeddings
        return capture

    def from_base(self, base: torch.Tensor, captured: dict | None, directions: dict | None) -> torch.Tensor:
        """This view's vectors made from its base view's through the output ``augment``."""
        if not self.needs_gradient:
            return self.augment(base)
        if directions is not None and self.name in directions:
            return self.augment(base, directions[self.name])
        vectors = base * 1.0  # a node of its own, for the gradient with respect to this view
        if captured is not None:
            captured[self.name] = vectors
        return vectors


class Objective(nn.Module):
    """A method's views (their augmentations in ``augments``), losses (:class:`~cselab.train.kinds.Loss` modules
    with their weights) and weight hook (a :class:`~cselab.train.kinds.WeightHook`), built once from the resolved
    config; ``objective(model, rows)`` gives each loss of a batch. Its ``state_dict`` holds the plug-ins' own state
    (e.g. a memory bank), saved with the run and restored on resume."""

    def __init__(self, method: dict[str, Any]):
        super().__init__()
        self.method = method["method"]
        self.views = tuple(View.from_config(name, view) for name, view in method["views"].items())
        self.augments = nn.ModuleDict({view.name: view.augment for view in self.views if view.augment is not None})
        # the (column, prompt) of each view that runs the encoder, each once: one tokenisation per batch
        self.forward_keys: list[Key] = list(dict.fromkeys((v.column, v.prompt) for v in self.views if not v.of))
        self.names = list(method["losses"])
        self.weights = {name: params["weight"] for name, params in method["losses"].items()}
        self.losses = nn.ModuleList(build(loss_plugin(name, params), params)
                                    for name, params in method["losses"].items())
        self.weight_hook = build_plugin("weight_hook", method["hooks"].get("weights"))
        self.gradient_views = [view.name for view in self.views if view.needs_gradient]
        self.needs_initial_weights = any(loss.needs_initial_weights for loss in self.losses)

    @property
    def columns(self) -> list[str]:
        return sorted({view.column for view in self.views if view.column})

    def new_batch(self) -> None:
        """A new step starts: sources of generated negatives make a new set at their next call."""
        for module in self.modules():
            if isinstance(module, NegativeSource):
                module.new_batch()

    def as_batch(self, model, rows: Batch | dict[str, list]) -> Batch:
        """``rows`` as the training loader gives them (tokenised by :class:`~cselab.train.batches.Collator`): a
        :class:`Batch` as it is, plain rows (column -> values, a library call's) collated here."""
        return rows if isinstance(rows, Batch) else Collator(getattr(model, "module", model), self.forward_keys)(rows)

    def encode(self, model, rows: Batch | dict[str, list], captured: dict | None = None,
               directions: dict | None = None, reuse: Encoded | None = None) -> Encoded:
        """Each view's vectors for the rows that have its column, and those rows' positions in the batch; a view with
        ``layers`` also gives ``NAME.layers`` (rows, layers, dim); a view ``of`` another is made from its vectors.

        ``model`` is a :class:`~cselab.train.model.TrainingEncoder`, or its DDP wrapper (whose forward keeps the
        processes' gradients in step). Views of the same column and prompt share one tokenization; each still has
        its own forward pass. A view no row has is an empty tensor (other processes may still have rows of it).

        Views whose augment needs the gradient (FGSM) take two calls: the first fills ``captured`` (view -> the
        tensor whose loss gradient is wanted), the second gets those gradients as ``directions`` and re-encodes only
        those views, the rest coming from ``reuse``."""
        encoder = getattr(model, "module", model)
        batch, out = self.as_batch(model, rows), {}
        for view in self.views:
            if reuse is not None and view.name not in directions and view.of not in directions:
                out.update({key: reuse[key] for key in (view.name, f"{view.name}.layers") if key in reuse})
            elif view.of:
                base, present = out[view.of]
                out[view.name] = (view.from_base(base, captured, directions), present)
            else:
                out.update(_forward_view(model, encoder, view, batch, captured, directions))
        return out

    def losses_on(self, encoded: Encoded, initial_weights: Callable[[], tuple] | None = None
                  ) -> dict[str, torch.Tensor]:
        """Each loss on the encoded views, unweighted; a loss no row of the batch (on any process) can take is left
        out. ``initial_weights()`` gives the current and initial parameters (for losses that need them)."""
        context = LossContext(encoded, initial_weights)
        result = {}
        for name, loss in zip(self.names, self.losses, strict=True):
            value = apply_loss(loss, context)
            if value is not None:
                result[name] = value
        return result

    def forward(self, model, rows: Batch | dict[str, list], initial_weights=None) -> dict[str, torch.Tensor]:
        """Encode the views of ``rows`` and apply the losses; with views that need the gradient (FGSM), a first pass
        finds the direction that increases the loss, and those views are encoded again moved that way."""
        rows = self.as_batch(model, rows)
        if not self.gradient_views:
            return self.losses_on(self.encode(model, rows), initial_weights)
        captured = {}
        encoded = self.encode(model, rows, captured=captured)
        loss = self.total(self.losses_on(encoded, initial_weights))
        gradients = torch.autograd.grad(loss, [captured[name] for name in self.gradient_views], retain_graph=True,
                                        allow_unused=True)
        directions = {name: torch.zeros_like(captured[name]) if g is None else g
                      for name, g in zip(self.gradient_views, gradients, strict=True)}
        encoded = self.encode(model, rows, directions=directions, reuse=encoded)
        return self.losses_on(encoded, initial_weights)

    def total(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """The weighted sum of the losses ``parts`` has."""
        return sum(self.weights[name] * value for name, value in parts.items())


def _forward_view(model, encoder, view: View, batch: Batch, captured, directions) -> dict[str, tuple]:
    present, input_ids, attention_mask = batch.tokens[view.column, view.prompt]
    if not present:
        empty = encoder.empty()
        return {view.name: (empty, present),
                **({f"{view.name}.layers": (empty.unsqueeze(1), present)} if view.layers else {})}
    result = model(input_ids, attention_mask, prompt=view.prompt, layers=view.layers,
                   layer_pooler=view.layer_pooler, frozen=view.frozen,
                   input_augment=view.input_augment(captured, directions))
    if view.layers:
        return {view.name: (result[0], present), f"{view.name}.layers": (result[1], present)}
    return {view.name: (result, present)}


def aligned(encoded: Encoded, names: list[str]) -> list[torch.Tensor]:
    """The views' vectors restricted to the rows all of them have (possibly none)."""
    common = sorted(set.intersection(*(set(encoded[n][1]) for n in names)))
    result = []
    for name in names:
        vectors, present = encoded[name]
        index = {row: k for k, row in enumerate(present)}
        result.append(vectors[[index[row] for row in common]])
    return result


def apply_loss(loss: Loss, context: LossContext) -> torch.Tensor | None:
    """One loss on the encoded views, reduced over processes as its class declares; None when no row of the batch
    (on any process) can take a ``whole_batch`` loss."""
    views = aligned(context.encoded, [loss.views[role] for role in loss.roles]) if loss.roles else []
    views = loss.prepare(views)
    if loss.reduce == "whole_batch":
        if global_count(len(views[0]), views[0].device) == 0:
            return None
        views = [gather_rows(view)[0] for view in views]
    value = loss(views, context)
    return global_mean(value) if loss.reduce == "rows" else value
