"""The suites of ``probe run``, each a :class:`Suite` made from the run's :class:`ProbeOptions`: it scores an encoder
and serves every reader of its part of a results JSON (report, comparison, paired statistics, plots, sweeps). A suite
registers itself with :func:`register_suite` in the module that defines it; the runner, the report, ``probe compare``
and sweeps read suites only through this registry, which imports every module of :mod:`cselab.probes` and every
module a package declares in the entry-point group ``cselab.suites`` to find them. Adding a suite to cselab is one
module in ``cselab/probes/`` and its name in :data:`cselab.probes.names.SUITES` (the list ``--help`` shows without
importing the probes; ``tests/probes/test_suite.py`` checks the two agree); see docs/adding-a-probe.md.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from importlib.metadata import entry_points
from typing import Any, ClassVar

import numpy as np

from cselab.data.transfer import TRANSFER_TASKS
from cselab.document import Block, check_blocks
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError, did_you_mean
from cselab.evaluation.setups import CLASSIFIER_SETUPS
from cselab.files import clipped
from cselab.evaluation.scoring import Result
from cselab.normalizers import NORMALIZERS
from cselab.probes.names import SPLIT_RULES, STS_SUITE, SUITES
from cselab.probes.significance import Stratum
from cselab.registry import MAX_SEED, Checked, Param, setting


@dataclass
class ProbeOptions(Checked):
    """What a probe run reads and how; defaults are the CLI's. Checked when built, as every config object is."""

    where = "probe options"

    data_dir: str | os.PathLike | None = setting(None, os.PathLike, "the data root (default: $CSELAB_DATA_DIR)",
                                                 nullable=True)
    tasks: tuple[str, ...] = setting(STS_SUITE, tuple, "the STS tasks of the sts suite (the data layer knows them)",
                                     items=Param(str))
    testset: str | os.PathLike | None = setting(None, os.PathLike, "a transformation test set (JSONL)",
                                                nullable=True)
    mer_normalize: str = setting("lower", str, "text normalisation before MER", choices=tuple(NORMALIZERS))
    batch_size: int = setting(64, int, "sentences per forward pass", min=1)
    limit: int | None = setting(None, int, "pairs per STS subset (a quick look)", min=2, nullable=True)
    seed: int = setting(0, int, "the seed of resampling and classifiers", min=0, max=MAX_SEED)
    classifier: str = setting("full", str, "the transfer and probing classifier setup",
                              choices=tuple(CLASSIFIER_SETUPS))
    n_jobs: int = setting(1, int, "processes training the classifiers", min=1)
    transfer_tasks: tuple[str, ...] = setting(TRANSFER_TASKS, tuple, "the transfer tasks (the data layer knows "
                                              "them)", items=Param(str))
    probing_dir: str | os.PathLike | None = setting(None, os.PathLike, "the probing tasks' folder", nullable=True)
    split_rule: str = setting("paper", str, "the Cont./Oppn. split rule", choices=tuple(SPLIT_RULES))
    mteb_tasks: tuple[str, ...] = setting((), tuple, "the tasks of the mteb suite (NAME or NAME=FOLDER)",
                                          items=Param(str))


@dataclass(frozen=True)
class Score:
    """A main score of a suite: its label in ``probe compare``'s table and the sweep's, and its decimals."""

    label: str
    digits: int = 2


@dataclass(frozen=True)
class PairedFigures:
    """A suite's figures compared item by item between two results: label -> (strata, scale) for
    :func:`~cselab.probes.significance.compare`; ``average``: the label of a last row, their mean."""

    figures: dict[str, tuple[list[Stratum], float]]
    average: str | None = None
    notes: tuple[str, ...] = ()  # what was left out of the figures, and why


