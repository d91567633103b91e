"""The loss plug-ins (:mod:`cselab.registry` kind ``loss``): each reads views by role and wraps a pure function
of :mod:`cselab.train.losses`.

A loss sees only the rows where all the views it reads exist (a row without a paraphrase adds nothing to
the margin loss, and still trains InfoNCE). Its function gets those views (after ``prepare``, and gathered
from every process for ``reduce="whole_batch"``), its validated parameters and a :class:`LossContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cselab.registry import Param, register
from cselab.train import losses as L
from cselab.train.distributed import gather_rows
from cselab.train.plugins.negatives import NegativeGenerator

PERTURBATIONS = ("p+", "p-", "n+", "n-", "p+n+", "p+n-", "p-n+", "p-n-")


@dataclass
class LossContext:
    """What a loss may read beside its views: every encoded view (``encoded``: name -> (vectors, rows)), its own
    state (``state``, from the plug-in's ``make_state``) and ``initial_weights()`` (current and initial
    parameters, for plug-ins that declare ``needs=("initial_weights",)``)."""

    encoded: dict[str, tuple[torch.Tensor, list[int]]]
    state: Any = None
    initial_weights: Callable[[], tuple] | None = None


def _generator(params: dict[str, Any]) -> NegativeGenerator | None:
    generated = params.get("generated")
    return NegativeGenerator(**generated) if generated else None


@register("loss", "info_nce", roles=("anchor", "positive"), view_lists=("negatives",), make_state=_generator,
          params={
              "temperature": Param(float, 0.05, "tau", min=0.0, above=True),
              "perturbation": Param(str, None, "IFM/BYOP's shift of the similarities", choices=PERTURBATIONS,
                                    nullable=True),
              "margin": Param((float, str), 0.0, "the shift: a number or dynamic (BYOP-D)", words=("dynamic",)),
              "multitask": Param(bool, False, "average the perturbed loss with the plain one"),
              "label_smoothing": Param(float, 0.0, "target mass spread over all columns", min=0.0, max=1.0,
                                       below=True),
              "generated": Param(dict, None, "generated negatives", nullable=True, plugin="negatives")})
def info_nce(views, params, context: LossContext):
    """InfoNCE of ``anchor`` against ``positive`` and the batch's other positives, plus extra ``negatives``
    columns (views, e.g. SSCL's ``anchor.layers``) and ``generated`` ones; optional IFM/BYOP ``perturbation``
    with a ``margin`` (a number or ``dynamic``), ``multitask``; ``label_smoothing``."""
    anchors, positives = views
    positives, offset = gather_rows(positives)
    columns = [gather_rows(context.encoded[v][0].flatten(0, -2))[0] for v in params["negatives"]]
    generated = context.state(anchors) if context.state is not None and len(anchors) else None
    if generated is not None:
        columns.append(generated)
    negatives = torch.cat(columns) if columns else None
    if negatives is not None and not len(negatives):
        negatives = None
    if not len(anchors):
        return anchors.sum(dim=1)
    return L.info_nce(anchors, positives, params["temperature"], negatives, offset, reduction="none",
                      perturbation=params.get("perturbation"), margin=params["margin"],
                      multitask=params["multitask"], label_smoothing=params["label_smoothing"])


@register("loss", "two_way_margin", roles=("anchor", "paraphrase", "negation"),
          params={"alpha": Param(float, 0.05, "the paraphrase beats the negation by at least alpha"),
                  "beta": Param(float, 0.2, "... and by at most beta")})
def two_way_margin(views, params, context: LossContext):
    """OssCSE's max-margin on (``anchor``, ``paraphrase``, ``negation``)."""
    return L.two_way_margin(*views, params["alpha"], params["beta"], reduction="none")


@register("loss", "recall", needs=("initial_weights",), reduce="replicated",
          params={"gamma": Param(float, 2e-3, "strength", min=0.0)})
def recall(views, params, context: LossContext):
    """``gamma / 2`` times the squared distance of the weights to the initial (frozen) ones."""
    return L.recall(*context.initial_weights(), params["gamma"])


def _one_layer_per_row(views, params):
    anchors, guides = views
    chosen = torch.randint(guides.shape[1], (len(guides),), device=guides.device)  # SG's uniform sampler
    return [anchors, guides[torch.arange(len(guides), device=guides.device), chosen]]


@register("loss", "nt_xent", roles=("anchor", "guide"), reduce="whole_batch", prepare=_one_layer_per_row,
          params={"temperature": Param(float, 0.01, "tau", min=0.0, above=True)})
def nt_xent(views, params, context: LossContext):
    """SG's NT-Xent between ``anchor`` and one layer view of ``guide`` (``NAME.layers``) drawn per row by a
    uniform sampler."""
    return L.nt_xent(*views, params["temperature"])


@register("loss", "sg_opt", roles=("anchor", "guide"), reduce="whole_batch",
          params={"temperature": Param(float, 0.01, "tau", min=0.0, above=True)})
def sg_opt(views, params, context: LossContext):
    """SG-OPT's ``L_opt3`` between ``anchor`` and every layer view of ``guide``."""
    return L.sg_opt(*views, params["temperature"])
