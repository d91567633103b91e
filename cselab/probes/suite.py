"""The suites of ``probe run``, each a :class:`Suite`: a :class:`~cselab.evaluation.probe.Probe` made from the run's
:class:`ProbeOptions` that also writes its own report section. A suite registers itself with
:func:`register_suite` in the module that defines it; the runner and the report read suites only through this
registry, which imports every module of :mod:`cselab.probes` and every module a package declares in the
entry-point group ``cselab.suites`` to find them. Adding a suite to cselab is one module in ``cselab/probes/`` and
its name in :data:`cselab.probes.names.SUITES` (the list ``--help`` shows without importing the probes;
``tests/probes/test_suite.py`` checks the two agree); see docs/adding-a-probe.md.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from abc import abstractmethod
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar

from cselab.data.transfer import TRANSFER_TASKS
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError
from cselab.evaluation.setups import CLASSIFIER_SETUPS
from cselab.files import clipped
from cselab.evaluation.probe import Probe, Result
from cselab.normalizers import NORMALIZERS
from cselab.probes.names import SPLIT_RULES, STS_SUITE, SUITES
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


class Suite(Probe):
    """A suite of ``probe run``: ``run`` gives its section of the results JSON (``Result.scores``), its per-item
    outputs and the files it read; ``sections`` its part of the report. ``optional``: ``--suite all`` records why
    it was skipped when its data is missing, instead of stopping."""

    name: ClassVar[str]
    optional: ClassVar[bool] = False

    def __init__(self, options: ProbeOptions):
        self.options = options

    def identity(self) -> dict[str, Any]:
        return {"suite": self.name, **{key: str(value) if isinstance(value, os.PathLike) else value
                                       for key, value in asdict(self.options).items()}}

    @abstractmethod
    def run(self, encoder: Encoder) -> Result:
        """Score ``encoder``."""

    @abstractmethod
    def sections(self, section: dict[str, Any], spec: str) -> list[str]:
        """The report's Markdown for this suite's ``section`` of a results JSON of model ``spec``."""


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
    order = {name: i for i, name in enumerate(SUITES["all"])}
    return dict(sorted(_SUITES.items(), key=lambda item: order.get(item[0], len(order))))


def suite_parts(suite: str) -> tuple[str, ...]:
    """The suites a ``--suite`` value runs: one name, ``all``, or names joined by commas (``sts,bias``)."""
    known = suites()
    names = [name.strip() for name in suite.split(",")]
    unknown = [name for name in names if name not in known and name != "all"]
    if unknown:
        raise ConfigError(f"Unknown suite {', '.join(map(repr, unknown))}; choose from {', '.join(known)}, all, or "
                         "several joined by commas (sts,bias)")
    return tuple(name for name in known if "all" in names or name in names)


def suite_sections(payload: dict[str, Any]) -> list[str]:
    """The Markdown sections of every suite in a payload, in suite order."""
    spec = payload["model"]["spec"]
    return [text for name, cls in suites().items() if name in payload
            for text in cls(ProbeOptions()).sections(payload[name], spec)]
