"""Cached InfoNCE (``training.mini_batch_size``; GradCache, Gao et al. 2021, as sentence-transformers'
``CachedMultipleNegativesRankingLoss``): a contrastive batch larger than the activations that fit.

A step encodes the batch a mini-batch at a time without gradients, keeping only the views' vectors; the losses see
the whole batch's vectors (every row's in-batch negatives, gathered across processes as ever) and their backward
gives the gradient with respect to each vector; then each mini-batch is encoded again with gradients and that
gradient is passed back through it. Only one mini-batch's activations are alive at a time. Each mini-batch's random
generators (CPU and CUDA) are saved before its first pass and restored before its second, so that its dropout masks
and random augments are the same twice: the gradient is that of one pass over the batch that drew those masks.

It needs losses that read only the views' vectors: a loss that runs the encoder itself (``mlm``), a view whose
augment needs the gradient of the loss (FGSM) and a weight hook (SAM, AWP: a second pass at other weights) are
refused when the config loads (:func:`cselab.train.config.schema.check_cacheable`).
"""

from __future__ import annotations

import contextlib

import torch

from cselab.train.batches import Batch

Encoded = dict[str, tuple[torch.Tensor, list[int]]]


def mini_batch(batch: Batch, start: int, end: int) -> Batch:
    """Rows ``start`` to ``end`` of ``batch``, each view's tokens cut to the longest of those rows."""
    rows = {column: values[start:end] for column, values in batch.rows.items()}
    part = Batch(rows)
    for key, (present, ids, mask) in batch.tokens.items():
        mine = [k for k, row in enumerate(present) if start <= row < end]
        if not mine or ids is None or mask is None:  # (rows present have their tokens)
            part.tokens[key] = ([], None, None)
            continue
        ids, mask = ids[mine], mask[mine]
        width = int(mask.sum(dim=1).max())
        part.tokens[key] = ([present[k] - start for k in mine], ids[:, :width], mask[:, :width])
    return part


def _rng_state(device: torch.device) -> tuple:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _joined(pieces: list[Encoded], starts: list[int]) -> Encoded:
    """The mini-batches' vectors of each view as one batch's, leaves that collect their gradient."""
    joined = {}
    for name in pieces[0]:
        vectors = torch.cat([piece[name][0] for piece in pieces])
        joined[name] = (vectors.detach().requires_grad_(True),
                        [start + row for piece, start in zip(pieces, starts) for row in piece[name][1]])
    return joined


def cached_losses(model, objective, rows, mini_batch_size: int, initial_weights=None):
    """One batch's losses from its views encoded a mini-batch of ``mini_batch_size`` rows at a time without
    gradients (see the module docstring), and the function that, once the losses' backward has run, passes their
    gradient back through each mini-batch encoded again."""
    batch = objective.as_batch(model, rows)
    size = len(next(iter(batch.rows.values())))
    starts = list(range(0, size, mini_batch_size))
    device = next(getattr(model, "module", model).parameters()).device
    states, pieces = [], []
    with torch.no_grad():
        for start in starts:
            states.append(_rng_state(device))
            pieces.append(objective.encode(model, mini_batch(batch, start, start + mini_batch_size)))
    encoded = _joined(pieces, starts)

    def replay() -> None:
        after = _rng_state(device)
        for number, (start, state) in enumerate(zip(starts, states)):
            _set_rng_state(state, device)
            last = number == len(starts) - 1
            with contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync():
                again = objective.encode(model, mini_batch(batch, start, start + mini_batch_size))
                tensors, gradients = [], []
                for name, (vectors, _) in again.items():
                    gradient = encoded[name][0].grad
                    if gradient is not None and vectors.requires_grad:
                        offset = sum(len(piece[name][0]) for piece in pieces[:number])
                        tensors.append(vectors)
                        gradients.append(gradient[offset:offset + len(vectors)].to(vectors.dtype))
                if tensors:
                    torch.autograd.backward(tensors, gradients)
        _set_rng_state(after, device)

    return objective.losses_on(encoded, initial_weights, batch=batch), replay
