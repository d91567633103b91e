"""A method's objective: encode its views of a batch, then apply its losses.

Each loss type is a plug-in: the views it reads (by role), its parameters, and a function of
the encoded views. A loss only sees the rows where all the views it uses exist (a row without a
paraphrase adds nothing to the margin loss, and still trains InfoNCE). On several processes,
views are gathered from all of them with their gradient (:mod:`cselab.train.distributed`) and
each loss is this process's share of the batch's loss.

===============  ===========================================================================
type             what it computes (pure functions in :mod:`cselab.train.losses`)
===============  ===========================================================================
info_nce         InfoNCE of ``anchor`` against ``positive`` and the batch's other positives, plus
                 extra ``negatives`` columns (views, e.g. SSCL's ``anchor.layers``) and ``generated``
                 ones (:mod:`cselab.train.negatives`); optional IFM/BYOP ``perturbation`` with a
                 ``margin`` (number or ``dynamic``), ``multitask``; ``label_smoothing``
two_way_margin   OssCSE's max-margin on (``anchor``, ``paraphrase``, ``negation``), ``alpha``/``beta``
recall           ``gamma / 2`` times the squared distance of the weights to the initial (frozen) ones
nt_xent          SG's NT-Xent between ``anchor`` and one layer view of ``guide`` (``NAME.layers``)
                 drawn per row by a uniform sampler
sg_opt           SG-OPT's ``L_opt3`` between ``anchor`` and every layer view of ``guide``
===============  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cselab.train import losses as L
from cselab.train.augmentations import augment_input, augment_output, fgsm
from cselab.train.distributed import gather_rows, global_count, global_mean
from cselab.train.negatives import NegativeGenerator

Encoded = dict[str, tuple[torch.Tensor, list[int]]]


def _input_augment(view: dict[str, Any], name: str, captured: dict | None, directions: dict | None):
    """The word-embedding map of a view's ``augment`` (None when it has none at the input)."""
    augment = view.get("augment")
    if not augment or "of" in view:
        return None
    if augment["kind"] != "fgsm":
        return lambda embeddings: augment_input(embeddings, augment["kind"], augment.get("sigma", 0.001),
                                                augment.get("p", 0.1))
    if directions is not None and name in directions:
        return lambda embeddings: fgsm(embeddings, directions[name], augment.get("epsilon", 0.001))

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
    augment = view["augment"]
    if augment["kind"] != "fgsm":
        return augment_output(base, augment["kind"], augment.get("p", 0.1), augment.get("fraction", 0.1))
    if directions is not None and name in directions:
        return fgsm(base, directions[name], augment.get("epsilon", 0.001))
    vectors = base * 1.0  # a node of its own, for the gradient with respect to this view
    if captured is not None:
        captured[name] = vectors
    return vectors


def encode_views(model, config: dict[str, Any], rows: dict[str, list], captured: dict | None = None,
                 directions: dict | None = None, reuse: Encoded | None = None) -> Encoded:
    """Each view's vectors for the rows that have its column, and those rows' positions in the batch; a view with
    ``layers`` also gives ``NAME.layers`` (rows, layers, dim); a view ``of`` another is made from its vectors.

    ``model`` is a :class:`~cselab.train.model.TrainingEncoder`, or its DDP wrapper (whose forward keeps the
    processes' gradients in step). Views of the same column and prompt share one tokenization; each still has its
    own forward pass. A view no row has is an empty tensor (other processes may still have rows of it).

    FGSM views take two calls: the first fills ``captured`` (view -> the tensor whose loss gradient is wanted), the
    second gets those gradients as ``directions`` and re-encodes only those views, the rest coming from ``reuse``."""
    encoder = getattr(model, "module", model)
    out, tokens = {}, {}
    for name, view in config["views"].items():
        if reuse is not None and name not in directions and view.get("of") not in directions:
            out[name] = reuse[name]
            if f"{name}.layers" in reuse:
                out[f"{name}.layers"] = reuse[f"{name}.layers"]
            continue
        if "of" in view:
            base, present = out[view["of"]]
            out[name] = (_output_view(view, name, base, captured, directions), present)
            continue
        column, prompt = view["column"], view.get("prompt")
        present = [i for i, value in enumerate(rows[column]) if value]
        if not present:
            out[name] = (encoder.empty(), present)
            if view.get("layers"):
                out[f"{name}.layers"] = (encoder.empty().unsqueeze(1), present)
            continue
        if (column, prompt) not in tokens:
            tokens[column, prompt] = encoder.tokenize([rows[column][i] for i in present], prompt=prompt)
        result = model(*tokens[column, prompt], prompt=prompt, layers=view.get("layers"),
                       layer_pooler=view.get("layer_pooler"), frozen=view.get("frozen", False),
                       input_augment=_input_augment(view, name, captured, directions))
        if view.get("layers"):
            out[name], out[f"{name}.layers"] = (result[0], present), (result[1], present)
        else:
            out[name] = (result, present)
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


@dataclass(frozen=True)
class Loss:
    """A loss plug-in: its parameters (``required`` ones among them) and its function."""

    keys: set[str]
    required: set[str]
    compute: Callable[[dict[str, Any], Encoded, Callable[[], tuple]], torch.Tensor | None] = field(repr=False)


