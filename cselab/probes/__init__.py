"""Probes: score any encoder (STS, surface-structure bias, transfer and probing tasks, geometry) and write
results JSON."""

from cselab.lazy import exports

_WHERE = {"STS_SUITE": "cselab.probes.names", "run_probing": "cselab.probes.probing",
          "run_sts": "cselab.probes.sts", "run_transfer": "cselab.probes.transfer"}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
