"""Training losses as pure functions on tensors.

- :func:`info_nce` (OssCSE eq. 2, SimCSE): ``l_c = -log e^{sim(h_i, h_i+)/tau} / sum_j e^{sim(h_i, h_j+)/tau}``, the
  in-batch contrastive loss of SimCSE; extra negatives add logit columns.
- :func:`two_way_margin` (OssCSE eq. 3): ``max(sim(h, h^n) - sim(h, h^p) + alpha, 0) + max(sim(h, h^p) -
  sim(h, h^n) - beta, 0)``: the paraphrase must beat the negation by at least ``alpha`` and at
  most ``beta``.
- :func:`recall`: ``1/2 gamma sum_i (theta_i - theta*_i)^2``, a pull back to the initial weights
  (SG-OPT's regularizer ``lambda ||theta_T - theta_F||^2`` with ``gamma = 2 lambda``).
- :func:`perturb_logits`, :func:`dynamic_margin`: IFM's and BYOP's margins on InfoNCE's similarities (the
  ``perturb`` logit transform of :mod:`cselab.train.plugins.transforms`).
- :func:`nt_xent`, :func:`sg_opt`: SG's and SG-OPT's losses (Kim et al., 2021, section 3).
- :func:`mask_tokens`, :func:`masked_lm`: BERT's masking (a share of the tokens; 80% of those become the mask
  token, 10% a random token, 10% stay) and the cross-entropy on the masked tokens (SimCSE's MLM auxiliary).
- :func:`replaced_token_detection`: DiffCSE's conditional ELECTRA loss, per row.
- :func:`list_mle`, :func:`list_net`, :func:`jensen_shannon`, :func:`released_rank_consistency`: RankCSE's ranking
  distillation and consistency, per row.
- :func:`ranked_pairs`, :func:`cosent`, :func:`angle`, :func:`angle_similarity`, :func:`angle_in_batch`: the losses
  of scored pairs (CoSENT; AnglE's angle and in-batch objectives).
- :func:`matryoshka`: one loss at several truncated widths, weighted.

``sim`` is the cosine similarity; each loss is averaged over the rows it has.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import cast

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[i, j] = cos(a_i, b_j)``."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def perturb_logits(similarities: torch.Tensor, labels: torch.Tensor, pattern: str,
                   margin: float | torch.Tensor) -> torch.Tensor:
    """Shift each row's positive similarity (``p+``/``p-``) and/or its negatives (``n+``/``n-``) by ``margin`` (a
    number, or one per row of shape (rows, 1)): IFM is ``p-n+`` (the gradient-ascent direction), BYOP's
    descent direction ``p+n-``; one side alone (``p+``, ``n-`` ...) leaves the other as it is."""
    match = re.fullmatch(r"(p[+-])?(n[+-])?", pattern or "")
    if not pattern or match is None:
        raise ValueError(f"perturbation {pattern!r}: expected p+, p-, n+, n- or a pair such as p+n-")
    positive = F.one_hot(labels, similarities.shape[1]).to(similarities.dtype)
    shift = torch.zeros_like(similarities)
    if match.group(1):
        shift = shift + (1.0 if match.group(1) == "p+" else -1.0) * positive
    if match.group(2):
        shift = shift + (1.0 if match.group(2) == "n+" else -1.0) * (1 - positive)
    return similarities + shift * margin


def dynamic_margin(similarities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """BYOP-D's margin, one per row: the positive's similarity over the number of negatives (N - 1 in a plain
    batch; a column left out, -inf, is none), detached (a margin is an offset, not a path for the gradient)."""
    positive = similarities.gather(1, labels.unsqueeze(1)).detach()
    return positive / (similarities.isfinite().sum(dim=1, keepdim=True) - 1).clamp(min=1)


_COMPILING: contextvars.ContextVar[bool] = contextvars.ContextVar("cselab_compiling_losses", default=False)


@contextlib.contextmanager
def compiled(on: bool = True) -> Iterator[None]:
    """Inside (``on``), the functions marked :func:`compilable` run through ``torch.compile``: a training step's, when
    the run compiles (``training.compile``)."""
    token = _COMPILING.set(on)
    try:
        yield
    finally:
        _COMPILING.reset(token)


def compilable(function: Callable) -> Callable:
    """``function`` through ``torch.compile`` (compiled at its first call inside :func:`compiled`), as it is
    outside."""
    found: list[Callable] = []

    @functools.wraps(function)
    def run(*args, **kwargs):
        if not _COMPILING.get():
            return function(*args, **kwargs)
        if not found:
            found.append(torch.compile(function))
        return found[0](*args, **kwargs)
    return run


def contrast_similarities(anchors: torch.Tensor, positives: torch.Tensor,
                          extra_negatives: torch.Tensor | None = None, offset: int = 0,
                          every_anchor: torch.Tensor | None = None, positive_negatives: bool = False) -> torch.Tensor:
    """InfoNCE's similarity matrix: row i (``anchors[i]``) against every positive (its own at ``offset + i``) and each
    extra negative; then against ``every_anchor`` (the batch's anchors, this process's at ``offset``) and, with
    ``positive_negatives``, its positive against every positive (GISTEmbed's anchor-anchor and positive-positive
    blocks), a row's own vector in those blocks left out (-inf)."""
    if anchors.shape[1:] != positives.shape[1:] or offset + len(anchors) > len(positives):
        raise ValueError(f"anchors {tuple(anchors.shape)} do not match positives {tuple(positives.shape)} "
                         f"at offset {offset}")
    blocks = [cosine_matrix(anchors, positives)]
    if extra_negatives is not None:
        blocks.append(cosine_matrix(anchors, extra_negatives))
    if every_anchor is None and not positive_negatives:
        return torch.cat(blocks, dim=1)
    rows = torch.arange(offset, offset + len(anchors), device=anchors.device)
    itself = rows.unsqueeze(1) == torch.arange(len(positives), device=anchors.device)  # [i, offset + i]
    if every_anchor is not None:
        if every_anchor.shape != positives.shape:
            raise ValueError(f"every anchor {tuple(every_anchor.shape)} does not match the positives "
                             f"{tuple(positives.shape)}")
        blocks.append(cosine_matrix(anchors, every_anchor).masked_fill(itself, -math.inf))
    if positive_negatives:
        blocks.append(cosine_matrix(positives[offset:offset + len(anchors)], positives).masked_fill(itself, -math.inf))
    return torch.cat(blocks, dim=1)


