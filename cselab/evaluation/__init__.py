"""Evaluation: the :class:`~cselab.evaluation.probe.Probe` interface and the probes training selects its checkpoint
with (:mod:`cselab.evaluation.dev`). It lies below ``train`` and ``probes``, so that both use the same code."""
