"""Evaluation: the :class:`~cselab.evaluation.scoring.Scorer` interface and the dev scorers training selects its
checkpoint with (:mod:`cselab.evaluation.dev`). It lies below ``train`` and ``probes``, so that both use the same
code."""
