"""What scores an encoder and the :class:`Result` it gives: a :class:`Scorer` is named and gives a :class:`Result`.
Two kinds of scorer: a :class:`DevScorer` (the dev scorers training selects its checkpoint with,
:mod:`cselab.evaluation.dev`), which reads its data when it is first used and says what it read
(:meth:`DevScorer.identity`: a resumed run must match it), and a suite of ``probe run``
(:class:`cselab.probes.suite.Suite`), built from the run's options, whose results its
:class:`~cselab.probes.suite.Presenter` reads. *Probe* is that stage (its command and package)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cselab.encoders.base import Encoder
from cselab import boundary
from cselab.registry import contract


@dataclass
class Result:
    """A probe's scores (JSON-ready), its headline figure (higher is better; None when undefined, e.g. a constant
    encoder), its per-item outputs (name -> array, what paired comparisons resample), the data files it read and
    its metadata (JSON-ready settings and bookkeeping that are not scores: the classifier setup, timings ...)."""

    scores: dict[str, Any]
    headline: float | None
    items: dict[str, np.ndarray] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


class Scorer(ABC):
    """Scores an encoder. ``name`` is what a config or a results file calls it."""

    name: str

    @abstractmethod
    def run(self, encoder: Encoder) -> Result:
        """Score ``encoder``."""


class DevScorer(Scorer):
    """A scorer training selects its checkpoint with: a plug-in of the registry's kind ``dev_scorer``
    (:func:`cselab.registry.register`), built as ``cls(name, data_dir, limit)``: ``limit`` the pairs or lines per
    file it reads (None: all)."""

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What the scorer reads, by content (files' sha256) and settings: a run resumed against another identity is
        refused."""


contract("dev_scorer", DevScorer, {"run": boundary.instance(Result, what="a cselab.evaluation.scoring.Result")})
