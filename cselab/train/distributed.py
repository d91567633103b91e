"""Losses over the whole batch when it is split across processes (``accelerate launch``, DDP).

Each process encodes its share of a batch. :func:`gather_rows` gives every process all the
rows of a view, in rank order, with the gradient flowing back to the process that owns each
row, so in-batch negatives are those of the whole batch. :func:`global_mean` turns one
process's per-row losses into its share of the mean over every process's rows, scaled so
that DDP's averaging of gradients yields the gradient of that mean: a run on two processes
takes the same steps as a run on one with the same batch (dropout aside).

Without an initialised process group both are the identity (and the plain mean).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        rank = dist.get_rank()
        ctx.span = sum(sizes[:rank]), sum(sizes[:rank + 1])
        padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
        padded[:len(tensor)] = tensor
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad)  # every process's loss contributes to the gradient of this process's rows
        start, end = ctx.span
        return grad[start:end], None


def gather_rows(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Every process's rows of ``tensor`` (row counts may differ) and where this process's rows start."""
    if world_size() == 1:
        return tensor, 0
    count = torch.tensor([len(tensor)], device=tensor.device)
    counts = [torch.empty_like(count) for _ in range(world_size())]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in counts]
    return _GatherRows.apply(tensor, sizes), sum(sizes[:dist.get_rank()])


def global_count(count: int, device: torch.device | str = "cpu") -> int:
    """``count`` summed over processes."""
    if world_size() == 1:
        return count
    total = torch.tensor([count], device=device)
    dist.all_reduce(total)
    return int(total)


def global_mean(values: torch.Tensor) -> torch.Tensor | None:
    """This process's share of the mean of per-row ``values`` over every process; None when no process has a row."""
    total = global_count(len(values), values.device)
    if total == 0:
        return None
    return values.sum() * world_size() / total
