"""View augmentations of the SimCSE-variants study (simcse-improvements.txt section 4.1):
:class:`~cselab.train.plugins.kinds.Augment` plug-ins (:mod:`cselab.registry`).

``input_augment`` kinds act on the input embeddings (the word embeddings of a view's forward pass, before
positions are added); ``output_augment`` kinds make a view from another view's vectors without another
pass. ``fgsm`` (both kinds) moves a tensor by epsilon times the sign of the loss gradient (the direction that
increases the loss); it ``needs_gradient``, so the objective encodes such views twice per step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cselab.registry import Param, register
from cselab.train.plugins.kinds import Augment

SIGMA = Param(float, 0.001, "standard deviation of the noise", min=0.0)
RATE = Param(float, 0.1, "rate", min=0.0, max=1.0, below=True)
FRACTION = Param(float, 0.1, "fraction of the dimensions", min=0.0, max=1.0)
EPSILON = Param(float, 0.001, "step size", min=0.0)


class _Noise(Augment):
    def __init__(self, sigma: float):
        super().__init__()
        self.sigma = sigma


class _Rate(Augment):
    def __init__(self, p: float):
        super().__init__()
        self.p = p


@register("input_augment", "gaussian_noise", params={"sigma": SIGMA})
class GaussianNoise(_Noise):
    """Add N(0, sigma) to every embedding value."""

    def forward(self, values, gradient=None):
        return values + self.sigma * torch.randn_like(values)


@register("input_augment", "gaussian_dropout", params={"sigma": SIGMA})
class GaussianDropout(_Noise):
    """Multiply every embedding value by N(1, sigma)."""

    def forward(self, values, gradient=None):
        return values * (1 + self.sigma * torch.randn_like(values))


@register("input_augment", "bernoulli_dropout", params={"p": RATE})
class BernoulliDropout(_Rate):
    """Dropout with rate p on the embedding values."""

    def forward(self, values, gradient=None):
        return F.dropout(values, self.p, training=True)


@register("input_augment", "feature_dropout", params={"p": RATE})
class FeatureDropout(_Rate):
    """Drop whole feature dimensions of a sentence with rate p."""

    def forward(self, values, gradient=None):
        keep = torch.rand(values.shape[0], 1, values.shape[2], device=values.device) >= self.p
        return values * keep / (1 - self.p)


@register("output_augment", "batch_noise")
class BatchNoise(Augment):
    """Add N(0, the batch's per-dimension std)."""

    def forward(self, values, gradient=None):
        return values + torch.randn_like(values) * values.detach().std(dim=0, keepdim=True)


@register("output_augment", "bernoulli_mask", params={"p": RATE})
class BernoulliMask(_Rate):
    """Zero each dimension with rate p."""

    def forward(self, values, gradient=None):
        return values * (torch.rand_like(values) >= self.p)


class _MaskExtreme(Augment):
    largest = False

    def __init__(self, fraction: float):
        super().__init__()
        self.fraction = fraction

    def forward(self, values, gradient=None):
        count = int(round(self.fraction * values.shape[1]))
        chosen = values.detach().abs().topk(count, dim=1, largest=self.largest).indices
        return values.scatter(1, chosen, 0.0)


@register("output_augment", "mask_smallest", params={"fraction": FRACTION})
class MaskSmallest(_MaskExtreme):
    """Zero the given fraction of dimensions smallest in absolute value."""


@register("output_augment", "mask_largest", params={"fraction": FRACTION})
class MaskLargest(_MaskExtreme):
    """Zero the given fraction of dimensions largest in absolute value."""

    largest = True


@register("input_augment", "fgsm", params={"epsilon": EPSILON})
@register("output_augment", "fgsm", params={"epsilon": EPSILON})
class FGSM(Augment):
    """``values + epsilon * sign(gradient)``: the fast gradient sign step that increases the loss."""

    needs_gradient = True

    def __init__(self, epsilon: float):
        super().__init__()
        self.epsilon = epsilon

    def forward(self, values, gradient=None):
        return values + self.epsilon * gradient.sign()
