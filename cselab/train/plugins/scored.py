"""The losses of scored pairs (kind ``loss``): rows of two texts and a gold similarity score (``text, text_pair,
score``; e.g. the ``stsb-train`` table), each read as two views and the numeric column ``score``.

- ``cosent``: CoSENT's ranking of the pairs' cosines by their scores (bojone/CoSENT; sentence-transformers'
  ``CoSENTLoss``);
- ``angle``: the same ranking of AnglE's angle score (SeanLee97/AnglE ``angle_loss``; ``AnglELoss``);
- ``angle_in_batch``: AnglE's in-batch negative objective on scored pairs, as released.

Each ranks pairs across the batch, so it is a ``whole_batch`` loss: on several processes the rows of every process
are gathered first, and it is one number.
"""

from __future__ import annotations

from dataclasses import dataclass

from cselab.registry import register, setting
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import Loss, LossContext


class _ScoredPairs(Loss):
    """A loss of (``anchor``, ``other``) views and each row's ``score``."""

    roles, value_roles, reduce = ("anchor", "other"), ("score",), "whole_batch"
    function = staticmethod(L.cosent)

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        scale: float = setting(20.0, "the similarities' factor (an inverse temperature)", min=0.0, above=True)

    def forward(self, views, context: LossContext):
        anchors, others, scores = views
        return self.function(anchors, others, scores, self.params.scale)


@register("loss", "cosent")
class CoSENT(_ScoredPairs):
    """CoSENT: ``log(1 + sum_{score_i > score_j} e^{scale (cos_j - cos_i)})`` over the batch's pairs."""


@register("loss", "angle")
class AnglE(_ScoredPairs):
    """AnglE's angle objective: CoSENT's ranking of the angle score of each pair."""

    function = staticmethod(L.angle)


@register("loss", "angle_in_batch")
class AnglEInBatch(_ScoredPairs):
    """AnglE's in-batch negatives over the pairs' 2N vectors, a pair's partner the target where its score's integer
    part is not 0 (the released rule)."""

    function = staticmethod(L.angle_in_batch)