def _info_nce(params, encoded, _, generator=None):
    anchors, positives = aligned(encoded, [params["anchor"], params["positive"]])
    positives, offset = gather_rows(positives)
    columns = [gather_rows(encoded[v][0].flatten(0, -2))[0] for v in params.get("negatives", [])]
    generated = generator(anchors) if generator is not None and len(anchors) else None
    if generated is not None:
        columns.append(generated)
    negatives = torch.cat(columns) if columns else None
    if negatives is not None and not len(negatives):
        negatives = None
    if not len(anchors):
        return global_mean(anchors.sum(dim=1))
    return global_mean(L.info_nce(anchors, positives, params["temperature"], negatives, offset, reduction="none",
                                  perturbation=params.get("perturbation"), margin=params.get("margin", 0.0),
                                  multitask=params.get("multitask", False),
                                  label_smoothing=params.get("label_smoothing", 0.0)))


def _two_way_margin(params, encoded, _):
    views = aligned(encoded, [params["anchor"], params["paraphrase"], params["negation"]])
    return global_mean(L.two_way_margin(*views, params["alpha"], params["beta"], reduction="none"))


def _recall(params, _, recall_terms):
    return L.recall(*recall_terms(), params["gamma"])


def _whole_batch(*views: torch.Tensor) -> list[torch.Tensor] | None:
    """Every process's rows of ``views`` (each process then computes the whole batch's loss: the gathered rows'
    gradients sum back to their owners, and DDP's average makes it the gradient of that loss)."""
    if global_count(len(views[0]), views[0].device) == 0:
        return None
    return [gather_rows(view)[0] for view in views]


def _nt_xent(params, encoded, _):
    anchors, guides = aligned(encoded, [params["anchor"], params["guide"]])
    chosen = torch.randint(guides.shape[1], (len(guides),), device=guides.device)  # SG's uniform sampler
    views = _whole_batch(anchors, guides[torch.arange(len(guides), device=guides.device), chosen])
    return None if views is None else L.nt_xent(*views, params["temperature"])


def _sg_opt(params, encoded, _):
    views = _whole_batch(*aligned(encoded, [params["anchor"], params["guide"]]))
    return None if views is None else L.sg_opt(*views, params["temperature"])


LOSSES = {
    "info_nce": Loss({"anchor", "positive", "temperature", "negatives", "perturbation", "margin", "multitask",
                      "label_smoothing", "generated"},
                     {"anchor", "positive", "temperature"}, _info_nce),
    "two_way_margin": Loss({"anchor", "paraphrase", "negation", "alpha", "beta"},
                           {"anchor", "paraphrase", "negation", "alpha", "beta"}, _two_way_margin),
    "recall": Loss({"gamma"}, {"gamma"}, _recall),
    "nt_xent": Loss({"anchor", "guide", "temperature"}, {"anchor", "guide", "temperature"}, _nt_xent),
    "sg_opt": Loss({"anchor", "guide", "temperature"}, {"anchor", "guide", "temperature"}, _sg_opt),
}


def method_losses(config: dict[str, Any], encoded: Encoded, recall_terms: Callable[[], tuple] | None = None,
                  generators: dict[str, NegativeGenerator] | None = None) -> dict[str, torch.Tensor]:
    """Each configured loss, unweighted; a loss no row of the batch (on any process) can take is left out.
    ``recall_terms()`` gives the current and initial parameters, for ``recall``; ``generators`` (see
    :func:`build_generators`) the generated negatives of the losses that have them."""
    result = {}
    for name, params in config["losses"].items():
        extra = {"generator": generators[name]} if generators and name in generators else {}
        loss = LOSSES[params.get("type", name)].compute(params, encoded, recall_terms, **extra)
        if loss is not None:
            result[name] = loss
    return result


def build_generators(config: dict[str, Any]) -> dict[str, NegativeGenerator]:
    """One generator of negatives per loss with ``generated`` settings."""
    return {name: NegativeGenerator(**params["generated"]) for name, params in config["losses"].items()
            if params.get("generated")}


def fgsm_view_names(config: dict[str, Any]) -> list[str]:
    """The views whose augment is FGSM (they take a second pass per step)."""
    return [name for name, view in config["views"].items() if (view.get("augment") or {}).get("kind") == "fgsm"]


def batch_losses(model, config: dict[str, Any], rows: dict[str, list], recall_terms: Callable[[], tuple] | None = None,
                 generators: dict[str, NegativeGenerator] | None = None) -> dict[str, torch.Tensor]:
    """Encode the views of ``rows`` and apply the losses; with FGSM views, a first pass finds the direction that
    increases the loss, and the views are encoded again moved that way."""
    fgsm_views = fgsm_view_names(config)
    if not fgsm_views:
        return method_losses(config, encode_views(model, config, rows), recall_terms, generators)
    captured = {}
    encoded = encode_views(model, config, rows, captured=captured)
    loss = total_loss(config, method_losses(config, encoded, recall_terms, generators))
    gradients = torch.autograd.grad(loss, [captured[name] for name in fgsm_views], retain_graph=True,
                                    allow_unused=True)
    directions = {name: torch.zeros_like(captured[name]) if g is None else g
                  for name, g in zip(fgsm_views, gradients, strict=True)}
    encoded = encode_views(model, config, rows, directions=directions, reuse=encoded)
    return method_losses(config, encoded, recall_terms, generators)


def total_loss(config: dict[str, Any], parts: dict[str, torch.Tensor]) -> torch.Tensor:
    return sum(config["losses"][name].get("weight", 1.0) * value for name, value in parts.items())
