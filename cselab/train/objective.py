"""A method's objective, built once from its resolved config: its views, its loss modules and its weight hook.

:class:`Objective` encodes a batch's views and applies the losses; nothing in a step looks up a plug-in or reads
the config. A loss only sees the rows where all the views it reads exist. On several processes, views are gathered
from all of them with their gradient (:mod:`cselab.train.distributed`) and each loss is reduced as its class
declares (``rows``: this process's share of the mean over every process's rows; ``whole_batch``: views gathered
first; ``replicated``: the same number everywhere).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from cselab.registry import build, build_plugin
from cselab.train.batches import Batch, Collator, Key, texts_of
from cselab.train.distributed import gather_rows, global_count, global_mean
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import Augment, Loss, LossContext, NegativeSource, TokenAugment
from cselab.train.config.method import MethodConfig
from cselab.encoders.encoding import MASK_PLACEHOLDER
from cselab.encoders.transformer import is_sharded
from cselab.train.config.sections import EncoderConfig, ViewConfig
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
        augment = self.augment
        if augment is None:
            return None
        if not self.needs_gradient:
            return augment
        if directions is not None and self.name in directions:
            return lambda embeddings: augment(embeddings, directions[self.name])

        def capture(embeddings):
            if not embeddings.requires_grad:  # frozen embeddings: the gradient is still wanted here
                embeddings = embeddings.detach().requires_grad_(True)
            if captured is not None:
                captured[self.name] = embeddings
            return embeddings
        return capture

    def from_base(self, base: torch.Tensor, captured: dict | None, directions: dict | None) -> torch.Tensor:
        """This view's vectors made from its base view's through the output ``augment``."""
        assert self.augment is not None  # a view of another has an augment (the method's schema)
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

    def __init__(self, method: MethodConfig, merge: bool = False):
        super().__init__()
        self.method = method.name
        self.views = tuple(View.from_config(name, view) for name, view in method.views.items())
        self.augments = nn.ModuleDict({view.name: view.augment for view in self.views if view.augment is not None})
        # the (column, prompt) of each view that runs the encoder, each once: one tokenisation per batch
        self.forward_keys: list[Key] = list(dict.fromkeys((v.column, v.prompt) for v in self.views if not v.of))
        self.view_keys = {v.name: (v.column, v.prompt) for v in self.views if not v.of}  # a view's tokenisation
        self.shared_pass = shared_passes(self.views)
        # the columns whose texts a text plug-in changes before they are tokenised (the method's texts)
        self.texts = {column: build_plugin("text", spec) for column, spec in (method.texts or {}).items()}
        # the passes run as one (training.merge_passes): each pass's first view -> the first views of its group
        groups = merged_passes(self.views, method.encoder) if merge else [[name] for name in dict.fromkeys(
            passed[0].name for passed in self.shared_pass.values())]
        self.merged = {lead: group for group in groups for lead in group}
        self.interleaved = method.training.view_rows == "interleaved"
        self.names = list(method.losses)
        self.weights = {name: params["weight"] for name, params in method.losses.items()}
        self.matryoshka = {name: params.get("matryoshka") for name, params in method.losses.items()}
        self.value_columns = value_columns(method.losses)  # the numeric columns the losses read (a score)
        losses: list[Loss] = [build(loss_plugin(name, params), params) for name, params in method.losses.items()]
        self.losses = nn.ModuleList(losses)
        self.weight_hook = build_plugin("weight_hook", method.hooks.get("weights"))
        self.gradient_views = [view.name for view in self.views if view.needs_gradient]
        self.needs_initial_weights = any(loss.needs_initial_weights for loss in losses)
        # views whose vectors before the training head a loss reads too (as NAME.pooled)
        self.pooled = {name for loss in losses if loss.needs_pooled for value in loss.views.values()
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
        return rows if isinstance(rows, Batch) else Collator(getattr(model, "module", model), self.forward_keys,
                                                             self.texts)(rows)

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
            if reuse is not None and directions is not None and view.name not in directions \
                    and view.of not in directions:
                out.update({key: reuse[key] for key in (view.name, f"{view.name}.layers", f"{view.name}.pooled")
                            if key in reuse})
            elif view.of:
                base, present = out[view.of]
                out[view.name] = (view.from_base(base, captured, directions), present)
            else:
                passes = [self.shared_pass[lead] for lead in self.merged[view.name]]
                out.update(_forward_passes(model, encoder, passes, batch, captured, directions, self.interleaved,
                                           self.pooled))
        return out

    def losses_on(self, encoded: Encoded, initial_weights: Callable[[], tuple] | None = None, model=None,
                  batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """Each loss on the encoded views, unweighted; a loss no row of the batch (on any process) can take is left
        out. ``initial_weights()`` gives the current and initial parameters, ``model`` and ``batch`` a view's tokens
        and the encoder (for losses that need them)."""
        tokens = None if batch is None else (lambda name: batch.tokens[self.view_keys[name]])
        texts = None if batch is None else (lambda name: texts_of(batch.rows, self.view_keys[name][0],
                                                                  batch.tokens[self.view_keys[name]][0], self.texts))
        if self.value_columns:
            encoded = {**encoded, **row_values(batch, self.value_columns, next(iter(encoded.values()))[0].device)}
        context = LossContext(encoded, initial_weights, tokens, model, texts)
        result = {}
        for name, loss in zip(self.names, self.losses, strict=True):
            value = apply_loss(cast(Loss, loss), context, self.matryoshka[name])  # the ModuleList of Loss modules
            if value is not None:
                result[name] = value
        return result

    def forward(self, model, rows: Batch | dict[str, list], initial_weights=None) -> dict[str, torch.Tensor]:
        """Encode the views of ``rows`` and apply the losses; with views that need the gradient (FGSM), a first pass
        finds the direction that increases the loss, and those views are encoded again moved that way."""
        rows = self.as_batch(model, rows)
        if not self.gradient_views:
            return self.losses_on(self.encode(model, rows), initial_weights, model, rows)
        captured: dict[str, torch.Tensor] = {}
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


def merged_passes(views: tuple[View, ...], encoder: EncoderConfig) -> list[list[str]]:
    """The forward passes (each named by its first view, :func:`shared_passes`) grouped into those that can run as
    one (``training.merge_passes``): passes without an augment, of the same copy, layers and layer pooler, whose
    templates pool alike (the mask token on the same side of the sentence for the mask pooler; the same template
    where denoising or ``pool_tokens`` read the template itself). Their vectors are those of separate passes, each
    row's attention reading its own tokens only."""
    shared = shared_passes(views)
    leads: list[View] = []
    seen: set[str] = set()
    for view in views:
        if not view.of and view.name not in seen:
            leads.append(view)
            seen.update(v.name for v in shared[view.name])

    def key(view: View):
        if view.augment is not None or view.tokens is not None:
            return ("alone", view.name)
        prompt = view.prompt if view.prompt is not None else encoder.prompt
        if encoder.denoise or encoder.pool_tokens != "all":
            template: Any = prompt
        elif "mask" in (encoder.pooler, view.layer_pooler) and prompt:
            template = prompt.find(MASK_PLACEHOLDER) > prompt.find("{}")
        else:
            template = None
        layers = tuple(view.layers) if isinstance(view.layers, (list, tuple)) else view.layers
        return (view.frozen, layers, view.layer_pooler, template)

    groups: dict[Any, list[str]] = {}
    for view in leads:
        groups.setdefault(key(view), []).append(view.name)
    return list(groups.values())


