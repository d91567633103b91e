"""View augmentations of the SimCSE-variants study (simcse-improvements.txt section 4.1), pure functions
registered as plug-ins (:mod:`cselab.registry`).

``input_augment`` kinds act on the input embeddings (the word embeddings of a view's forward pass, before
positions are added); ``output_augment`` kinds make a view from another view's vectors without another
pass. ``fgsm`` (both kinds) moves a tensor by epsilon times the sign of the loss gradient (the direction that
increases the loss); it declares ``needs: gradient``, so the objective encodes such views twice per step.
Each function takes ``(values, params, gradient)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cselab.registry import Param, register

SIGMA = Param(float, 0.001, "standard deviation of the noise", min=0.0)
RATE = Param(float, 0.1, "rate", min=0.0, max=1.0, below=True)
FRACTION = Param(float, 0.1, "fraction of the dimensions", min=0.0, max=1.0)
EPSILON = Param(float, 0.001, "step size", min=0.0)


@register("input_augment", "gaussian_noise", params={"sigma": SIGMA})
def gaussian_noise(embeddings: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
    """Add N(0, sigma) to every embedding value."""
    return embeddings + params["sigma"] * torch.randn_like(embeddings)


@register("input_augment", "gaussian_dropout", params={"sigma": SIGMA})
def gaussian_dropout(embeddings: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
    """Multiply every embedding value by N(1, sigma)."""
    return embeddings * (1 + params["sigma"] * torch.randn_like(embeddings))


@register("input_augment", "bernoulli_dropout", params={"p": RATE})
def bernoulli_dropout(embeddings: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
    """Dropout with rate p on the embedding values."""
    return F.dropout(embeddings, params["p"], training=True)


@register("input_augment", "feature_dropout", params={"p": RATE})
def feature_dropout(embeddings: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
    """Drop whole feature dimensions of a sentence with rate p."""
    p = params["p"]
    keep = torch.rand(embeddings.shape[0], 1, embeddings.shape[2], device=embeddings.device) >= p
    return embeddings * keep / (1 - p)


@register("output_augment", "batch_noise")
def batch_noise(vectors: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
    """Add N(0, the batch's per-dimension std)."""
    return vectors + torch.randn_like(vectors) * vectors.detach().std(dim=0, keepdim=True)


@register("output_augment", "bernoulli_mask", params={"p": RATE})
def bernoulli_mask(vectors: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
    """Zero each dimension with rate p."""
    return vectors * (torch.rand_like(vectors) >= params["p"])


def _mask_extreme(largest: bool):
    def mask(vectors: torch.Tensor, params: dict, gradient=None) -> torch.Tensor:
        count = int(round(params["fraction"] * vectors.shape[1]))
        chosen = vectors.detach().abs().topk(count, dim=1, largest=largest).indices
        return vectors.scatter(1, chosen, 0.0)
    mask.__doc__ = f"Zero the given fraction of dimensions {'largest' if largest else 'smallest'} in absolute value."
    return mask


register("output_augment", "mask_smallest", params={"fraction": FRACTION})(_mask_extreme(largest=False))
register("output_augment", "mask_largest", params={"fraction": FRACTION})(_mask_extreme(largest=True))


def fgsm(values: torch.Tensor, params: dict, gradient: torch.Tensor) -> torch.Tensor:
    """``values + epsilon * sign(gradient)``: the fast gradient sign step that increases the loss."""
    return values + params["epsilon"] * gradient.sign()


for _kind in ("input_augment", "output_augment"):
    register(_kind, "fgsm", params={"epsilon": EPSILON}, needs=("gradient",))(fgsm)
