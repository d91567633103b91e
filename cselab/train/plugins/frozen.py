"""Frozen encoders a training plug-in names by spec (RankCSE's teachers, GISTEmbed's guide): any encoder ``probe run
--model`` takes (a cselab checkpoint, a sentence-transformers or static folder, a hub name). Each encodes the batch's
texts with its own tokenizer, cut at the training length, through the embedding cache (:mod:`cselab.encoders.cache`),
so a sentence seen before (another epoch, a resumed run) is not encoded again. It loads on the training device at
the first batch (the cache is keyed by the device that computes a vector) and stays out of the trained state.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch

from cselab.errors import ConfigError
from cselab.train.plugins.kinds import LossContext

if TYPE_CHECKING:
    from cselab.encoders.base import Encoder


def load_frozen(spec: str, pooler: str | None, length: int | None, device: torch.device, role: str) -> Encoder:
    """The encoder ``spec`` (with ``pooler``, None: its own) in float32 on ``device``, cutting at ``length``; one it
    cannot load is one line naming its ``role`` (``teacher``, ``guide``)."""
    from cselab.encoders.loading import load_encoder

    try:
        return load_encoder(spec, pooler=pooler, max_length=length, device=str(device), dtype="float32")
    except ConfigError as err:
        raise ConfigError(f"{role} {spec}: {err} (it cuts a sentence at the training length, "
                          "training.max_length)") from None


def frozen_vectors(encoder: Encoder, texts: list[str], device: torch.device) -> torch.Tensor:
    """``encoder``'s vectors of ``texts`` on ``device``, one batch. A text longer than the training length is cut
    there, as the trained model's is: that cut is the method's, so it says nothing of it."""
    if not texts:
        return torch.zeros((0, encoder.dim), device=device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*longer than max_length")
        return torch.from_numpy(encoder.encode(texts, batch_size=max(len(texts), 1))).to(device)


def aligned_texts(context: LossContext, names: list[str], who: str) -> list[list[str]]:
    """The texts of views ``names`` in the rows that have all of them, in their order (``who`` names the plug-in
    that reads them, in the error when the loss was given none)."""
    if context.texts is None:
        raise ConfigError(f"{who}: it encodes the views' texts; none were given")
    common = sorted(set.intersection(*(set(context.encoded[name][1]) for name in names)))
    texts = [dict(zip(context.encoded[name][1], context.texts(name), strict=True)) for name in names]
    return [[by_row[row] for row in common] for by_row in texts]
