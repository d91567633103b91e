"""Training losses as pure functions on tensors (OssCSE, Shi et al., equations 2-4).

- :func:`info_nce`: ``l_c = -log e^{sim(h_i, h_i+)/tau} / sum_j e^{sim(h_i, h_j+)/tau}``, the
  in-batch contrastive loss of SimCSE; extra negatives add logit columns.
- :func:`two_way_margin`: ``max(sim(h, h^n) - sim(h, h^p) + alpha, 0) + max(sim(h, h^p) -
  sim(h, h^n) - beta, 0)``: the paraphrase must beat the negation by at least ``alpha`` and at
  most ``beta``.
- :func:`recall`: ``1/2 gamma sum_i (theta_i - theta*_i)^2``, a pull back to the initial weights.

``sim`` is the cosine similarity; each loss is averaged over the rows it has.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[i, j] = cos(a_i, b_j)``."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def info_nce(anchors: torch.Tensor, positives: torch.Tensor, temperature: float = 0.05,
             extra_negatives: torch.Tensor | None = None) -> torch.Tensor:
    """In-batch InfoNCE: row i's positive is ``positives[i]``, every other positive (and each extra negative)
    is a negative."""
    if anchors.shape != positives.shape:
        raise ValueError(f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} differ in shape")
    logits = cosine_matrix(anchors, positives)
    if extra_negatives is not None:
        logits = torch.cat([logits, cosine_matrix(anchors, extra_negatives)], dim=1)
    labels = torch.arange(len(anchors), device=anchors.device)
    return F.cross_entropy(logits / temperature, labels)


def two_way_margin(anchors: torch.Tensor, paraphrases: torch.Tensor, negations: torch.Tensor,
                   alpha: float = 0.05, beta: float = 0.2) -> torch.Tensor:
    """Mean two-way max-margin loss over rows; zero (still differentiable) for no rows."""
    if len(anchors) == 0:
        return anchors.sum() * 0.0
    to_paraphrase = F.cosine_similarity(anchors, paraphrases, dim=-1)
    to_negation = F.cosine_similarity(anchors, negations, dim=-1)
    return (F.relu(to_negation - to_paraphrase + alpha) + F.relu(to_paraphrase - to_negation - beta)).mean()


def recall(parameters: Iterable[torch.Tensor], initial: Iterable[torch.Tensor], gamma: float = 2e-3) -> torch.Tensor:
    """``gamma / 2`` times the squared distance of the parameters to their initial values."""
    terms = [((p - p0.to(p.device)) ** 2).sum() for p, p0 in zip(parameters, initial, strict=True)]
    if not terms:
        raise ValueError("recall() needs at least one parameter")
    return 0.5 * gamma * torch.stack(terms).sum()
