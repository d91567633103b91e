"""View augmentations of the SimCSE-variants study (simcse-improvements.txt section 4.1):
:class:`~cselab.train.plugins.kinds.Augment` plug-ins (:mod:`cselab.registry`).

``input_augment`` kinds act on the input embeddings (the word embeddings of a view's forward pass, before
positions are added); ``output_augment`` kinds make a view from another view's vectors without another
pass. ``fgsm`` (both kinds) moves a tensor by epsilon times the sign of the loss gradient (the direction that
increases the loss); it ``needs_gradient``, so the objective encodes such views twice per step.

``token_augment`` kinds change a forward view's token ids before its pass: ``word_repetition`` (ESimCSE).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cselab.registry import register, setting
from cselab.train.plugins.kinds import Augment, TokenAugment


class _Noise(Augment):
    @dataclass(frozen=True, kw_only=True)
    class Params(Augment.Params):
        sigma: float = setting(0.001, "standard deviation of the noise", min=0.0)


class _Rate(Augment):
    @dataclass(frozen=True, kw_only=True)
    class Params(Augment.Params):
        p: float = setting(0.1, "rate", min=0.0, max=1.0, below=True)


@register("input_augment", "gaussian_noise")
class GaussianNoise(_Noise):
    """Add N(0, sigma) to every embedding value."""

    per_token = True

    def forward(self, values, gradient=None):
        return values + self.params.sigma * torch.randn_like(values)


@register("input_augment", "gaussian_dropout")
class GaussianDropout(_Noise):
    """Multiply every embedding value by N(1, sigma)."""

    per_token = True

    def forward(self, values, gradient=None):
        return values * (1 + self.params.sigma * torch.randn_like(values))


@register("input_augment", "bernoulli_dropout")
class BernoulliDropout(_Rate):
    """Dropout with rate p on the embedding values."""

    per_token = True

    def forward(self, values, gradient=None):
        return F.dropout(values, self.params.p, training=True)


@register("input_augment", "feature_dropout")
class FeatureDropout(_Rate):
    """Drop whole feature dimensions of a sentence with rate p."""

    def forward(self, values, gradient=None):
        keep = torch.rand(values.shape[0], 1, values.shape[2], device=values.device) >= self.params.p
        return values * keep / (1 - self.params.p)


@register("output_augment", "batch_noise")
class BatchNoise(Augment):
    """Add N(0, the batch's per-dimension std)."""

    def forward(self, values, gradient=None):
        return values + torch.randn_like(values) * values.detach().std(dim=0, keepdim=True)


@register("output_augment", "bernoulli_mask")
class BernoulliMask(_Rate):
    """Zero each dimension with rate p."""

    def forward(self, values, gradient=None):
        return values * (torch.rand_like(values) >= self.params.p)


class _MaskExtreme(Augment):
    largest = False

    @dataclass(frozen=True, kw_only=True)
    class Params(Augment.Params):
        fraction: float = setting(0.1, "fraction of the dimensions", min=0.0, max=1.0)

    def forward(self, values, gradient=None):
        count = int(round(self.params.fraction * values.shape[1]))
        chosen = values.detach().abs().topk(count, dim=1, largest=self.largest).indices
        return values.scatter(1, chosen, 0.0)


@register("output_augment", "mask_smallest")
class MaskSmallest(_MaskExtreme):
    """Zero the given fraction of dimensions smallest in absolute value."""


@register("output_augment", "mask_largest")
class MaskLargest(_MaskExtreme):
    """Zero the given fraction of dimensions largest in absolute value."""

    largest = True


@register("input_augment", "fgsm")
@register("output_augment", "fgsm")
class FGSM(Augment):
    """``values + epsilon * sign(gradient)``: the fast gradient sign step that increases the loss."""

    needs_gradient = True
    per_token = True

    @dataclass(frozen=True, kw_only=True)
    class Params(Augment.Params):
        epsilon: float = setting(0.001, "step size", min=0.0)

    def forward(self, values, gradient=None):
        return values + self.params.epsilon * gradient.sign()


def repetition_positions(lengths: list[int], rate: float, most: int) -> list[list[int]]:
    """ESimCSE's draw of the word-pieces to repeat (caskcsg/sentemb ESimCSE/train.py 516-518, ``dup_type bpe``), for
    rows of ``lengths`` tokens (special tokens included): a row of L tokens with ``int(rate * L) > 0`` repeats k of its
    inner tokens (never the first or the last), k uniform in ``0 .. min(most, int(rate * L)) - 1``, the k positions
    a uniform sample without replacement, sorted; other rows repeat none. Draws from torch's generator."""
    chosen = []
    for length in lengths:
        top = min(most, int(rate * length))
        count = int(torch.randint(top, ())) if top > 0 else 0
        chosen.append(sorted((torch.randperm(length - 2)[:count] + 1).tolist()) if count else [])
    return chosen


def repeat_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: list[list[int]], pad_id: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's tokens with the token at each of its ``positions`` written twice in a row, right-padded with
    ``pad_id`` to the longest row."""
    rows = []
    for ids, mask, repeated in zip(input_ids, attention_mask, positions, strict=True):
        tokens = ids[mask.bool()]
        counts = torch.ones_like(tokens)
        counts[repeated] = 2
        rows.append(tokens.repeat_interleave(counts))
    width = max(len(row) for row in rows)
    new_ids = input_ids.new_full((len(rows), width), pad_id)
    new_mask = attention_mask.new_zeros((len(rows), width))
    for r, row in enumerate(rows):
        new_ids[r, :len(row)], new_mask[r, :len(row)] = row, 1
    return new_ids, new_mask


@register("token_augment", "word_repetition")
class WordRepetition(TokenAugment):
    """ESimCSE's word repetition: some word-pieces of each sentence written twice (:func:`repetition_positions`),
    a positive that differs from its anchor in length but hardly in meaning."""

    @dataclass(frozen=True, kw_only=True)
    class Params(TokenAugment.Params):
        rate: float = setting(0.32, "dup_rate: a row of L tokens repeats fewer than min(most, int(rate * L)) "
                              "of them", min=0.0, max=1.0)
        most: int = setting(10, "the cap on the tokens a row repeats (the released code's 10)", min=1)

    def forward(self, input_ids, attention_mask, pad_id):
        positions = repetition_positions(attention_mask.sum(dim=1).tolist(), self.params.rate, self.params.most)
        return repeat_tokens(input_ids, attention_mask, positions, pad_id)

    def longest(self, length):
        return length + min(self.params.most, int(self.params.rate * length)) - 1
