"""Two results of ``probe run`` compared item by item: every figure's difference with its interval and p-value.

Each results JSON names its per-item outputs (``OUT.items.npz``, see docs/results-json.md); a suite of two results is
compared item by item only when both scored the same items (:func:`item_conflicts`: the same data files by sha256,
the same limit, and what else a suite's :meth:`~cselab.probes.suite.Presenter.item_inputs` names). Which figures, from
which items, with which statistic, each suite says (:meth:`~cselab.probes.suite.Presenter.paired`): e.g. each STS task's
Spearman x 100 over its pooled pairs; Cont., Oppn. and the gap; each transfer task's test accuracy.
Within a table the p-values are Holm-corrected across its rows (the average row apart); a difference *holds*
(:func:`~cselab.probes.significance.holds`) when its corrected p-value is below 0.05 and its interval leaves 0
out. See :mod:`cselab.probes.significance`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from cselab import progress
from cselab.checksum import sha256
from cselab.errors import DataError
from cselab.files import clipped, shown
from cselab.probes.significance import RESAMPLES, Stratum, compare, holds, holm
from cselab.probes.suite import PairedFigures, presenters

SETTINGS = ("pooler", "prompt", "max_length", "dtype", "normalize")


def read_items(path: str | os.PathLike, payload: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The per-item arrays a results JSON names, checked against its sha256; None for a result without them."""
    named = payload.get("items")
    if not isinstance(named, dict) or "file" not in named:
        return None
    file = Path(path).parent / Path(str(named["file"])).name
    if not file.is_file() or sha256(file) != named.get("sha256"):
        raise DataError(f"{file}: missing, or not the per-item file {path} was written with (its sha256 differs)")
    try:
        with np.load(file, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as err:
        raise DataError(f"{file}: not a per-item archive ({clipped(err)})") from None


def item_inputs(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per scope a result scored (each suite, or a part of one compared apart: :meth:`Presenter.item_inputs`), what
    decides which items it scored: ``--limit`` and the data files the suite read (by name, with their sha256; every
    file the result read for a result that does not say which suite read which). (The bias suite's split rule and
    MER normalisation decide only which pairs are Cont. and Oppn.: its presenter's
    :meth:`~cselab.probes.suite.Presenter.paired` checks those.)"""
    data = payload.get("data")
    data = data if isinstance(data, dict) else {}
    digests = data.get("sha256")
    digests = digests if isinstance(digests, dict) else {}
    read_by = data.get("read_by")
    read_by = read_by if isinstance(read_by, dict) else None
    found: dict[str, dict[str, Any]] = {}
    for name, presenter in presenters().items():
        section = payload.get(name)
        if not isinstance(section, dict):
            continue
        names = read_by.get(name, []) if read_by is not None else digests
        inputs = {"--limit": payload.get("limit"), **{f"file:{file}": digests.get(file) for file in names}}
        found.update(presenter.item_inputs(section, inputs, data))
    return found


def item_conflicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[str]]:
    """Per suite (or :data:`TRANSFORMATIONS`) both results scored, why their items cannot be paired one by one
    (:func:`item_inputs` that differ: a data file both read in another version, another test set or limit); those
    whose items are the same are left out."""
    mine, theirs = item_inputs(a), item_inputs(b)
    conflicts = {}
    for scope in (name for name in mine if name in theirs):
        reasons = []
        for key in sorted(set(mine[scope]) | set(theirs[scope]), key=lambda k: (k.startswith("file:"), k)):
            x, y = mine[scope].get(key), theirs[scope].get(key)
            if key.startswith("file:"):
                if key in mine[scope] and key in theirs[scope] and x != y:
                    reasons.append(f"{key[5:]} (another version of the file: its sha256 differs)")
            elif x != y:
                reasons.append(f"{key} ({shown(x, 20)} vs {shown(y, 20)})")
        if reasons:
            conflicts[scope] = reasons
    return conflicts


def _differing(pairs: dict[str, tuple[Any, Any]]) -> list[str]:
    return [f"{name}: {x!r} vs {y!r}" for name, (x, y) in pairs.items() if x != y]


def setting_differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What differs between how two results were made, as ``field: A vs B``: first the settings that change the
    figures (the encoder's settings where both have them, the limit, each suite's
    :meth:`~cselab.probes.suite.Presenter.settings`; a suite only one of them ran aside), then the provenance (weights,
    device, torch's flags, cselab's commit, the command)."""
    pairs = {f"model.{key}": (a["model"].get(key), b["model"].get(key)) for key in SETTINGS
             if None not in (a["model"].get(key), b["model"].get(key)) or key == "prompt"}  # None: not applicable
    pairs["limit"] = (a.get("limit"), b.get("limit"))
    for name, presenter in presenters().items():
        if isinstance(a.get(name), dict) and isinstance(b.get(name), dict):
            mine, theirs = presenter.settings(a[name]), presenter.settings(b[name])
            pairs.update({key: (mine[key], theirs[key]) for key in mine if key in theirs
                          and None not in (mine[key], theirs[key])})
    found: dict[str, tuple[Any, Any]] = {}
    mine, theirs = a.get("provenance") or {}, b.get("provenance") or {}
    for key in sorted(set(mine) | set(theirs)):
        x, y = mine.get(key), theirs.get(key)
        if isinstance(x, dict) and isinstance(y, dict):  # one level down: which device field, which flag
            found.update({f"provenance.{key}.{sub}": (x.get(sub), y.get(sub)) for sub in sorted(set(x) | set(y))})
        else:
            found[f"provenance.{key}"] = (x, y)
    return _differing(pairs), _differing(found)


def item_groups(items: dict[str, np.ndarray], prefix: str) -> dict[str, list[str]]:
    """``prefix/TASK/...`` keys by task, in the order ``probe run`` wrote them (its tables' order)."""
    groups: dict[str, list[str]] = {}
    for key in items:
        if key.startswith(prefix + "/"):
            groups.setdefault(key[len(prefix) + 1:].split("/")[0], []).append(key)
    return groups


def aligned(a: dict[str, np.ndarray], b: dict[str, np.ndarray], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Both results' array ``key`` as floats, refused when their lengths differ."""
    if a[key].shape != b[key].shape:
        raise DataError(f"{key}: {a[key].shape[0]} items in one result, {b[key].shape[0]} in the other; results "
                        "over different items are not compared")
    return a[key].astype(np.float64), b[key].astype(np.float64)


def _table(figures: dict[str, tuple[list[Stratum], float]], average: str | None, resamples: int, seed: int
           ) -> list[dict[str, Any]]:
    """One row per figure, Holm across them; with ``average`` (:func:`_averaged`), a last row of their mean (its own
    test)."""
    rows = []
    for name, (strata, scale) in figures.items():
        rows.append({"name": name, **compare(strata, scale, resamples, seed)})
        progress.advance()
    for row, adjusted in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = adjusted
    if _averaged(figures, average):
        strata = [Stratum(s.a, s.b, s.gold, s.weight / len(figures)) for group, _ in figures.values() for s in group]
        scale = next(iter(figures.values()))[1]
        rows.append({"name": average, **compare(strata, scale, resamples, seed)})
        rows[-1]["p_holm"] = rows[-1]["p"]
        progress.advance()
    for row in rows:
        row["holds"] = holds(row)
    return rows


def paired_figures(a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: tuple[str, ...] = ()
                   ) -> dict[str, PairedFigures]:
    """Each suite's figures of two results' per-item arrays, B against A
    (:meth:`~cselab.probes.suite.Presenter.paired`, with what it left out in its ``notes``); the scopes in ``skip``,
    whose items differ (:func:`item_conflicts`), are left out."""
    found = {name: presenter.paired(a, b, frozenset(skip)) for name, presenter in presenters().items()
             if name not in skip}
    return {name: figures for name, figures in found.items() if figures is not None}


def _averaged(figures: dict[str, Any], average: str | None) -> bool:
    """Whether a table of ``figures`` gets a last row, their mean: when it names one and there are several."""
    return bool(average) and len(figures) > 1


def table_rows(figures: dict[str, PairedFigures]) -> int:
    """How many rows :func:`paired_tables` computes for ``figures`` (each an interval and a p-value)."""
    return sum(len(found.figures) + _averaged(found.figures, found.average) for found in figures.values())


def paired_tables(a: dict[str, np.ndarray], b: dict[str, np.ndarray], resamples: int = RESAMPLES, seed: int = 0,
                  skip: tuple[str, ...] = (), figures: dict[str, PairedFigures] | None = None
                  ) -> dict[str, list[dict[str, Any]]]:
    """Every figure both results have, B against A, as a table per suite (of ``figures``, else
    :func:`paired_figures`'s)."""
    figures = paired_figures(a, b, skip) if figures is None else figures
    return {name: _table(found.figures, found.average, resamples, seed) for name, found in figures.items()
            if found.figures}
