"""RankCSE's losses (Liu et al., 2023; perceptiveshawty/RankCSE): the consistency of the two dropout views' ranking
of the batch (``rank_consistency``) and the distillation of one or two teachers' rankings (``rank_distillation``,
ListMLE or ListNet). Both read each row's similarity list: its cosine to every positive of the batch (gathered from
every process), over a temperature.

The teachers are frozen encoders given by spec (:mod:`cselab.train.plugins.frozen`); their specs and weights'
sha256 are part of the run's identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from cselab.errors import ConfigError
from cselab.registry import REQUIRED, register, schema_of, setting
from cselab.train.plugins import functional as L
from cselab.train.plugins.frozen import aligned_texts, frozen_vectors, load_frozen
from cselab.train.plugins.kinds import Loss, LossContext
from cselab.train.distributed import gather_rows

if TYPE_CHECKING:
    from cselab.encoders.base import Encoder


def student_temperature() -> Any:
    """The student's temperature, a setting of both losses."""
    return setting(0.05, "the student's temperature over its cosine similarities (InfoNCE's)", min=0.0,
                   above=True)


def similarity_lists(rows: torch.Tensor, columns: torch.Tensor, temperature: float) -> tuple[torch.Tensor, int]:
    """Each row's cosine to every column of the batch (``columns`` gathered from every process) over
    ``temperature``, and where this process's own columns start."""
    gathered, offset = gather_rows(columns)
    return L.cosine_matrix(rows.float(), gathered.float()) / temperature, offset


@register("loss", "rank_consistency")
class RankConsistency(Loss):
    """The two views' similarity lists kept consistent: row i of ``anchor`` against every ``positive``, and row i of
    ``positive`` against every ``anchor`` (:func:`~cselab.train.plugins.functional.jensen_shannon`, or
    :func:`~cselab.train.plugins.functional.released_rank_consistency`)."""

    roles = ("anchor", "positive")

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        temperature: float = student_temperature()
        form: str = setting("jsd", "jsd: the Jensen-Shannon divergence of the two lists' softmax (the paper); "
                            "released: what the released Divergence computes, minus their mean entropy (--profile "
                            "official)", choices=("jsd", "released"))

    def forward(self, views, context: LossContext):
        anchors, positives = views
        first, _ = similarity_lists(anchors, positives, self.params.temperature)
        second, _ = similarity_lists(positives, anchors, self.params.temperature)
        divergence = L.jensen_shannon if self.params.form == "jsd" else L.released_rank_consistency
        return divergence(first, second)


@register("loss", "rank_distillation")
class RankDistillation(Loss):
    """The student's similarity lists (``anchor`` against every ``positive``) ranked as its teachers rank the same
    sentences: their lists, ``alpha`` times the first's plus ``1 - alpha`` times the second's, distilled by ListMLE
    (:func:`~cselab.train.plugins.functional.list_mle`) or ListNet
    (:func:`~cselab.train.plugins.functional.list_net`)."""

    roles, needs_tokens, model_params = ("anchor", "positive"), True, ("teacher", "second_teacher")
    teachers: list[Encoder]  # in __dict__: not submodules

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        teacher: str = setting(REQUIRED, "the first teacher: any probe run model spec (RankCSE: "
                               "voidism/diffcse-bert-base-uncased-sts)")
        teacher_pooler: str | None = setting(None, "its pooler (null: the folder's own)",
                                             choices="plugin:pooler")
        second_teacher: str | None = setting(None, "a second teacher (null: one)")
        second_teacher_pooler: str | None = setting(None, "its pooler (null: the folder's own)",
                                                    choices="plugin:pooler")
        alpha: float = setting(0.33, "the first teacher's share of the teachers' lists (alpha_)", min=0.0,
                               max=1.0)
        teacher_temperature: float = setting(0.05, "the teachers' temperature over their cosines (tau2)",
                                             min=0.0, above=True)
        temperature: float = student_temperature()
        form: str = setting("listmle", "listmle (Plackett-Luce likelihood of the teachers' ranking) or listnet "
                            "(cross-entropy of the top-one distributions, each row's positive left out)",
                            choices=("listmle", "listnet"))

        def rules(self) -> None:
            if self.second_teacher is None and self.alpha != schema_of(type(self))["alpha"].default:
                raise ConfigError(f"{self.at('alpha')}: weighs two teachers' lists, and there is no second_teacher: "
                                  "with one teacher it would change nothing; leave it at its default")
            if self.second_teacher is None and self.second_teacher_pooler is not None:
                raise ConfigError(f"{self.at('second_teacher_pooler')}: set, and there is no second_teacher; one "
                                  f"teacher is --set {self.at('second_teacher')}=null --set "
                                  f"{self.at('second_teacher_pooler')}=null")

    def __init__(self, params: Params, **views):
        super().__init__(params, **views)
        self.specs = [(params.teacher, params.teacher_pooler),
                      *([(params.second_teacher, params.second_teacher_pooler)] if params.second_teacher else [])]
        self.length: int | None = None  # the training length, from auxiliary()
        self.__dict__["teachers"] = []  # loaded at the first batch: frozen, rebuilt from their specs, not state

    def auxiliary(self, encoder) -> None:
        """Note the training length the teachers cut a sentence at: nothing to train."""
        self.length = encoder.view.max_length
        return None

    def teacher_lists(self, anchors: list[str], positives: list[str], device: torch.device) -> torch.Tensor:
        """The teachers' similarity lists: each of this process's ``anchors`` texts against every process's
        ``positives`` texts (their vectors gathered), weighed by ``alpha``."""
        if not self.teachers:
            self.__dict__["teachers"] = [load_frozen(spec, pooler, self.length, device, "teacher")
                                          for spec, pooler in self.specs]
        lists = []
        for teacher in self.teachers:
            rows, columns = (frozen_vectors(teacher, texts, device) for texts in (anchors, positives))
            lists.append(similarity_lists(rows, columns, self.params.teacher_temperature)[0])
        if len(lists) == 1:
            return lists[0]
        return self.params.alpha * lists[0] + (1.0 - self.params.alpha) * lists[1]

    def forward(self, views, context: LossContext):
        anchors, positives = views
        student, offset = similarity_lists(anchors, positives, self.params.temperature)
        anchor_texts, positive_texts = self.texts(context)
        teacher = self.teacher_lists(anchor_texts, positive_texts, anchors.device)
        if self.params.form == "listmle":
            return L.list_mle(student, teacher)
        return L.list_net(student, teacher, torch.arange(len(anchors), device=anchors.device) + offset)

    def texts(self, context: LossContext) -> list[list[str]]:
        """The anchor's and the positive's texts of the rows that have both views, in their order."""
        return aligned_texts(context, [self.views["anchor"], self.views["positive"]], "loss rank_distillation")
