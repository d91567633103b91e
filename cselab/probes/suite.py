"""The suites of ``probe run``, each two halves: a :class:`Suite`, made from the run's :class:`ProbeOptions`, scores
an encoder (a :class:`~cselab.evaluation.scoring.Scorer`; on its dev split, what ``training.dev`` selects
checkpoints with, :mod:`cselab.probes.dev`); its :class:`Presenter` serves every
reader of its part of a stored results JSON (report, comparison, paired statistics, plots, sweeps) and needs no
options. A suite registers itself with :func:`register_suite` in the module that defines it, as a plug-in of
:mod:`cselab.registry` (kind ``suite``); the runner reads suites only through :func:`suites`, and the report, ``probe
compare`` and sweeps read their presenters only through :func:`presenters`, which find them as every plug-in kind is
found: every module of :mod:`cselab.probes` and every module a package declares in the entry-point group
``cselab.suites``. Adding a suite to cselab is one module in ``cselab/probes/``, which imports no model library at its
top (``probe run --help`` reads every suite's options); see docs/adding-a-probe.md.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from cselab import boundary
from cselab.document import Block, Heading, Table, check_blocks, number
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError, did_you_mean
from cselab.metrics import MIN_PAIRS
from cselab.evaluation.scoring import Result, Scorer
from cselab.probes.significance import Stratum
from cselab.registry import (MAX_SEED, REQUIRED, Checked, Param, contract, described, get, names, register, schema_of,
                             setting)


@dataclass
class ProbeOptions(Checked):
    """What a probe run reads and how: the settings every suite reads (the fields below) and each suite's own
    (:attr:`Suite.Options`) by name in ``settings``, ``ProbeOptions(limit=40, settings={"tasks": ("stsb",)})``. Checked
    when built, each suite's settings against its own declaration (an unknown name is refused) and completed with the
    declarations' defaults, as ``probe run``'s options, which are generated from the same declarations. A suite reads
    its own, typed, as ``self.params`` (:meth:`Suite.settings_from`)."""

    where = "probe options"

    data_dir: str | os.PathLike | None = setting(None, "the data root (default: $CSELAB_DATA_DIR)")
    batch_size: int = setting(64, "sentences per forward pass", min=1)
    limit: int | None = setting(None, "use only the first N pairs of each data file (quick checks)", min=2)
    seed: int = setting(0, "the seed of resampling, classifiers and bootstraps", min=0, max=MAX_SEED)
    settings: dict[str, Any] = setting({}, "each suite's own settings by name (Suite.Options)")

    def rules(self) -> None:
        """Each suite's settings checked against its declaration, with the defaults of those not given."""
        declared = suite_settings()
        schema = {name: param for name, (param, _) in declared.items()}
        unknown = sorted(set(self.settings) - set(schema))
        if unknown:
            known = sorted({*schema, *(f.name for f in fields(self) if f.name != "settings")})
            raise ConfigError(f"{self.where}.{unknown[0]}: unknown setting{did_you_mean(unknown[0], known)}; known: "
                              f"{', '.join(known)}")
        values: dict[str, Any] = {}
        for options in dict.fromkeys(cls.Options for _, owners in declared.values() for cls in owners
                                     if cls.Options is not None):
            # each suite's Options built once: its settings checked, coerced and completed, its rules run
            own = schema_of(options)
            built = options(**{name: self.settings[name] for name in own if name in self.settings})
            values.update({name: getattr(built, name) for name in own})
        self.settings = {name: values[name] for name in schema}


SPLITS = ("test", "dev")


def split_setting() -> Any:
    """The ``split`` setting of a suite that can score dev data (``training.dev``, :mod:`cselab.probes.dev`): one
    declaration, which every such suite shares."""
    return setting("test", "the split scored: test (the papers' tables) or dev (what training.dev selects "
                   "checkpoints with; no test file is read)", choices=SPLITS)


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


