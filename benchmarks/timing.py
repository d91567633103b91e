"""Timing a training step the same way in every benchmark: warm-up steps first, the device synchronised around each
timed one, and the process's peak memory (max RSS on CPU, peak allocated on CUDA)."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

import torch


def time_steps(step: Callable[[int], None], count: int, device: str, warmup: int = 2) -> tuple[float, float]:
    """Run ``step(i)`` (a whole optimizer step) ``count`` times; the mean seconds of those after ``warmup``, and the
    peak memory in MiB."""
    times = []
    for i in range(count):
        if device == "cuda":
            torch.cuda.synchronize()
        clock = time.perf_counter()
        step(i)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - clock)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return sum(times) / len(times), peak
