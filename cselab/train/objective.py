"""A method's objective, built once from its resolved config: its views, its loss modules and its weight hook.

:class:`Objective` encodes a batch's views and applies the losses; nothing in a step looks up a plug-in or reads
the config. A loss only sees the rows where all the views it reads exist. On several processes, views are gathered
from all of them with their gradient (:mod:`cselab.train.distributed`) and each loss is reduced as its class
declares (``rows``: this process's share of the mean over every process's rows; ``whole_batch``: views gathered
first; ``replicated``: the same number everywhere).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cselab.registry import build, build_plugin
from cselab.train.batches import Batch, Collator, Key
from cselab.train.distributed import gather_rows, global_count, global_mean
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import Augment, Loss, LossContext, NegativeSource, TokenAugment
from cselab.train.config.method import MethodConfig
from cselab.train.config.sections import ViewConfig
from cselab.train.config.schema import loss_plugin, value_columns

Encoded = dict[str, tuple[torch.Tensor, list[int]]]


@dataclass(frozen=True)
class View:
    """One view of a method (``views.NAME``): a forward pass over ``column`` (with its ``prompt``, pooled
    ``layers``, on the ``frozen`` copy, its token ids through ``tokens``, its input embeddings through ``augment``),
    or vectors made ``of`` another view through an output ``augment``. Its settings are its ``config``'s
    (:class:`~cselab.train.config.sections.ViewConfig`, read as the view's own attributes); ``augment`` and ``tokens``
    are the plug-ins built from them."""

    name: str
    config: ViewConfig
    augment: Augment | None = None
    tokens: TokenAugment | None = None

    @classmethod
    def from_config(cls, name: str, view: ViewConfig) -> View:
        augment = build_plugin("output_augment" if view.of else "input_augment", view.augment)
        return cls(name, view, augment, build_plugin("token_augment", view.tokens))

    def __getattr__(self, key: str) -> Any:
        """A setting of the view's config (column, of, prompt, layers, layer_pooler, frozen)."""
        if key == "config":  # not set yet (a copy being built)
            raise AttributeError(key)
        return getattr(self.config, key)

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
    """A method's views (their augmentations in ``augments``), losses (:class:`~cselab.train.plugins.kinds.Loss`
    modules with their weights) and weight hook (a :class:`~cselab.train.plugins.kinds.WeightHook`), built once from
    the resolved config; ``objective(model, rows)`` gives each loss of a batch. Its ``state_dict`` holds the plug-ins'
    own state (e.g. a memory bank), saved with the run and restored on resume."""

    def __init__(self, method: MethodConfig):
        super().__init__()
        self.method = method.name
        self.views = tuple(View.from_config(name, view) for name, view in method.views.items())
        self.augments = nn.ModuleDict({view.name: view.augment for view in self.views if view.augment is not None})
        # the (column, prompt) of each view that runs the encoder, each once: one tokenisation per batch
        self.forward_keys: list[Key] = list(dict.fromkeys((v.column, v.prompt) for v in self.views if not v.of))
        self.view_keys = {v.name: (v.column, v.prompt) for v in self.views if not v.of}  # a view's tokenisation
        self.shared_pass = shared_passes(self.views)
        self.interleaved = method.training.view_rows == "interleaved"
        self.names = list(method.losses)
        self.weights = {name: params["weight"] for name, params in method.losses.items()}
        self.matryoshka = {name: params.get("matryoshka") for name, params in method.losses.items()}
        self.value_columns = value_columns(method.losses)  # the numeric columns the losses read (a score)
        self.losses = nn.ModuleList(build(loss_plugin(name, params), params) for name, params in method.losses.items())
        self.weight_hook = build_plugin("weight_hook", method.hooks.get("weights"))
        self.gradient_views = [view.name for view in self.views if view.needs_gradient]
        self.needs_initial_weights = any(loss.needs_initial_weights for loss in self.losses)
        # views whose vectors before the training head a loss reads too (as NAME.pooled)
        self.pooled = {name for loss in self.losses if loss.needs_pooled for value in loss.views.values()
                       for name in (value if isinstance(value, list) else [value])}

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
        processes' gradients in step). Views of the same column and prompt share one tokenization; those that
        also read the same layers of the same copy through no input augment share one forward pass over their
        rows repeated (SimCSE's two dropout views: one pass of 2N rows, as its released code), every row with its
        own dropout masks; ``training.view_rows`` lays them out stacked or, as the released code, interleaved. A
        view no row has is an empty tensor (other processes may still have rows of it).

        Views whose augment needs the gradient (FGSM) take two calls: the first fills ``captured`` (view -> the
        tensor whose loss gradient is wanted), the second gets those gradients as ``directions`` and re-encodes only
        those views, the rest coming from ``reuse``."""
        encoder = getattr(model, "module", model)
        batch, out = self.as_batch(model, rows), {}
        for view in self.views:
            if view.name in out:  # encoded in the pass it shares with an earlier view
                continue
            if reuse is not None and view.name not in directions and view.of not in directions:
                out.update({key: reuse[key] for key in (view.name, f"{view.name}.layers", f"{view.name}.pooled")
                            if key in reuse})
            elif view.of:
                base, present = out[view.of]
                out[view.name] = (view.from_base(base, captured, directions), present)
            else:
                out.update(_forward_views(model, encoder, self.shared_pass[view.name], batch, captured, directions,
                                          self.interleaved, self.pooled))
        return out

    def losses_on(self, encoded: Encoded, initial_weights: Callable[[], tuple] | None = None, model=None,
                  batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """Each loss on the encoded views, unweighted; a loss no row of the batch (on any process) can take is left
        out. ``initial_weights()`` gives the current and initial parameters, ``model`` and ``batch`` a view's tokens
        and the encoder (for losses that need them)."""
        tokens = None if batch is None else (lambda name: batch.tokens[self.view_keys[name]])
        texts = None if batch is None else (lambda name: [batch.rows[self.view_keys[name][0]][row]
                                                          for row in batch.tokens[self.view_keys[name]][0]])
        if self.value_columns:
            encoded = {**encoded, **row_values(batch, self.value_columns, next(iter(encoded.values()))[0].device)}
        context = LossContext(encoded, initial_weights, tokens, model, texts)
        result = {}
        for name, loss in zip(self.names, self.losses, strict=True):
            value = apply_loss(loss, context, self.matryoshka[name])
            if value is not None:
                result[name] = value
        return result

    def forward(self, model, rows: Batch | dict[str, list], initial_weights=None) -> dict[str, torch.Tensor]:
        """Encode the views of ``rows`` and apply the losses; with views that need the gradient (FGSM), a first pass
        finds the direction that increases the loss, and those views are encoded again moved that way."""
        rows = self.as_batch(model, rows)
        if not self.gradient_views:
            return self.losses_on(self.encode(model, rows), initial_weights, model, rows)
        captured = {}
        encoded = self.encode(model, rows, captured=captured)
        loss = self.total(self.losses_on(encoded, initial_weights, model, rows))
        gradients = torch.autograd.grad(loss, [captured[name] for name in self.gradient_views], retain_graph=True,
                                        allow_unused=True)
        directions = {name: torch.zeros_like(captured[name]) if g is None else g
                      for name, g in zip(self.gradient_views, gradients, strict=True)}
        encoded = self.encode(model, rows, directions=directions, reuse=encoded)
        return self.losses_on(encoded, initial_weights, model, rows)

    def total(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """The weighted sum of the losses ``parts`` has."""
        return sum(self.weights[name] * value for name, value in parts.items())


def shared_passes(views: tuple[View, ...]) -> dict[str, list[View]]:
    """Each forward view's name -> the views encoded in its pass, itself first: the views of the same column,
    prompt, layers, layer pooler and copy with no input or token augment share one; a view with one has its own."""
    def key(view: View):
        layers = tuple(view.layers) if isinstance(view.layers, (list, tuple)) else view.layers
        return (view.column, view.prompt, layers, view.layer_pooler, view.frozen)

    def alone(view: View) -> bool:
        return view.augment is not None or view.tokens is not None

    forward = [v for v in views if not v.of]
    return {view.name: [view] if alone(view) else
            [view, *(v for v in forward if v is not view and not alone(v) and key(v) == key(view))]
            for view in forward}


def _copies(tensor: torch.Tensor, copies: int, interleaved: bool) -> torch.Tensor:
    """Each row of ``tensor`` ``copies`` times: stacked (the block repeated) or interleaved (each row repeated)."""
    return tensor.repeat_interleave(copies, dim=0) if interleaved else tensor.repeat(copies, *[1] * (tensor.dim() - 1))


def _split(tensor: torch.Tensor, copies: int, interleaved: bool) -> tuple[torch.Tensor, ...]:
    """The ``copies`` views' rows of a pass laid out by :func:`_copies`."""
    if not interleaved:
        return tensor.chunk(copies)
    return tensor.unflatten(0, (-1, copies)).unbind(1)


def _forward_views(model, encoder, views: list[View], batch: Batch, captured, directions,
                   interleaved: bool = False, pooled: set[str] = frozenset()) -> dict[str, tuple]:
    """The vectors of ``views`` (one column, prompt, layers and copy) from one forward pass: their rows repeated
    once per view (stacked, or ``interleaved`` as SimCSE's released code lays them out), each copy drawing its own
    dropout masks; a view in ``pooled`` also gives ``NAME.pooled``, its vectors before the training head."""
    first, copies = views[0], len(views)
    present, input_ids, attention_mask = batch.tokens[first.column, first.prompt]
    if present:
        if first.tokens is not None:
            input_ids, attention_mask = first.tokens(input_ids, attention_mask, encoder.tokenizer.pad_token_id or 0)
        if copies > 1:
            input_ids, attention_mask = (_copies(t, copies, interleaved) for t in (input_ids, attention_mask))
        keep = any(view.name in pooled for view in views)
        result = model(input_ids, attention_mask, prompt=first.prompt, layers=first.layers,
                       layer_pooler=first.layer_pooler, frozen=first.frozen,
                       input_augment=first.input_augment(captured, directions), pooled=keep)
        if keep:  # the second is the vectors before the head
            (vectors, before), layers = result, None
            before = _split(before, copies, interleaved)
        else:
            vectors, layers = result if first.layers else (result, None)
        vectors = _split(vectors, copies, interleaved)
        layers = [None] * copies if layers is None else _split(layers, copies, interleaved)
    else:
        empty = encoder.empty()
        vectors, layers = [empty] * copies, [empty.unsqueeze(1) if first.layers else None] * copies
        before = [empty] * copies
    out = {}
    for index, (view, view_vectors, view_layers) in enumerate(zip(views, vectors, layers, strict=True)):
        out[view.name] = (view_vectors, present)
        if view.name in pooled:
            out[f"{view.name}.pooled"] = (before[index], present)
        if view_layers is not None:
            out[f"{view.name}.layers"] = (view_layers, present)
    return out


def value_key(column: str) -> str:
    """Where a numeric data column's values sit among the encoded views (no view name has a colon)."""
    return f"column:{column}"


def row_values(batch: Batch | None, columns: list[str], device) -> Encoded:
    """Each numeric column's values as a float tensor over the batch's rows that have one, keyed by
    :func:`value_key`, so that a loss reads them aligned with its views' rows."""
    if batch is None:
        raise ValueError(f"the losses read the data column(s) {', '.join(columns)}: encode with the batch's rows")
    out = {}
    for column in columns:
        present = [i for i, value in enumerate(batch.rows[column]) if value is not None and value != ""]
        values = [float(batch.rows[column][i]) for i in present]
        out[value_key(column)] = (torch.tensor(values, dtype=torch.float32, device=device), present)
    return out


def truncated(context: LossContext, width: int) -> LossContext:
    """``context`` with every encoded vector cut to its first ``width`` components (a view's, its layers', its
    vectors before the head); the numeric columns' values as they are."""
    encoded = {name: (vectors[..., :width] if vectors.dim() > 1 else vectors, rows)
               for name, (vectors, rows) in context.encoded.items()}
    return dataclasses.replace(context, encoded=encoded)


def aligned(encoded: Encoded, names: list[str]) -> list[torch.Tensor]:
    """The views' vectors restricted to the rows all of them have (possibly none)."""
    common = sorted(set.intersection(*(set(encoded[n][1]) for n in names)))
    result = []
    for name in names:
        vectors, present = encoded[name]
        index = {row: k for k, row in enumerate(present)}
        result.append(vectors[[index[row] for row in common]])
    return result


def apply_loss(loss: Loss, context: LossContext, matryoshka: dict | None = None) -> torch.Tensor | None:
    """One loss on the encoded views (and the numeric columns it reads, after them), reduced over processes as its
    class declares; None when no row of the batch (on any process) can take a ``whole_batch`` loss. With
    ``matryoshka`` (``{dims, weights}``) the loss is the weighted sum of the loss on the vectors cut to each width
    (:func:`~cselab.train.plugins.functional.matryoshka`)."""
    if matryoshka is not None:
        values = [apply_loss(loss, truncated(context, width)) for width in matryoshka["dims"]]
        if any(value is None for value in values):  # no row at any width (the same rows at each)
            return None
        return L.matryoshka(values, matryoshka["weights"])
    names = [loss.views[role] for role in loss.roles] + [value_key(loss.views[role]) for role in loss.value_roles
                                                         if loss.views.get(role) is not None]
    views = aligned(context.encoded, names) if names else []
    views = loss.prepare(views)
    if loss.reduce == "whole_batch":
        if global_count(len(views[0]), views[0].device) == 0:
            return None
        views = [gather_rows(view)[0] for view in views]
    value = loss(views, context)
    return global_mean(value) if loss.reduce == "rows" else value  # replicated: the same on every process