def _stacked(blocks: list[tuple[torch.Tensor, torch.Tensor]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks of right-padded rows (ids, mask) as one batch, each padded to the widest."""
    width = max(ids.shape[1] for ids, _ in blocks)
    pad = torch.nn.functional.pad
    return (torch.cat([pad(ids, (0, width - ids.shape[1]), value=pad_id) for ids, _ in blocks]),
            torch.cat([pad(mask, (0, width - mask.shape[1]), value=0) for _, mask in blocks]))


def _forward_passes(model, encoder, passes: list[list[View]], batch: Batch, captured, directions,
                    interleaved: bool = False, pooled: Collection[str] = frozenset()) -> dict[str, tuple]:
    """The vectors of the views of ``passes`` from one forward pass. Each pass's views (one column, prompt, layers and
    copy) have their rows repeated once per view (stacked, or ``interleaved`` as SimCSE's released code lays them
    out), each copy drawing its own dropout masks; several passes (:func:`merged_passes`) have their rows stacked,
    padded to the longest. A view in ``pooled`` also gives ``NAME.pooled``, its vectors before the training head."""
    first, pad_id = passes[0][0], encoder.tokenizer.pad_token_id or 0
    device = next(encoder.backbone.parameters()).device
    blocks = []
    for views in passes:
        present, input_ids, attention_mask = batch.tokens[views[0].column, views[0].prompt]
        if present and input_ids is not None and attention_mask is not None:  # (rows present have their tokens)
            if views[0].tokens is not None:
                input_ids, attention_mask = views[0].tokens(input_ids, attention_mask, pad_id)
            input_ids, attention_mask = (t.to(device, non_blocking=True) for t in (input_ids, attention_mask))
            if len(views) > 1:
                input_ids, attention_mask = (_copies(t, len(views), interleaved) for t in (input_ids, attention_mask))
        blocks.append((views, present, input_ids, attention_mask))
    live = [(ids, mask) for _, present, ids, mask in blocks if present and ids is not None and mask is not None]
    if live:
        keep = any(view.name in pooled for views in passes for view in views)
        input_ids, attention_mask = live[0] if len(live) == 1 else _stacked(live, pad_id)
        result = model(input_ids, attention_mask, prompt=first.prompt, layers=first.layers,
                       layer_pooler=first.layer_pooler, frozen=first.frozen,
                       input_augment=first.input_augment(captured, directions), pooled=keep)
        vectors, layers, before = _outputs(result, keep, bool(first.layers))
        sizes = [len(ids) for ids, _ in live]
        vector_parts = _parts(vectors, sizes)
        layer_parts, before_parts = ([None] * len(sizes) if tensor is None else _parts(tensor, sizes)
                                     for tensor in (layers, before))
    out, number = {}, 0
    for views, present, _, _ in blocks:
        if present:
            out.update(_views_of(views, present, vector_parts[number], layer_parts[number], before_parts[number],
                                 interleaved, pooled))
            number += 1
        else:
            nothing = _empty(encoder, views[0]) if live else _no_rows(model, encoder, passes, captured, directions,
                                                                       pooled)
            out.update(_views_of(views, present, *nothing, interleaved, pooled))
    return out


def _no_rows(model, encoder, passes: list[list[View]], captured, directions, pooled: Collection[str]
             ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The vectors, layers and vectors before the head of a pass no row of this process has. With the encoder sharded
    (FSDP2) every pass gathers the weights from all the processes, so this process still takes it, on one placeholder
    sentence, and keeps none of its rows (the pass stays in the graph, its gradient zero); otherwise no pass."""
    first = passes[0][0]
    if first.frozen or not is_sharded(encoder):  # (the frozen copy is not sharded)
        return _empty(encoder, first)
    keep = any(view.name in pooled for views in passes for view in views)
    input_ids, attention_mask = encoder.tokenize(["."], first.prompt)
    result = model(input_ids, attention_mask, prompt=first.prompt, layers=first.layers,
                   layer_pooler=first.layer_pooler, frozen=False,
                   input_augment=first.input_augment(captured, directions), pooled=keep)
    vectors, layers, before = _outputs(result, keep, bool(first.layers))
    return vectors[:0], None if layers is None else layers[:0], vectors[:0] if before is None else before[:0]


def _outputs(result, keep: bool, layered: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The vectors, layers and vectors before the head of one forward pass's ``result``: with ``keep`` (the vectors
    before the head asked for) the second of a pair, with ``layered`` (a view's ``layers``) the layers."""
    if keep:
        vectors, before = result
        return vectors, None, before
    vectors, layers = result if layered else (result, None)
    return vectors, layers, None


def _parts(tensor: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """``tensor``'s rows cut into blocks of ``sizes`` rows (as it is for one block)."""
    return [tensor] if len(sizes) == 1 else list(tensor.split(sizes))


def _empty(encoder, first: View) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The vectors, layers and vectors before the head of a pass no row has."""
    empty = encoder.empty()
    return empty, empty.unsqueeze(1) if first.layers else None, empty


def _views_of(views: list[View], present: list[int], vectors: torch.Tensor, layers: torch.Tensor | None,
              before: torch.Tensor | None, interleaved: bool, pooled: Collection[str]) -> dict[str, tuple]:
    """Each view of one pass: its rows of ``vectors`` (and ``layers``, ``before``: the vectors before the head), laid
    out by :func:`_copies` (a pass no row has: the same empty tensors for each)."""
    copies = len(views)
    split = (lambda tensor: _split(tensor, copies, interleaved)) if present else (lambda tensor: [tensor] * copies)
    layer_copies = [None] * copies if layers is None else split(layers)
    before_copies = [None] * copies if before is None else split(before)
    out = {}
    for view, view_vectors, view_layers, view_before in zip(views, split(vectors), layer_copies, before_copies,
                                                            strict=True):
        out[view.name] = (view_vectors, present)
        if view.name in pooled:
            out[f"{view.name}.pooled"] = (view_before, present)
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
        out[value_key(column)] = (torch.tensor(values, dtype=torch.float32).to(device, non_blocking=True), present)
    return out


def truncated(context: LossContext, width: int) -> LossContext:
    """``context`` with every encoded vector cut to its first ``width`` components (a view's, its layers', its
    vectors before the head); the numeric columns' values as they are."""
    encoded = {name: (vectors[..., :width] if vectors.dim() > 1 else vectors, rows)
               for name, (vectors, rows) in context.encoded.items()}
    return dataclasses.replace(context, encoded=encoded)


def aligned(encoded: Encoded, names: list[str]) -> list[torch.Tensor]:
    """The views' vectors restricted to the rows all of them have (possibly none): a view that has just those rows as
    it is, the others' rows picked by an index copied to their device without a wait."""
    common = sorted(set.intersection(*(set(encoded[n][1]) for n in names)))
    result = []
    for name in names:
        vectors, present = encoded[name]
        if list(present) == common:
            result.append(vectors)
            continue
        index = {row: k for k, row in enumerate(present)}
        picked = torch.tensor([index[row] for row in common], dtype=torch.long)
        result.append(vectors[picked.to(vectors.device, non_blocking=True)])
    return result


def apply_loss(loss: Loss, context: LossContext, matryoshka: dict | None = None) -> torch.Tensor | None:
    """One loss on the encoded views (and the numeric columns it reads, after them), reduced over processes as its
    class declares; None when no row of the batch (on any process) can take a ``whole_batch`` loss. With
    ``matryoshka`` (``{dims, weights}``) the loss is the weighted sum of the loss on the vectors cut to each width
    (:func:`~cselab.train.plugins.functional.matryoshka`)."""
    if matryoshka is not None:
        values = [apply_loss(loss, truncated(context, width)) for width in matryoshka["dims"]]
        found = [value for value in values if value is not None]
        if len(found) < len(values):  # no row at any width (the same rows at each)
            return None
        return L.matryoshka(found, matryoshka["weights"])
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
