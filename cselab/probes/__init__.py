"""Probes: score any encoder (STS so far) and write results JSON."""

from cselab.probes.metrics import cosine_rows, pearson, spearman
from cselab.probes.sts import STS_SUITE, run_sts

__all__ = ["STS_SUITE", "cosine_rows", "pearson", "run_sts", "spearman"]
