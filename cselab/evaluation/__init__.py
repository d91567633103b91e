"""Evaluation: the :class:`~cselab.evaluation.scoring.Scorer` interface and the scoring code the probe suites share
(STS similarities, SentEval's transfer features and classifiers)."""