@compilable
def info_nce(anchors: torch.Tensor, positives: torch.Tensor, temperature: float = 0.05,
             extra_negatives: torch.Tensor | None = None, offset: int = 0, reduction: str = "mean",
             transform: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None, multitask: bool = False,
             label_smoothing: float = 0.0, logit_bias: torch.Tensor | None = None,
             every_anchor: torch.Tensor | None = None, positive_negatives: bool = False) -> torch.Tensor:
    """In-batch InfoNCE: row i's positive is ``positives[offset + i]``, every other positive (and each extra
    negative) is a negative. ``offset`` places the anchors in a longer list of positives (another process's
    rows first); ``reduction`` is ``"mean"`` or ``"none"`` (one loss per anchor). ``every_anchor`` (the anchors of
    every process, in the positives' order) and ``positive_negatives`` add the other anchors and the other positives
    as negatives (:func:`contrast_similarities`).

    ``transform(similarities, labels)`` changes the similarities before the temperature (e.g. IFM/BYOP's
    perturbation, :func:`perturb_logits`); with ``multitask`` the transformed loss is averaged with the plain one
    (``(l + l_transformed) / 2``). ``label_smoothing`` spreads that much of the target's mass evenly over all
    columns (the positive's included), as :func:`torch.nn.functional.cross_entropy` does. ``logit_bias`` (anchors x
    the positives and extra negatives) is added to those logits after the temperature: SimCSE's hard-negative weight,
    ``log`` of a factor on ``e^{sim/tau}`` of each anchor's own hard negative."""
    if multitask and transform is None:
        raise ValueError("multitask averages the transformed loss with the plain one: it needs a transform")
    similarities = contrast_similarities(anchors, positives, extra_negatives, offset, every_anchor,
                                         positive_negatives)
    labels = torch.arange(offset, offset + len(anchors), device=anchors.device)
    if logit_bias is not None:
        logit_bias = F.pad(logit_bias, (0, similarities.shape[1] - logit_bias.shape[1]))

    def loss(values: torch.Tensor) -> torch.Tensor:
        logits = values / temperature if logit_bias is None else values / temperature + logit_bias
        return F.cross_entropy(logits, labels, reduction=reduction, label_smoothing=label_smoothing)

    if transform is None:
        return loss(similarities)
    transformed = loss(transform(similarities, labels))
    return (loss(similarities) + transformed) / 2 if multitask else transformed


