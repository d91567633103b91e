"""What scores an encoder and the :class:`Result` it gives: a :class:`Scorer` is named and gives a :class:`Result`.
The scorers are the suites of ``probe run`` (:class:`cselab.probes.suite.Suite`), built from the run's options, whose
results their :class:`~cselab.probes.suite.Presenter` reads; a suite on its dev split is also what training selects
its checkpoint with (:mod:`cselab.probes.dev`). *Probe* is that stage (its command and package)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cselab.encoders.base import Encoder


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
