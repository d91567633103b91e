"""View augmentations of the SimCSE-variants study (simcse-improvements.txt section 4.1), pure functions.

At the input embeddings (the word embeddings of a view's forward pass, before positions are
added): ``gaussian_noise`` (add N(0, sigma), sigma = 0.001), ``gaussian_dropout`` (multiply by
N(1, sigma)), ``bernoulli_dropout`` (dropout with rate p = 0.1), ``feature_dropout`` (drop whole
feature dimensions of a sentence, rate p). At the encoder output, making a positive from the
anchor's vectors without another pass: ``batch_noise`` (add N(0, the batch's per-dimension
std)), ``bernoulli_mask`` (zero dimensions with rate p), ``mask_smallest`` / ``mask_largest``
(zero the 10% of dimensions smallest / largest in absolute value). :func:`fgsm` moves a tensor
by epsilon times the sign of the loss gradient (the direction that increases the loss).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

INPUT = ("gaussian_noise", "gaussian_dropout", "bernoulli_dropout", "feature_dropout", "fgsm")
OUTPUT = ("batch_noise", "bernoulli_mask", "mask_smallest", "mask_largest", "fgsm")


def augment_input(embeddings: torch.Tensor, kind: str, sigma: float = 0.001, p: float = 0.1) -> torch.Tensor:
    """One input-embedding augmentation of (batch, tokens, dim) embeddings (``fgsm`` is applied by the caller)."""
    if kind == "gaussian_noise":
        return embeddings + sigma * torch.randn_like(embeddings)
    if kind == "gaussian_dropout":
        return embeddings * (1 + sigma * torch.randn_like(embeddings))
    if kind == "bernoulli_dropout":
        return F.dropout(embeddings, p, training=True)
    if kind == "feature_dropout":
        keep = torch.rand(embeddings.shape[0], 1, embeddings.shape[2], device=embeddings.device) >= p
        return embeddings * keep / (1 - p)
    raise ValueError(f"Unknown input augmentation {kind!r}; choose one of {', '.join(INPUT)}")


def augment_output(vectors: torch.Tensor, kind: str, p: float = 0.1, fraction: float = 0.1) -> torch.Tensor:
    """One encoder-output augmentation of (batch, dim) vectors (``fgsm`` is applied by the caller)."""
    if kind == "batch_noise":
        return vectors + torch.randn_like(vectors) * vectors.detach().std(dim=0, keepdim=True)
    if kind == "bernoulli_mask":
        return vectors * (torch.rand_like(vectors) >= p)
    if kind in ("mask_smallest", "mask_largest"):
        count = int(round(fraction * vectors.shape[1]))
        chosen = vectors.detach().abs().topk(count, dim=1, largest=kind == "mask_largest").indices
        return vectors.scatter(1, chosen, 0.0)
    raise ValueError(f"Unknown output augmentation {kind!r}; choose one of {', '.join(OUTPUT)}")


def fgsm(values: torch.Tensor, gradient: torch.Tensor, epsilon: float) -> torch.Tensor:
    """``values + epsilon * sign(gradient)``: the fast gradient sign step that increases the loss."""
    return values + epsilon * gradient.sign()
