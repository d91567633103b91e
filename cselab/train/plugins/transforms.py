"""The logit transforms (:mod:`cselab.registry` kind ``logit_transform``):
:class:`~cselab.train.plugins.kinds.LogitTransform` modules a contrastive loss applies to its similarities before the
temperature (``losses.info_nce.transform``)."""

from __future__ import annotations

from cselab.registry import Param, register
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import LogitTransform

PATTERNS = ("p+", "p-", "n+", "n-", "p+n+", "p+n-", "p-n+", "p-n-")


@register("logit_transform", "perturb", params={
    "pattern": Param(str, help="which similarities move and which way: p+/p- the positive's, n+/n- the negatives', "
                     "or a pair (p-n+ is IFM's ascent direction, p+n- BYOP's descent)", choices=PATTERNS),
    "margin": Param((float, str), help="the shift: a number, or dynamic (BYOP-D: the positive's similarity over "
                    "the number of negatives, per row)", words=("dynamic",))})
class Perturb(LogitTransform):
    """IFM's and BYOP's perturbation: the positive's similarity and/or the negatives' shifted by ``margin``."""

    def __init__(self, pattern: str, margin: float | str):
        super().__init__()
        self.pattern, self.margin = pattern, margin

    def forward(self, similarities, labels):
        shift = L.dynamic_margin(similarities, labels) if self.margin == "dynamic" else self.margin
        return L.perturb_logits(similarities, labels, self.pattern, shift)
