"""The logit transforms (:mod:`cselab.registry` kind ``logit_transform``):
:class:`~cselab.train.plugins.kinds.LogitTransform` modules a contrastive loss applies to its similarities before the
temperature (``losses.info_nce.transform``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from cselab.registry import REQUIRED, register, setting
from cselab.train.plugins import functional as L
from cselab.train.plugins.frozen import frozen_vectors, load_frozen
from cselab.train.plugins.kinds import LogitTransform

if TYPE_CHECKING:
    from cselab.encoders.base import Encoder

logger = logging.getLogger(__name__)

PATTERNS = ("p+", "p-", "n+", "n-", "p+n+", "p+n-", "p-n+", "p-n-")


@register("logit_transform", "perturb")
class Perturb(LogitTransform):
    """IFM's and BYOP's perturbation: the positive's similarity and/or the negatives' shifted by ``margin``."""

    @dataclass(frozen=True, kw_only=True)
    class Params(LogitTransform.Params):
        pattern: str = setting(REQUIRED, "which similarities move and which way: p+/p- the positive's, n+/n- "
                               "the negatives', or a pair (p-n+ is IFM's ascent direction, p+n- BYOP's descent)",
                               choices=PATTERNS)
        margin: float | str = setting(REQUIRED, "the shift: a number, or dynamic (BYOP-D: the "
                                      "positive's similarity over the number of negatives, per row)",
                                      words=("dynamic",))

    def forward(self, similarities, labels, reference=None):
        margin = self.params.margin
        shift = L.dynamic_margin(similarities, labels) if margin == "dynamic" else margin
        return L.perturb_logits(similarities, labels, self.params.pattern, shift)


@register("logit_transform", "guided")
class Guided(LogitTransform):
    """GISTEmbed's guided in-batch negatives (Solatorio, 2024; sentence-transformers' ``GISTEmbedLoss``): a frozen
    guide encodes the same sentences, and each column the guide scores above the row's positive, less a margin, is left
    out (a false negative: a duplicate, a paraphrase), the positive itself kept (:func:`~cselab.train.plugins.
    functional.guided_mask`). The guide is any encoder ``probe run --model`` takes (:mod:`cselab.train.plugins.frozen`);
    one of another tokenizer reads the texts with its own, cut at the training length."""

    needs_reference, model_params = True, ("guide",)
    guide: Encoder | None  # in __dict__: frozen, rebuilt from its spec, not state

    @dataclass(frozen=True, kw_only=True)
    class Params(LogitTransform.Params):
        guide: str = setting(REQUIRED, "the guide: any probe run model spec")
        guide_pooler: str | None = setting(None, "its pooler (null: the folder's own)", choices="plugin:pooler")
        margin_strategy: str = setting("absolute", "absolute: a column is left out above the positive's guide "
                                       "similarity g minus margin; relative: above g - |g| * margin",
                                       choices=("absolute", "relative"))
        margin: float = setting(0.0, "how far below the positive's guide similarity a column is still left out (0: "
                                "only those the guide scores above the positive)", min=0.0)

    def __init__(self, params: Params):
        super().__init__(params)
        self.length: int | None = None
        self.vocabulary: dict[str, int] | None = None
        self.__dict__["guide"] = None

    def prepare(self, encoder) -> None:
        """Note the training length the guide cuts a sentence at, and the model's vocabulary."""
        self.length, self.vocabulary = encoder.view.max_length, encoder.tokenizer.get_vocab()

    def reference_vectors(self, texts: list[str], device: torch.device) -> torch.Tensor:
        guide = self.guide
        if guide is None:
            self.__dict__["guide"] = guide = load_frozen(self.params.guide, self.params.guide_pooler, self.length,
                                                         device, "guide")
            tokenizer = getattr(guide, "tokenizer", None)
            if self.vocabulary is not None and (tokenizer is None or tokenizer.get_vocab() != self.vocabulary):
                logger.warning("guide %s: its tokenizer is not the model's; it reads each sentence's text with its "
                               "own, cut at %s of its tokens", self.params.guide, self.length)
        return frozen_vectors(guide, texts, device)

    def forward(self, similarities, labels, reference=None):
        if reference is None:
            raise ValueError("the guided transform masks by the guide's similarities; none were given")
        return L.guided_mask(similarities, labels, reference, self.params.margin, self.params.margin_strategy)