def guided_mask(similarities: torch.Tensor, labels: torch.Tensor, guide: torch.Tensor, margin: float = 0.0,
                strategy: str = "absolute") -> torch.Tensor:
    """GISTEmbed's false-negative filter: in each row, the columns whose ``guide`` similarity (the same pairs by a
    guide model) is above the guide's similarity ``g`` of the row's positive (column ``labels[i]``) less ``margin``
    (``absolute``) or less ``|g| * margin`` (``relative``) are left out (-inf); the positive itself is kept."""
    if guide.shape != similarities.shape:
        raise ValueError(f"guide similarities {tuple(guide.shape)} do not match {tuple(similarities.shape)}")
    if strategy not in ("absolute", "relative"):
        raise ValueError(f"margin strategy {strategy!r}: expected absolute or relative")
    own = guide.gather(1, labels.unsqueeze(1))
    threshold = own - margin if strategy == "absolute" else own - own.abs() * margin
    masked = (guide > threshold).scatter(1, labels.unsqueeze(1), False)
    return similarities.masked_fill(masked, -math.inf)


def nt_xent(first: torch.Tensor, second: torch.Tensor, temperature: float = 0.01) -> torch.Tensor:
    """NT-Xent over the 2N vectors of two views (SG's ``L_base``): each vector's positive is its row's vector in
    the other view, every other vector but itself a negative; mean over the 2N vectors."""
    if first.shape != second.shape:
        raise ValueError(f"views {tuple(first.shape)} and {tuple(second.shape)} differ in shape")
    vectors = torch.cat([first, second])
    logits = cosine_matrix(vectors, vectors) / temperature
    logits = logits.masked_fill(torch.eye(len(vectors), dtype=torch.bool, device=vectors.device), float("-inf"))
    n = len(first)
    labels = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(vectors.device)
    return F.cross_entropy(logits, labels)


def sg_opt(sentences: torch.Tensor, guides: torch.Tensor, temperature: float = 0.01) -> torch.Tensor:
    """SG-OPT's ``L_opt3`` averaged over rows i and layer views k: ``-log phi(c_i, h_ik) / (phi(c_i, h_ik) +
    sum_{m != i} sum_n phi(c_i, h_mn))``, ``phi(u, v) = exp(cos(u, v) / temperature)``; ``sentences`` (b, d)
    are the c_i, ``guides`` (b, layers, d) the h_ik."""
    b, layers, dim = guides.shape
    if sentences.shape != (b, dim):
        raise ValueError(f"sentences {tuple(sentences.shape)} do not match guides {tuple(guides.shape)}")
    logits = (cosine_matrix(sentences, guides.reshape(b * layers, dim)) / temperature).reshape(b, b, layers)
    own = torch.eye(b, dtype=torch.bool, device=sentences.device)
    positives = logits[own]  # (b, layers): phi(c_i, h_ik)
    others = torch.logsumexp(logits.masked_fill(own.unsqueeze(-1), float("-inf")).reshape(b, -1), dim=1)
    return (torch.logaddexp(positives, others.unsqueeze(1)) - positives).mean()


