"""The logit transforms (:mod:`cselab.registry` kind ``logit_transform``):
:class:`~cselab.train.plugins.kinds.LogitTransform` modules a contrastive loss applies to its similarities before the
temperature (``losses.info_nce.transform``)."""

from __future__ import annotations

from dataclasses import dataclass

from cselab.registry import REQUIRED, register, setting
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import LogitTransform

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

    def forward(self, similarities, labels):
        margin = self.params.margin
        shift = L.dynamic_margin(similarities, labels) if margin == "dynamic" else margin
        return L.perturb_logits(similarities, labels, self.params.pattern, shift)