class Presenter:
    """What reads a suite's section of a stored results JSON, so it works on results written earlier and needs no
    options: the report (:meth:`sections`), ``probe compare`` (:meth:`main_scores`, :meth:`compare_sections`,
    :meth:`compare_notes`, :meth:`settings`; :meth:`paired` and :meth:`item_inputs` for its paired statistics),
    sweeps (:meth:`sweep_columns`) and :meth:`plots`. Each method has a default that a suite's presenter overrides to
    take part; it reads the suite's declarations through ``self.suite`` (``name``, ``title``, ``main``,
    ``metadata``). The report, ``probe compare`` and sweeps reach a suite's results only through these, over
    :func:`presenters`; none names a suite."""

    def __init__(self, suite: type[Suite]):
        self.suite = suite

    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        """The report's blocks (:mod:`cselab.document`) for the suite's ``section`` of a results JSON of model
        ``spec``: by default its title and a table of its main scores."""
        scores = self.main_scores(section)
        return [Heading(self.suite.title),
                Table(["Model", *(number(s.label, s.digits) for s in self.suite.main.values())],
                      [[spec, *(scores[key] for key in self.suite.main)]])]

    def main_scores(self, section: dict[str, Any]) -> dict[str, float | None]:
        """The main scores of ``section``, keyed as the suite's ``main`` (None where the result has none)."""
        return {key: section.get(key) for key in self.suite.main}

    def sweep_columns(self, section: dict[str, Any]) -> dict[str, float | None]:
        """The columns a sweep's summary gives this suite (mean ± std over seeds): its main scores."""
        return self.main_scores(section)

    def scores(self, section: dict[str, Any]) -> dict[str, Any]:
        """``section`` without the suite's ``metadata`` keys."""
        return {key: value for key, value in section.items() if key not in self.suite.metadata}

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
        return {self.suite.name: inputs}

    def paired(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: frozenset[str]
               ) -> PairedFigures | None:
        """The figures of two results' per-item arrays (``a``, ``b``) to compare item by item, B against A; the
        scopes in ``skip`` scored other items. None: this suite is compared by its aggregates only."""
        return None

    def plots(self, section: dict[str, Any], out: Path, spec: str) -> dict[Path, str]:
        """Pictures of ``section`` (model ``spec``) beside the results JSON ``out`` (``OUT.NAME.png``), each with its
        caption."""
        return {}


PRESENTING = frozenset(name for name in vars(Presenter) if not name.startswith("_"))  # what readers call