@compilable
def two_way_margin(anchors: torch.Tensor, paraphrases: torch.Tensor, negations: torch.Tensor,
                   alpha: float = 0.05, beta: float = 0.2, reduction: str = "mean") -> torch.Tensor:
    """Two-way max-margin loss, mean over rows (zero, still differentiable, for no rows) or per row
    (``reduction="none"``)."""
    if len(anchors) == 0 and reduction == "mean":
        return anchors.sum() * 0.0
    to_paraphrase = F.cosine_similarity(anchors, paraphrases, dim=-1)
    to_negation = F.cosine_similarity(anchors, negations, dim=-1)
    per_row = F.relu(to_negation - to_paraphrase + alpha) + F.relu(to_paraphrase - to_negation - beta)
    return per_row if reduction == "none" else per_row.mean()


class _Recall(torch.autograd.Function):
    """``gamma / 2 * sum_i ||theta_i - theta*_i||^2`` and its gradient ``gamma (theta_i - theta*_i)``, each over all
    the tensors at once with torch's multi-tensor kernels: a few launches for a model's hundreds of weights, where
    autograd through per-tensor operations (or through ``_foreach_norm``) launches several per weight."""

    @staticmethod
    def forward(ctx, gamma: float, count: int, *tensors: torch.Tensor) -> torch.Tensor:
        parameters, initial = tensors[:count], tensors[count:]
        differences = torch._foreach_sub(parameters, initial)
        ctx.gamma, ctx.count = gamma, count
        ctx.save_for_backward(*differences)
        return 0.5 * gamma * torch.stack(torch._foreach_norm(differences)).square().sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gradients = torch._foreach_mul(list(ctx.saved_tensors), grad * ctx.gamma)
        return (None, None, *gradients, *([None] * ctx.count))


def recall(parameters: Iterable[torch.Tensor], initial: Iterable[torch.Tensor], gamma: float = 2e-3) -> torch.Tensor:
    """``gamma / 2`` times the squared distance of the parameters to their initial values (:class:`_Recall`)."""
    parameters, initial = list(parameters), list(initial)
    if len(parameters) != len(initial):
        raise ValueError(f"recall(): {len(parameters)} parameters and {len(initial)} initial values")
    if not parameters:
        raise ValueError("recall() needs at least one parameter")
    device = parameters[0].device
    return _Recall.apply(gamma, len(parameters), *parameters, *(p0.to(device).detach() for p0 in initial))


def mask_tokens(input_ids: torch.Tensor, maskable: torch.Tensor, probability: float, mask_id: int, vocab_size: int,
                generator: torch.Generator | None = None, mask_share: float = 0.8) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ``input_ids`` where ``maskable`` (not padding, not a special token): each such token is
    picked with ``probability``; a picked token becomes ``mask_id`` (``mask_share``, 80%), a random id or stays (half
    the rest each, 10% and 10%). Returns the new ids and the labels (the original id where picked, -100 elsewhere), as
    transformers' collator does; ``mask_share=1`` masks every picked token (LLM2Vec's all_mask collator)."""
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    picked = (draw < probability) & maskable
    labels = torch.where(picked, input_ids, torch.full_like(input_ids, -100))
    how = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    masked = torch.where(picked & (how < mask_share), torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(picked & (how >= mask_share) & (how < (1 + mask_share) / 2), random_ids, masked)
    return masked, labels


def masked_lm(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the masked tokens' predictions (``labels`` -100 elsewhere), averaged over the masked
    tokens; 0 (in the graph) when none is masked."""
    if not (labels != -100).any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=-100)


