"""sentence-transformers' losses in a cselab method (kind ``loss``): ``st_single``, ``st_pair`` and ``st_triplet``
hand one, two or three views' vectors (and, with ``label``, a numeric column) to the ``compute_loss_from_embeddings``
of a loss class of ``sentence_transformers.losses``, built with ``args``::

    losses:
      mnrl: {kind: st_pair, loss: MultipleNegativesRankingLoss, args: {scale: 20.0}, anchor: anchor, other: other}
      cosent: {kind: st_pair, loss: CoSENTLoss, anchor: anchor, other: other, label: score}

Those 17 losses (ST 6.2) compute from vectors alone; the others read the model or its tokens and are refused when
the method is read, as are ``args`` their class does not take. Each such loss scores the whole batch (in-batch
negatives, rankings), so it is a ``whole_batch`` loss: on several processes the rows are gathered first. The other
way round, cselab's losses inside sentence-transformers' trainer, is :mod:`cselab.integrations.sentence_transformers`.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from cselab.errors import ConfigError
from cselab.files import clipped
from cselab.registry import REQUIRED, register, setting
from cselab.train.plugins.kinds import Loss, LossContext


def st_loss_class(name: str, where: str) -> type:
    """The class ``name`` of sentence-transformers' losses, or a ConfigError naming what it could be."""
    try:
        module = importlib.import_module("sentence_transformers.sentence_transformer.losses")
    except ImportError:  # sentence-transformers before 6
        module = importlib.import_module("sentence_transformers.losses")
    known = sorted(name for name, c in vars(module).items()
                   if inspect.isclass(c) and hasattr(c, "compute_loss_from_embeddings"))
    cls = getattr(module, name, None)
    if not inspect.isclass(cls) or not hasattr(cls, "compute_loss_from_embeddings"):
        raise ConfigError(f"{where}.loss: {name!r} is not a loss of sentence-transformers that computes from vectors; "
                          f"choose one of {', '.join(known)}")
    return cls


def build_st_loss(name: str, args: dict[str, Any], where: str) -> Any:
    """The loss ``name`` built with ``args`` and no model (it reads vectors only)."""
    cls = st_loss_class(name, where)
    accepted = [p for p in inspect.signature(cls).parameters if p != "model"]
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise ConfigError(f"{where}.args.{unknown[0]}: {name} takes no such argument; it takes "
                          f"{', '.join(accepted)}")
    try:
        return cls(None, **args)
    except Exception as err:  # a value of the wrong type, a loss that reads its model when it is built
        raise ConfigError(f"{where}: {name}({', '.join(f'{k}={v!r}' for k, v in args.items())}) cannot be built "
                          f"without a model ({type(err).__name__}: {clipped(err)})") from None


class _SentenceTransformersLoss(Loss):
    """A loss of sentence-transformers on the vectors of this class's ``roles`` and, with ``label``, a number per
    row."""

    value_roles = optional_values = ("label",)
    reduce = "whole_batch"

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        loss: str = setting(REQUIRED, "a loss class of sentence_transformers.losses that computes from vectors "
                            "(compute_loss_from_embeddings), e.g. MultipleNegativesRankingLoss")
        args: dict[str, Any] = setting({}, "its constructor's keyword arguments, model aside (e.g. scale: "
                                       "20.0)")

        def rules(self) -> None:
            """Built once, and run on four random rows per view given beside it, so that a loss that needs labels
            without ``label`` (or the other way round) is refused when the method is read."""
            loss = build_st_loss(self.loss, self.args, self.where or self.loss)
            if self.beside is None:  # built by hand: its views are not known here
                return
            generator = torch.Generator().manual_seed(0)
            views = [key for key in self.beside if key != "label"]
            vectors = [torch.randn(4, 8, generator=generator) for _ in views]
            labels = torch.tensor([1.0, 0.0, 1.0, 0.0]) if self.beside.get("label") is not None else None
            try:
                loss.compute_loss_from_embeddings(vectors, labels)
            except Exception as err:
                wants = "reads labels: name their column with label" if labels is None else "failed"
                raise ConfigError(f"{self.where or self.loss}: {self.loss} on {len(views)} view(s) {wants} "
                                  f"({type(err).__name__}: {clipped(err)})") from None

    def __init__(self, params: Params, **views):
        super().__init__(params, **views)
        self.st_loss: Any = build_st_loss(params.loss, params.args, params.loss)

    def forward(self, views, context: LossContext):
        labels = views[len(self.roles)] if len(views) > len(self.roles) else None
        return self.st_loss.compute_loss_from_embeddings(list(views[:len(self.roles)]), labels)


@register("loss", "st_single")
class STSingle(_SentenceTransformersLoss):
    """A sentence-transformers loss of one view (and labels: the batch-triplet losses)."""

    roles = ("anchor",)


@register("loss", "st_pair")
class STPair(_SentenceTransformersLoss):
    """A sentence-transformers loss of two views (MultipleNegativesRankingLoss, CoSENTLoss, ContrastiveLoss ...)."""

    roles = ("anchor", "other")


@register("loss", "st_triplet")
class STTriplet(_SentenceTransformersLoss):
    """A sentence-transformers loss of three views (TripletLoss, MultipleNegativesRankingLoss with a hard
    negative ...)."""

    roles = ("anchor", "positive", "negative")
