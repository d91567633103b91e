"""Two results of ``probe run`` compared item by item: every figure's difference with its interval and p-value.

Each results JSON names its per-item outputs (``OUT.items.npz``, see docs/results-json.md); a suite of two results is
compared item by item only when both scored the same items (:func:`item_conflicts`: the same data files by sha256,
the same limit, and for the transformation probe the same test set; :func:`splits_comparable` for Cont./Oppn.).
The figures: each STS task's Spearman x 100 over its pooled pairs and their average; Cont., Oppn. and the gap (each
part weighted by its size); paraphrase over negation (%); the CANNOT cosine; each transfer and probing task's test
accuracy and their averages.
Within a table the p-values are Holm-corrected across its rows (the average row apart); a difference *holds*
(:func:`~cselab.probes.significance.holds`) when its corrected p-value is below 0.05 and its interval leaves 0
out. See :mod:`cselab.probes.significance`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from cselab.checksum import sha256
from cselab.errors import DataError
from cselab.files import clipped, shown
from cselab.probes.results import data_key, suite_setting
from cselab.probes.significance import RESAMPLES, Stratum, compare, holds, holm

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


PAIRED_SUITES = ("sts", "bias", "transfer", "probing")
TRANSFORMATIONS = "bias.transformations"  # the bias suite's transformation probe, whose items are its test set's


def item_inputs(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per suite a result scored, what decides which items it scored: ``--limit`` and the data files the suite read
    (by name, with their sha256; every file the result read for a result that does not say which suite read which);
    the bias suite's transformation probe apart (:data:`TRANSFORMATIONS`), by its test set's sha256. (The split rule
    and MER normalisation decide only which pairs are Cont. and Oppn.: :func:`splits_comparable` checks those.)"""
    data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
    digests = data.get("sha256") if isinstance(data.get("sha256"), dict) else {}
    read_by = data.get("read_by") if isinstance(data.get("read_by"), dict) else None
    found: dict[str, dict[str, Any]] = {}
    for suite in PAIRED_SUITES:
        section = payload.get(suite)
        if not isinstance(section, dict):
            continue
        names = set(read_by.get(suite, []) if read_by is not None else digests)
        if suite == "bias":
            transformations = section.get("transformations", {})
            testset = transformations.get("testset")
            if testset and data.get("root"):
                names.discard(data_key(testset, data["root"]))
            found[TRANSFORMATIONS] = {"the transformation test set": transformations.get("sha256")}
        found[suite] = {"--limit": payload.get("limit"), **{f"file:{name}": digests.get(name) for name in names}}
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
    figures (the encoder's settings where both have them, the suites' classifier setup and split rule, the limit;
    a suite only one of them ran aside), then the provenance (weights, device, torch's flags, cselab's commit, the
    command)."""
    pairs = {f"model.{key}": (a["model"].get(key), b["model"].get(key)) for key in SETTINGS
             if None not in (a["model"].get(key), b["model"].get(key)) or key == "prompt"}  # None: not applicable
    pairs["limit"] = (a.get("limit"), b.get("limit"))
    for name, setting in (("transfer classifier", lambda r: suite_setting(r.get("transfer", {}), "classifier")),
                          ("split rule", lambda r: suite_setting(r.get("bias", {}).get("splits", {}), "split_rule"))):
        both = (setting(a), setting(b))
        if None not in both:
            pairs[name] = both
    found: dict[str, tuple[Any, Any]] = {}
    mine, theirs = a.get("provenance") or {}, b.get("provenance") or {}
    for key in sorted(set(mine) | set(theirs)):
        x, y = mine.get(key), theirs.get(key)
        if isinstance(x, dict) and isinstance(y, dict):  # one level down: which device field, which flag
            found.update({f"provenance.{key}.{sub}": (x.get(sub), y.get(sub)) for sub in sorted(set(x) | set(y))})
        else:
            found[f"provenance.{key}"] = (x, y)
    return _differing(pairs), _differing(found)


def _groups(items: dict[str, np.ndarray], prefix: str) -> dict[str, list[str]]:
    """``prefix/TASK/...`` keys by task, in the order ``probe run`` wrote them (its tables' order)."""
    groups: dict[str, list[str]] = {}
    for key in items:
        if key.startswith(prefix + "/"):
            groups.setdefault(key[len(prefix) + 1:].split("/")[0], []).append(key)
    return groups


def _aligned(a: dict[str, np.ndarray], b: dict[str, np.ndarray], key: str) -> tuple[np.ndarray, np.ndarray]:
    if a[key].shape != b[key].shape:
        raise DataError(f"{key}: {a[key].shape[0]} items in one result, {b[key].shape[0]} in the other; results "
                        "over different items are not compared")
    return a[key].astype(np.float64), b[key].astype(np.float64)


def sts_items(items: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each STS task's cosines and gold scores over its pooled subsets, in the table's order."""
    tasks = {}
    for task, keys in _groups(items, "sts").items():
        sims = [key for key in keys if key.endswith("/sim")]
        tasks[task] = (np.concatenate([items[k] for k in sims]).astype(np.float64),
                       np.concatenate([items[k[:-4] + "/gold"] for k in sims]).astype(np.float64))
    return tasks


def _sts(a, b) -> dict[str, list[Stratum]]:
    rows, theirs = {}, sts_items(b)
    for task, (sims, gold) in sts_items(a).items():
        if task not in theirs:
            continue
        if theirs[task][0].shape != sims.shape or not np.array_equal(theirs[task][1], gold):
            raise DataError(f"sts/{task}: the two results' pairs differ ({len(sims)} and {len(theirs[task][0])} "
                            "pairs, or other gold scores); results over different items are not compared")
        rows[task] = [Stratum(sims, theirs[task][0], gold)]
    return rows


def _accuracy(a, b, suite: str) -> dict[str, list[Stratum]]:
    rows = {}
    for task in _groups(a, suite):
        key = f"{suite}/{task}"
        if f"{key}/pred" not in b:
            continue
        if not np.array_equal(a[f"{key}/label"], b[f"{key}/label"]):
            raise DataError(f"{key}: the two results' test items differ; results over different items are not "
                            "compared")
        pa, pb = _aligned(a, b, f"{key}/pred")
        labels = a[f"{key}/label"]
        rows[task] = [Stratum((pa == labels).astype(np.float64), (pb == labels).astype(np.float64))]
    return rows


def splits_comparable(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Whether two results split the same pairs into the same Cont. and Oppn. parts (another split rule or MER
    normalisation does not), so that their Cont./Oppn. figures can be compared pair by pair."""
    mine = {key for key in a if key.startswith("bias/splits/")}
    theirs = {key for key in b if key.startswith("bias/splits/")}
    return mine == theirs and all(np.array_equal(a[k], b[k]) for k in mine if k.endswith(("/cont", "/gold")))


def _bias(a, b, transformations: bool = True) -> dict[str, tuple[list[Stratum], float]]:
    rows: dict[str, tuple[list[Stratum], float]] = {}
    subsets = [k[:-4] for k in sorted(a) if k.startswith("bias/splits/") and k.endswith("/sim") and k in b]
    if subsets and splits_comparable(a, b):
        parts = {}
        for part, keep in (("Cont.", True), ("Oppn.", False)):
            strata = []
            for key in subsets:
                mask = a[key + "/cont"] == keep
                x, y = _aligned(a, b, key + "/sim")
                strata.append(Stratum(x[mask], y[mask], a[key + "/gold"][mask].astype(np.float64), int(mask.sum())))
            total = sum(s.weight for s in strata)
            parts[part] = [Stratum(s.a, s.b, s.gold, s.weight / total) for s in strata if s.weight]
            rows[part] = (parts[part], 100.0)
        rows["Gap"] = (parts["Cont."] + [Stratum(s.a, s.b, s.gold, -s.weight) for s in parts["Oppn."]], 100.0)
    key = "bias/transformations/paraphrase_over_negation"
    if transformations and key in a and key in b:
        rows["Para > neg (%)"] = ([Stratum(*_aligned(a, b, key))], 100.0)
    cannot = [k for k in sorted(a) if k.startswith("bias/cannot/") and k in b]
    if cannot:
        pairs = [_aligned(a, b, k) for k in cannot]
        rows["CANNOT cos."] = ([Stratum(np.concatenate([x for x, _ in pairs]), np.concatenate([y for _, y in pairs]))],
                               1.0)
    return rows


def _table(figures: dict[str, tuple[list[Stratum], float]], average: str | None, resamples: int, seed: int
           ) -> list[dict[str, Any]]:
    """One row per figure, Holm across them; with ``average``, a last row of their mean (its own test)."""
    rows = [{"name": name, **compare(strata, scale, resamples, seed)} for name, (strata, scale) in figures.items()]
    for row, adjusted in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = adjusted
    if average and len(figures) > 1:
        strata = [Stratum(s.a, s.b, s.gold, s.weight / len(figures)) for group, _ in figures.values() for s in group]
        scale = next(iter(figures.values()))[1]
        rows.append({"name": average, **compare(strata, scale, resamples, seed)})
        rows[-1]["p_holm"] = rows[-1]["p"]
    for row in rows:
        row["holds"] = holds(row)
    return rows


def paired_tables(a: dict[str, np.ndarray], b: dict[str, np.ndarray], resamples: int = RESAMPLES, seed: int = 0,
                  skip: tuple[str, ...] = ()) -> dict[str, list[dict[str, Any]]]:
    """Every figure both results have, B against A, as tables by suite: ``sts``, ``bias``, ``transfer``,
    ``probing``; the suites (and :data:`TRANSFORMATIONS`) in ``skip``, whose items differ (:func:`item_conflicts`),
    are left out."""
    tables = {}
    sts = {task: (strata, 100.0) for task, strata in _sts(a, b).items()} if "sts" not in skip else {}
    if sts:
        tables["sts"] = _table(sts, "Avg.", resamples, seed)
    bias = _bias(a, b, TRANSFORMATIONS not in skip) if "bias" not in skip else {}
    if bias:
        tables["bias"] = _table(bias, None, resamples, seed)
    for suite in (name for name in ("transfer", "probing") if name not in skip):
        figures = {task: (strata, 100.0) for task, strata in _accuracy(a, b, suite).items()}
        if figures:
            tables[suite] = _table(figures, "Avg.", resamples, seed)
    return tables