class Suite(ABC):
    """A suite of ``probe run``, and everything that reads its part of a results JSON: the one contract a suite has.

    Declared: ``name`` (its key in the results JSON and ``--suite``), ``title`` (its heading in comparisons),
    ``main`` (its main scores: key in its section -> :class:`Score`), ``metadata`` (the keys of its section that are
    settings or bookkeeping, not scores), ``optional`` (``--suite all`` records why it was skipped when its data
    is missing, instead of stopping) and ``in_all`` (False: ``--suite all`` leaves it out, it runs only by name).

    Required: :meth:`run` (a :class:`~cselab.evaluation.scoring.Result`: ``scores`` and ``metadata`` apart, which
    together are its section of the results JSON; per-item arrays named ``NAME/...``; the data files read) and
    :meth:`sections` (its part of the report, as :mod:`cselab.document` blocks). Each of the others has a default
    that a suite overrides to take part: :meth:`main_scores` (the columns of ``probe compare``'s table and of a
    sweep's, :meth:`sweep_columns`), :meth:`compare_sections` (tables of several results), :meth:`paired` (which
    items, which statistic: the figures ``probe compare`` gives an interval and a p-value), :meth:`item_inputs`
    (what decides which items were scored), :meth:`settings` (recorded settings that change the figures) and
    :meth:`plots`. The runner, the report, ``probe compare`` and sweeps reach a suite only through these, over
    :func:`suites`; none names a suite. Every method but :meth:`run` reads a section of a stored results JSON, so
    it works on results written earlier.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    main: ClassVar[dict[str, Score]]
    metadata: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[bool] = False
    in_all: ClassVar[bool] = True

    def __init__(self, options: ProbeOptions | None = None):
        self.options = ProbeOptions() if options is None else options

    @abstractmethod
    def run(self, encoder: Encoder) -> Result:
        """Score ``encoder``."""

    @abstractmethod
    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        """The report's blocks (:mod:`cselab.document`) for this suite's ``section`` of a results JSON of model
        ``spec``."""

    def main_scores(self, section: dict[str, Any]) -> dict[str, float | None]:
        """The main scores of ``section``, keyed as :attr:`main` (None where the result has none)."""
        return {key: section.get(key) for key in self.main}

    def sweep_columns(self, section: dict[str, Any]) -> dict[str, float | None]:
        """The columns a sweep's summary gives this suite (mean ± std over seeds): its main scores."""
        return self.main_scores(section)

    def scores(self, section: dict[str, Any]) -> dict[str, Any]:
        """``section`` without its :attr:`metadata`."""
        return {key: value for key, value in section.items() if key not in self.metadata}

    def compare_sections(self, sections: list[tuple[str, dict[str, Any]]]) -> list[Block]:
        """Blocks comparing the sections of several results (model spec, section), after the summary table."""
        return []

    def compare_notes(self, sections: list[dict[str, Any]]) -> list[str]:
        """Lines under the summary table about comparing these sections (settings that make them incomparable)."""
        return []

    def settings(self, section: dict[str, Any]) -> dict[str, Any]:
        """The settings a section records that change its figures, by name (differences are warned about)."""
        return {}

    def item_inputs(self, section: dict[str, Any], inputs: dict[str, Any], data: dict[str, Any]
                    ) -> dict[str, dict[str, Any]]:
        """Per scope (this suite, or a part of it compared apart), what decides the items it scored; ``inputs``:
        ``--limit`` and the data files it read (``file:NAME`` -> sha256), ``data``: the results JSON's ``data``."""
        return {self.name: inputs}

    def paired(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: frozenset[str]
               ) -> PairedFigures | None:
        """The figures of two results' per-item arrays (``a``, ``b``) to compare item by item, B against A; the
        scopes in ``skip`` scored other items. None: this suite is compared by its aggregates only."""
        return None

    def plots(self, section: dict[str, Any], out: Path, spec: str) -> dict[Path, str]:
        """Pictures of ``section`` (model ``spec``) beside the results JSON ``out`` (``OUT.NAME.png``), each with its
        caption."""
        return {}


_SUITES: dict[str, type[Suite]] = {}
ENTRY_POINTS = "cselab.suites"


def register_suite(cls: type[Suite]) -> type[Suite]:
    """Class decorator: make ``cls`` the suite named ``cls.name``."""
    if cls.name in _SUITES and _SUITES[cls.name] is not cls:
        raise ValueError(f"suite {cls.name!r} is registered twice")
    _SUITES[cls.name] = cls
    return cls


def suites() -> dict[str, type[Suite]]:
    """Every registered suite by name, in the order of ``--suite all`` (a package's after cselab's), once every
    probe module and every ``cselab.suites`` entry point is imported."""
    package = importlib.import_module("cselab.probes")
    for found in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"cselab.probes.{found.name}")
    for entry in entry_points(group=ENTRY_POINTS):
        try:
            importlib.import_module(entry.value.split(":")[0])
        except Exception as err:  # the package's module to fix, named with the package
            raise ConfigError(f"entry point {entry.name} of {entry.dist.name if entry.dist else 'a package'}: "
                              f"importing {entry.value!r} failed: {type(err).__name__}: {clipped(err)}") from None
    order = {name: i for i, name in enumerate(name for name in SUITES if name != "all")}
    return dict(sorted(_SUITES.items(), key=lambda item: order.get(item[0], len(order))))


def suite_parts(suite: str) -> tuple[str, ...]:
    """The suites a ``--suite`` value runs: one name, ``all``, or names joined by commas (``sts,bias``)."""
    known = suites()
    names = [name.strip() for name in suite.split(",")]
    unknown = [name for name in names if name not in known and name != "all"]
    if unknown:
        raise ConfigError(f"Unknown suite {', '.join(map(repr, unknown))}{did_you_mean(unknown[0], [*known, 'all'])}; "
                          f"choose from {', '.join(known)}, all, or several joined by commas (sts,bias)")
    return tuple(name for name, cls in known.items() if ("all" in names and cls.in_all) or name in names)


def suite_sections(payload: dict[str, Any]) -> list[Block]:
    """The report blocks of every suite in a payload, in suite order."""
    spec = payload["model"]["spec"]
    return [block for name, cls in suites().items() if name in payload
            for block in check_blocks(cls().sections(payload[name], spec), f"suite {name}: sections()")]