def masked_next_token(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """LLM2Vec's masked next-token prediction: each masked token (``labels`` not -100) predicted by the logits of the
    position before it (a causal LM's shift), cross-entropy averaged over the masked tokens; a token masked at the
    first position has no position before it and is left out."""
    return masked_lm(logits[:, :-1], labels[:, 1:])


def replaced_token_detection(logits: torch.Tensor, replaced: torch.Tensor) -> torch.Tensor:
    """ELECTRA's replaced-token detection as DiffCSE's released code scores it: each position's two-way logits
    (rows, tokens, 2) against whether its token was replaced (rows, tokens; 0 at padding and at the first token),
    cross-entropy averaged over every position of a row, padding included (the released code's mean over the
    whole padded batch); one value per row."""
    losses = F.cross_entropy(logits.float().flatten(0, 1), replaced.long().flatten(), reduction="none")
    return losses.view(replaced.shape).mean(dim=1)


def list_mle(student: torch.Tensor, teacher: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """ListMLE (RankCSE's ranking distillation, perceptiveshawty/RankCSE ``models.py`` 79-109): the negative
    log-likelihood of the teacher's ranking of each row under the student's scores (Plackett-Luce), columns shuffled
    first so that ties in the teacher's scores are broken at random; one value per row (the released loss is their
    mean). A teacher score of exactly -1 marks a column left out, as released."""
    shuffle = torch.randperm(student.shape[-1], device=student.device)
    student, teacher = student[:, shuffle], teacher[:, shuffle]
    teacher_sorted, order = teacher.sort(descending=True, dim=-1)
    left_out = teacher_sorted == -1
    scores = torch.gather(student, 1, order).masked_fill(left_out, float("-inf"))
    scores = scores - scores.max(dim=1, keepdim=True).values
    tails = torch.cumsum(scores.exp().flip(dims=[1]), dim=1).flip(dims=[1])
    return (torch.log(tails + eps) - scores).masked_fill(left_out, 0.0).sum(dim=1)


def list_net(student: torch.Tensor, teacher: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """ListNet (RankCSE's other distillation, ``models.py`` 63-77): the cross-entropy of the student's top-one
    distribution (softmax of its row) against the teacher's, each row's ``own`` column (its positive) left out of
    both; one value per row (the released loss is their mean)."""
    rows = torch.arange(len(student), device=student.device)
    student = student.float().index_put((rows, own), torch.tensor(float("-inf"), device=student.device))
    teacher = teacher.float().index_put((rows, own), torch.tensor(float("-inf"), device=student.device))
    log_p, q = F.log_softmax(student, dim=-1), F.softmax(teacher, dim=-1)
    return -(q * log_p).nansum(dim=1) / q.nansum(dim=1)


def jensen_shannon(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The Jensen-Shannon divergence between the softmax distributions of two rows of logits, one value per row
    (RankCSE's ranking consistency between the two dropout views' similarity lists, its paper's form)."""
    log_p, log_q = F.log_softmax(first.float(), dim=-1), F.log_softmax(second.float(), dim=-1)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)
    return 0.5 * ((log_p.exp() * (log_p - log_m)).sum(dim=1) + (log_q.exp() * (log_q - log_m)).sum(dim=1))


def released_rank_consistency(first: torch.Tensor, second: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """RankCSE's consistency term as its released ``Divergence`` computes it (``models.py`` 48-61): p and q the two
    rows' softmax clamped at ``eps``, m = log(0.5 (p + q)) clamped below at ``eps`` (which, a log of a probability
    being at most 0, sets every m to ``eps``), and 0.5 (sum p (log p - m) + sum q (log q - m)): minus the mean of
    the two rows' entropies, less ``eps``, and not the divergence its paper defines; one value per row."""
    p, q = F.softmax(first.float(), dim=-1).clamp(min=eps), F.softmax(second.float(), dim=-1).clamp(min=eps)
    m = (0.5 * (p + q)).log().clamp(min=eps)
    return 0.5 * ((p * (p.log() - m)).sum(dim=1) + (q * (q.log() - m)).sum(dim=1))


def ranked_pairs(similarities: torch.Tensor, scores: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """CoSENT's ranking loss over a batch of scored pairs: ``log(1 + sum_{score_i > score_j} e^{scale (sim_j -
    sim_i)})``, every pair of rows whose gold scores are ordered asking the higher one's similarity to be higher
    (ties add nothing); 0 for a batch without an ordered pair."""
    if similarities.shape != scores.shape or similarities.dim() != 1:
        raise ValueError(f"similarities {tuple(similarities.shape)} and scores {tuple(scores.shape)}: expected one "
                         "of each per row")
    scaled = similarities.float() * scale
    terms = (scaled[None, :] - scaled[:, None])[scores[:, None] > scores[None, :]]
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


def cosent(first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """CoSENT (Su, 2022; Huang et al., 2024): :func:`ranked_pairs` of the pairs' cosine similarities."""
    return ranked_pairs(F.cosine_similarity(first, second, dim=-1), scores, scale)


def angle_similarity(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """AnglE's pairwise score (Li and Li, 2024): each vector read as a complex one (its first half the real parts, its
    second the imaginary), the quotient ``first / second`` rescaled to unit norm, and the absolute value of the sum of
    its real and imaginary parts; for unit vectors ``|cos + sin|`` with ``sin = sum(im_x re_y - re_x im_y)``. One
    per row; the width must be even."""
    if first.shape != second.shape or first.shape[-1] % 2:
        raise ValueError(f"angle_similarity: vectors {tuple(first.shape)} and {tuple(second.shape)}: expected the "
                         "same even width (halves are real and imaginary parts)")
    x, y = F.normalize(first.float(), dim=-1), F.normalize(second.float(), dim=-1)
    (x_re, x_im), (y_re, y_im) = x.chunk(2, dim=-1), y.chunk(2, dim=-1)
    return ((x * y).sum(dim=-1) + (x_im * y_re - x_re * y_im).sum(dim=-1)).abs()


def angle(first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """AnglE's angle objective: :func:`ranked_pairs` of :func:`angle_similarity` (its released ``angle_loss``)."""
    return ranked_pairs(angle_similarity(first, second), scores, scale)


def angle_in_batch(first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scale: float = 20.0
                   ) -> torch.Tensor:
    """AnglE's in-batch negative objective on scored pairs, as released (``in_batch_negative_loss``): the 2N vectors
    laid out pair by pair (``first_0, second_0, first_1, ...``), each against every other at ``scale`` times their
    cosine; vector k's targets are the columns j with ``j * int(score_j) == partner(k) * int(score_k)`` (``int``
    truncating, as released): its own pair's other vector when that score's integer part is not 0, and any other
    column whose product happens to match (the released rule's; with 0/1 labels there is none). Cross-entropy summed
    over a vector's targets, averaged over all 2N vectors (a vector without a target adds 0)."""
    vectors = torch.stack([first, second], dim=1).flatten(0, 1)
    labels = scores.repeat_interleave(2).long()  # truncated, as the released .int()
    index = torch.arange(len(vectors), device=vectors.device)
    partner = index + 1 - index % 2 * 2
    column = torch.where(labels == 0, torch.full_like(index, -2), index * labels)
    row = torch.where(labels == 0, torch.full_like(index, -1), partner * labels)
    targets = (column[None, :] == row[:, None]).float()
    logits = scale * cosine_matrix(vectors.float(), vectors.float())
    logits = logits - torch.eye(len(vectors), device=vectors.device) * 1e12
    return -(F.log_softmax(logits, dim=1) * targets).sum(dim=1).mean()


def matryoshka(losses: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """Matryoshka training (Kusupati et al., 2022): ``sum_k weights[k] * losses[k]``, ``losses[k]`` the loss with every
    vector truncated to the k-th width."""
    if len(losses) != len(weights) or not losses:
        raise ValueError(f"matryoshka: {len(losses)} widths and {len(weights)} weights; expected one weight a width")
    return cast(torch.Tensor, sum(weight * loss for loss, weight in zip(losses, weights, strict=True)))  # (not empty)
