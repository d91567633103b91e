"""Probes: score any encoder (STS, surface-structure bias, transfer and probing tasks, geometry) and write
results JSON."""

from cselab.probes.probing import run_probing
from cselab.probes.sts import STS_SUITE, run_sts
from cselab.probes.transfer import run_transfer

__all__ = ["STS_SUITE", "run_probing", "run_sts", "run_transfer"]
