"""The loss plug-ins (:mod:`cselab.registry` kind ``loss``): :class:`~cselab.train.plugins.kinds.Loss` modules that read
views by role and wrap a pure function of :mod:`cselab.train.plugins.functional`.

A loss sees only the rows where all the views it reads exist (a row without a paraphrase adds nothing to
the margin loss, and still trains InfoNCE). Its ``forward`` gets those views (after ``prepare``, and gathered
from every process for ``reduce="whole_batch"``) and a :class:`~cselab.train.plugins.kinds.LossContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import torch

from cselab.errors import ConfigError
from cselab.registry import get, register, setting
from cselab.train.plugins import functional as L
from cselab.train.distributed import gather_rows
from cselab.train.plugins.frozen import aligned_texts
from cselab.train.plugins.kinds import LogitTransform, Loss, LossContext, NegativeSource

TEMPERATURE = "tau"


@register("loss", "info_nce")
class InfoNCE(Loss):
    """InfoNCE of ``anchor`` against ``positive`` and the batch's other positives, plus extra ``negatives``
    columns (views: a hard negative, SSCL's ``anchor.layers``) and ``generated`` ones, and (GISTEmbed's) the other
    anchors and positives; an optional logit ``transform`` (IFM/BYOP's ``perturb``, GISTEmbed's ``guided``), alone or,
    with ``multitask``, averaged with the plain loss; ``label_smoothing``; ``hard_negative_weight`` on each anchor's
    own row of the one ``negatives`` view (supervised SimCSE's)."""

    roles, view_lists = ("anchor", "positive"), ("negatives",)
    transform: LogitTransform | None  # built by the registry from params.transform
    generated: NegativeSource | None  # from params.generated

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        temperature: float = setting(0.05, TEMPERATURE, min=0.0, above=True)
        transform: dict[str, Any] | None = setting(
            None, "a logit transform applied to the similarities (e.g. {kind: perturb, ...}, IFM/BYOP; {kind: "
            "guided, guide: MODEL}, GISTEmbed)", plugin="logit_transform")
        multitask: bool = setting(False, "average the transformed loss with the plain one (needs a transform)")
        label_smoothing: float = setting(0.0, "target mass spread over all columns", min=0.0, max=1.0,
                                         below=True)
        generated: dict[str, Any] | None = setting(None, "generated negatives",
                                                   plugin="negatives")
        hard_negative_weight: float | None = setting(
            None, "added in log space to each anchor's own hard negative (the one negatives view; SimCSE's "
            "hard_negative_weight, 0 as released); null: none")
        anchor_negatives: bool = setting(False, "the batch's other anchors (every process's) are negatives too "
                                         "(GISTEmbed's anchor-anchor block)")
        positive_negatives: bool = setting(False, "each anchor's positive against the batch's other positives, "
                                           "as negatives too (GISTEmbed's positive-positive block)")

        def rules(self) -> None:
            if self.multitask and self.transform is None:
                raise ConfigError(f"{self.at('multitask')}: true averages the transformed loss with the plain one, "
                                  f"and {self.where or 'the loss'} has no transform")
            negatives = (self.beside or {}).get("negatives") or []
            if self.hard_negative_weight is not None and self.beside is not None and len(negatives) != 1:
                raise ConfigError(f"{self.at('hard_negative_weight')}: weighs each anchor's own hard negative, the "
                                  f"row of the one negatives view; {self.at('negatives')} has {len(negatives)}")
            kind = (self.transform or {}).get("kind")
            guided = kind is not None and get("logit_transform", kind).cls.needs_reference
            if guided and self.generated is not None:
                raise ConfigError(f"{self.at('generated')}: generated negatives have no text, and the "
                                  f"{self.at('transform')} reads each column's text")
            masks = "the guided transform" if guided else "anchor_negatives" if self.anchor_negatives else \
                "positive_negatives" if self.positive_negatives else None
            if self.label_smoothing and masks:
                raise ConfigError(f"{self.at('label_smoothing')}: spreads target mass over every column, and {masks} "
                                  "leaves columns out (-inf), which would make the loss infinite; drop one of them")

    def auxiliary(self, encoder) -> None:
        """Let the transform note what it needs of the training encoder (a guide: the training length)."""
        if self.transform is not None:
            self.transform.prepare(encoder)
        return None

    def forward(self, views, context: LossContext):
        anchors, positives = views
        positives, offset = gather_rows(positives)
        gathered = [gather_rows(context.encoded[v][0].flatten(0, -2)) for v in self.views["negatives"]]
        columns = [vectors for vectors, _ in gathered]
        generated = self.generated(anchors, context) if self.generated is not None and len(anchors) else None
        if generated is not None:
            columns.append(generated)
        negatives = torch.cat(columns) if columns else None
        if negatives is not None and not len(negatives):
            negatives = None
        every_anchor = gather_rows(anchors)[0] if self.params.anchor_negatives else None
        transform: Callable[..., torch.Tensor] | None = self.transform
        if self.transform is not None and self.transform.needs_reference:  # on every process: its gathers too
            transform = partial(self.transform, reference=self._reference(context, anchors.device))
        if not len(anchors):  # no row here: a loss of none that reads what was gathered, so that every process
            # takes the gathers' backward (a collective) as the others do
            read = [positives, *columns, *([every_anchor] if every_anchor is not None else [])]
            return anchors.sum(dim=1) + 0.0 * sum(vectors.sum() for vectors in read)
        # a batch whose rows have no hard negative (an empty field) gives no negatives view: no bias to add
        bias = None if not self.params.hard_negative_weight or negatives is None else self._hard_negative_bias(
            context, len(anchors), len(positives), gathered[0][1], len(negatives))
        return L.info_nce(anchors, positives, self.params.temperature, negatives, offset, reduction="none",
                          transform=transform, multitask=self.params.multitask,
                          label_smoothing=self.params.label_smoothing, logit_bias=bias, every_anchor=every_anchor,
                          positive_negatives=self.params.positive_negatives)

    def _reference(self, context: LossContext, device: torch.device) -> torch.Tensor:
        """The transform's reference similarities (a guide's): the same columns as the loss's, from its
        :meth:`~cselab.train.plugins.kinds.LogitTransform.reference_vectors` of each view's texts."""
        transform = cast(LogitTransform, self.transform)
        texts = aligned_texts(context, [self.views["anchor"], self.views["positive"]], "info_nce's transform")
        anchors, positives = (transform.reference_vectors(rows, device) for rows in texts)
        columns = [gather_rows(transform.reference_vectors(cast(Callable, context.texts)(name), device))[0]
                   for name in self.views["negatives"]]  # forward views (refused otherwise when the method is read)
        every_anchor = gather_rows(anchors)[0] if self.params.anchor_negatives else None
        positives, offset = gather_rows(positives)
        return L.contrast_similarities(anchors, positives, torch.cat(columns) if columns else None, offset,
                                       every_anchor, self.params.positive_negatives)

    def _hard_negative_bias(self, context: LossContext, anchors: int, positives: int, start: int,
                            negatives: int) -> torch.Tensor:
        """``hard_negative_weight`` at each anchor's own hard negative (the same row of the negatives view, when it
        has one), 0 elsewhere: (anchors, positives + negatives)."""
        weight, encoded = self.params.hard_negative_weight, context.encoded
        if weight is None:
            raise ValueError("no hard_negative_weight: no hard negative bias")
        rows = sorted(set(encoded[self.views["anchor"]][1]) & set(encoded[self.views["positive"]][1]))
        vectors, present = encoded[self.views["negatives"][0]]
        where = {row: k for k, row in enumerate(present)}
        bias = vectors.new_zeros((anchors, positives + negatives))
        for i, row in enumerate(rows):
            if row in where:
                bias[i, positives + start + where[row]] = weight
        return bias


@register("loss", "two_way_margin")
class TwoWayMargin(Loss):
    """OssCSE's max-margin on (``anchor``, ``paraphrase``, ``negation``)."""

    roles = ("anchor", "paraphrase", "negation")

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        alpha: float = setting(0.05, "the paraphrase beats the negation by at least alpha")
        beta: float = setting(0.2, "... and by at most beta")

    def forward(self, views, context: LossContext):
        return L.two_way_margin(*views, self.params.alpha, self.params.beta, reduction="none")


@register("loss", "recall")
class Recall(Loss):
    """``gamma / 2`` times the squared distance of the weights to the initial (frozen) ones."""

    reduce, needs_initial_weights = "replicated", True

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        gamma: float = setting(2e-3, "strength", min=0.0)

    def forward(self, views, context: LossContext):
        if context.initial_weights is None:
            raise ConfigError("loss recall: it reads the initial weights; none were given")
        parameters, initial = context.initial_weights()
        return L.recall(parameters, initial, self.params.gamma)


class _LayerGuided(Loss):
    """SG's losses: ``anchor`` against the layer views of ``guide`` (``NAME.layers``), over the whole batch."""

    roles, reduce = ("anchor", "guide"), "whole_batch"

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        temperature: float = setting(0.01, TEMPERATURE, min=0.0, above=True)


@register("loss", "nt_xent")
class NTXent(_LayerGuided):
    """SG's NT-Xent between ``anchor`` and one layer view of ``guide`` (``NAME.layers``) drawn per row by a
    uniform sampler."""

    def prepare(self, views):
        anchors, guides = views
        chosen = torch.randint(guides.shape[1], (len(guides),), device=guides.device)  # SG's uniform sampler
        return [anchors, guides[torch.arange(len(guides), device=guides.device), chosen]]

    def forward(self, views, context: LossContext):
        anchors, guides = views
        return L.nt_xent(anchors, guides, self.params.temperature)


@register("loss", "sg_opt")
class SGOpt(_LayerGuided):
    """SG-OPT's ``L_opt3`` between ``anchor`` and every layer view of ``guide``."""

    def forward(self, views, context: LossContext):
        anchors, guides = views
        return L.sg_opt(anchors, guides, self.params.temperature)


def masked_views(context: LossContext, names: list[str], probability: float, mask_id: int | None = None,
                 mask_share: float = 0.8):
    """For each of the views ``names`` that has rows: its name, token ids and attention mask (on the encoder's
    device) and the ids masked as BERT masks them (:func:`~cselab.train.plugins.functional.mask_tokens`, special
    tokens and padding kept; ``mask_id``: the tokenizer's mask token by default) with their labels."""
    if context.tokens is None:
        raise ConfigError("a loss that masks its views' tokens needs them (needs_tokens)")
    encoder = getattr(context.model, "module", context.model)
    tokenizer, device = encoder.tokenizer, next(encoder.backbone.parameters()).device
    special = torch.tensor(tokenizer.all_special_ids).to(device, non_blocking=True)
    for name in names:
        present, input_ids, attention_mask = context.tokens(name)
        if not present:
            continue
        input_ids, attention_mask = (t.to(device, non_blocking=True) for t in (input_ids, attention_mask))
        masked, labels = L.mask_tokens(input_ids, attention_mask.bool() & ~torch.isin(input_ids, special),
                                       probability, tokenizer.mask_token_id if mask_id is None else mask_id,
                                       len(tokenizer), mask_share=mask_share)
        yield name, input_ids, attention_mask, masked, labels


@register("loss", "mlm")
class MaskedLM(Loss):
    """SimCSE's MLM auxiliary: the ``source`` view's sentences with ``probability`` of their tokens masked, run
    through the encoder and the model's own masked-LM head, cross-entropy on the masked tokens. Each process averages
    its own masked tokens (as the released code under DDP); needs a model with masked-LM head weights."""

    roles, reduce, needs_tokens, needs_lm_head = ("source",), "replicated", True, "masked"

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        probability: float = setting(0.15, "share of the source view's tokens masked (80% [MASK], 10% a "
                                     "random token, 10% kept)", min=0.0, max=1.0, above=True)

    def forward(self, views, context: LossContext):
        for _, _, attention_mask, masked, labels in masked_views(context, [self.views["source"]],
                                                                 self.params.probability):
            return L.masked_lm(context.model(masked, attention_mask, mlm=True), labels)
        return views[0].sum() * 0.0


@register("loss", "mntp")
class MaskedNextToken(Loss):
    """LLM2Vec's masked next-token prediction (MNTP): the ``source`` view's sentences with ``probability`` of their
    tokens masked, run through the encoder (bidirectional when it is) and the decoder's own next-token head, each
    masked token predicted from the position before it (:func:`~cselab.train.plugins.functional.masked_next_token`).
    Needs a causal LM's head weights; each process averages its own masked tokens."""

    roles, reduce, needs_tokens, needs_lm_head = ("source",), "replicated", True, "causal"

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        probability: float = setting(0.2, "share of the source view's tokens masked", min=0.0, max=1.0,
                                     above=True)
        mask_token: str = setting("_", "the token a masked position reads (LLM2Vec's mask_token_type blank: "
                                  "'_'); one token of the vocabulary")
        mask_share: float = setting(0.8, "share of the masked tokens that read mask_token, the rest half a "
                                    "random token, half kept (1.0: LLM2Vec's all_mask collator)", min=0.0, max=1.0)

    def __init__(self, params: Params, **views):
        super().__init__(params, **views)
        self.mask_id: int | None = None

    def auxiliary(self, encoder) -> None:
        """No model of its own: the mask token's id, read when the run is set up (so refused before the first step)."""
        self._read_mask_id(encoder.tokenizer)
        return None

    def _read_mask_id(self, tokenizer) -> None:
        ids = tokenizer(self.params.mask_token, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or tokenizer.convert_ids_to_tokens(ids[0]) == tokenizer.unk_token:
            raise ConfigError(f"losses.mntp.mask_token: {self.params.mask_token!r} is not one token of the tokenizer's "
                              f"vocabulary (it reads as {len(ids)} ids); give one that is")
        self.mask_id = ids[0]

    def forward(self, views, context: LossContext):
        if self.mask_id is None:
            self._read_mask_id(getattr(context.model, "module", context.model).tokenizer)
        for _, _, attention_mask, masked, labels in masked_views(context, [self.views["source"]],
                                                                 self.params.probability, self.mask_id,
                                                                 self.params.mask_share):
            return L.masked_next_token(context.model(masked, attention_mask, mlm=True), labels)
        return views[0].sum() * 0.0
