"""What scores an encoder and the :class:`Result` it gives. A :class:`Scorer` (the dev scorers training selects its
checkpoint with, :mod:`cselab.evaluation.dev`) is named, reads its data when it is first used, says what it read
(:meth:`Scorer.identity`: a resumed run must match it) and gives a :class:`Result`; the suites of ``probe run``
(:class:`cselab.probes.suite.Suite`) give the same :class:`Result`. Three words, three things: a *scorer* selects
checkpoints in training, a *suite* is a part of ``probe run``, and *probe* is that stage (its command and package)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cselab.encoders.base import Encoder
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
    """Scores an encoder. ``name`` is what a config or a results file calls it. A dev scorer is a plug-in of the
    registry's kind ``dev_scorer`` (:func:`cselab.registry.register`), built as ``cls(name, data_dir, limit)``:
    ``limit`` the pairs or lines per file it reads (None: all)."""

    name: str

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What the probe reads, by content (files' sha256) and settings: a run resumed against another identity is
        refused."""

    @abstractmethod
    def run(self, encoder: Encoder) -> Result:
        """Score ``encoder``."""


contract("dev_scorer", Scorer)