def _blocks(presenter: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    try:
        check_blocks(result, "")
    except TypeError:
        return "a list of cselab.document blocks (Heading, Paragraph, Table, Figure)"
    return None


def _notes(presenter: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    return None if isinstance(result, list) and all(isinstance(n, str) for n in result) else "a list of strings"


_MAPPING = boundary.instance(dict, what="a dict")
#: What each of a presenter's methods returns, checked where it returns it (cselab.boundary).
PRESENTER_WORK: dict[str, boundary.Check | None] = {
    "sections": _blocks, "compare_sections": _blocks, "compare_notes": _notes, "main_scores": _MAPPING,
    "sweep_columns": _MAPPING, "scores": _MAPPING, "settings": _MAPPING, "item_inputs": _MAPPING, "plots": _MAPPING,
    "paired": boundary.instance(PairedFigures, type(None), what="a PairedFigures or None")}
assert set(PRESENTER_WORK) == PRESENTING


class Suite(Scorer):
    """A suite of ``probe run``: what it is (its declarations, read by every reader of its results) and how it scores
    an encoder (:meth:`run`); what reads its results is its :attr:`presenter`.

    Declared: ``name`` (its key in the results JSON and ``--suite``), ``title`` (its heading in comparisons),
    ``main`` (its main scores: key in its section -> :class:`Score`), ``Options`` (its own settings: a
    :class:`~cselab.registry.Checked` dataclass of :func:`~cselab.registry.setting` fields, each of which becomes a
    setting of :class:`ProbeOptions` and an option of ``probe run``; the suite reads them typed as ``self.params``;
    one named ``split`` with a ``dev`` choice lets ``training.dev`` select checkpoints with the suite,
    :mod:`cselab.probes.dev`), ``metadata`` (the keys of its section that are
    settings or bookkeeping, not scores), ``optional`` (``--suite all`` records why it was skipped when its data
    is missing, instead of stopping), ``in_all`` (False: ``--suite all`` leaves it out, it runs only by name),
    ``rank`` (its place in ``--suite all``, reports and comparisons: cselab's own are 10 to 60, a suite that does not
    say comes after them, by name) and ``presenter`` (its :class:`Presenter` class; the default reports its main
    scores).

    Required: :meth:`run` (a :class:`~cselab.evaluation.scoring.Result`: ``scores`` and ``metadata`` apart, which
    together are its section of the results JSON; per-item arrays named ``NAME/...``; the data files read).
    """

    title: ClassVar[str]
    main: ClassVar[dict[str, Score]] = {}
    Options: ClassVar[type[Checked] | None] = None
    metadata: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[bool] = False
    in_all: ClassVar[bool] = True
    rank: ClassVar[int] = 100
    presenter: ClassVar[type[Presenter]] = Presenter

    params: Checked | None  # the suite's own settings, typed (an instance of its Options; None without)

    def __init__(self, options: ProbeOptions | None = None):
        self.options = ProbeOptions() if options is None else options
        self.params = self.settings_from(self.options)

    @classmethod
    def settings_from(cls, options: ProbeOptions) -> Any:
        """This suite's :attr:`Options` built from ``options.settings`` (its own names only; None without Options):
        what it reads as ``self.params``, as a plug-in reads its Params."""
        if cls.Options is None:
            return None
        return cls.Options(**{name: options.settings[name] for name in schema_of(cls.Options)
                              if name in options.settings})

    def __init_subclass__(cls, **kwargs: Any):
        """A suite whose ``presenter`` is not a :class:`Presenter`, or that defines a presenter's method itself
        (where no reader would call it), is refused where it is defined."""
        super().__init_subclass__(**kwargs)
        if not (isinstance(cls.presenter, type) and issubclass(cls.presenter, Presenter)):
            raise TypeError(f"{cls.__qualname__}.presenter = {cls.presenter!r}: expected a subclass of "
                            "cselab.probes.suite.Presenter")
        misplaced = sorted(name for name in vars(cls) if name in PRESENTING)
        if misplaced:
            raise TypeError(f"{cls.__qualname__}.{misplaced[0]}: a presenter's method, never called on a suite; "
                            "define it on a Presenter subclass, the suite's presenter")
        boundary.guard(cls.presenter, PRESENTER_WORK, lambda presenter: described(presenter.suite))

    @abstractmethod
    def run(self, encoder: Encoder) -> Result:
        """Score ``encoder``."""

    def files(self) -> list[Path]:
        """The data files a run of this suite reads under its options, found without encoding anything: what a dev
        set's identity hashes (:mod:`cselab.probes.dev`); a suite that can score a dev split says."""
        raise NotImplementedError(f"suite {self.name}: files() is not implemented")

    @classmethod
    def least_limit(cls, settings: Mapping[str, Any]) -> int:
        """The smallest ``limit`` (pairs or lines per file) the suite scores under its own ``settings``: by default
        a rank correlation's two."""
        return MIN_PAIRS


contract("suite", Suite, {"run": boundary.instance(Result, what="a cselab.evaluation.scoring.Result")})


def register_suite(cls: type[Suite]) -> type[Suite]:
    """Class decorator: make ``cls`` the suite named ``cls.name`` (a plug-in of the registry's kind ``suite``); a
    suite shown by the default presenter declares its ``title`` and at least one main score."""
    if cls.presenter is Presenter and not (getattr(cls, "title", None) and cls.main):
        raise TypeError(f"suite {cls.name!r}: the default presenter reports the suite's title and main scores, and "
                        "it declares none; declare them (title, main) or give it a presenter of its own")
    return register("suite", cls.name)(cls)


def suites() -> dict[str, type[Suite]]:
    """Every suite by name, in the order of their ``rank`` (then of their names), once every module that declares
    one is imported (:func:`cselab.registry.discover`: cselab's probe modules, then the ``cselab.suites`` entry
    points)."""
    found = [(name, get("suite", name).cls) for name in names("suite")]
    return dict(sorted(found, key=lambda item: (item[1].rank, item[0])))


def presenters() -> dict[str, Presenter]:
    """Every suite's presenter by name, in suite order (:func:`suites`)."""
    return {name: cls.presenter(cls) for name, cls in suites().items()}


def suite_settings() -> dict[str, tuple[Param, tuple[type[Suite], ...]]]:
    """Every suite's own settings (:attr:`Suite.Options`) by name: its declaration and the suites declaring it. Two
    suites share a setting (``classifier``: transfer and probing) by declaring it alike, as a common base of their
    Options does; declared otherwise, under a name :class:`ProbeOptions` already has (a field, a method), or without a
    default (``probe run`` and reports build every suite's options unasked), it is refused."""
    common = {f.name for f in fields(ProbeOptions)} | {name for name in dir(ProbeOptions) if not name.startswith("_")}
    found: dict[str, tuple[Param, tuple[type[Suite], ...]]] = {}
    for name, cls in suites().items():
        for key, param in (schema_of(cls.Options) if cls.Options is not None else {}).items():
            if key in common:
                raise ConfigError(f"suite {name}: its setting {key!r} is a name every probe run's options have "
                                  f"({', '.join(sorted(common))}); give it a name of its own")
            if param.default is REQUIRED:
                raise ConfigError(f"suite {name}: its setting {key!r} has no default; give it one (a probe run "
                                  "that does not run the suite builds its options too)")
            if key in found and found[key][0] != param:
                raise ConfigError(f"suite {name}: its setting {key!r} is declared otherwise by suite "
                                  f"{found[key][1][0].name}; share one declaration (a common base of their Options) "
                                  "or give it a name of its own")
            found[key] = (param, (*found[key][1], cls) if key in found else (cls,))
    return found


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
    return [block for name, presenter in presenters().items() if name in payload
            for block in check_blocks(presenter.sections(payload[name], spec), f"suite {name}: sections()")]
