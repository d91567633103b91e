"""The blocks of probe reports (:mod:`cselab.document`): one result's report, models side by side and their
paired differences."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cselab.document import (Block, Figure, Formatted, Heading, Paragraph, Table, check_blocks, fixed, number,
                             to_markdown)
from cselab.errors import ConfigError, DataError
from cselab.files import clipped, read_json
from cselab.probes.paired import (item_conflicts, paired_figures, paired_tables, read_items, setting_differences,
                                  table_rows)
from cselab.progress import Progress, current
from cselab.probes.significance import ALPHA, LEVEL, RESAMPLES
from cselab.probes.suite import presenters, suites

def report_blocks(payload: dict[str, Any], sections: Sequence[Block], plots: dict[Path, str] | None = None
                  ) -> list[Block]:
    """The whole report of one results JSON: its header, the suites' ``sections``, pictures (path -> caption)."""
    model = payload["model"]
    return [Heading(f"Probe report: {model['spec']}", 1),
            Paragraph(f"Suite `{payload['suite']}`, {model['class']}"
                      + (f", pooler `{model['pooler']}`" if "pooler" in model else "")
                      + f"; cselab {payload['cselab_version']}, wall time {payload['wall_time_s']} s"
                      + (f"; first {payload['limit']} pairs per file only" if payload.get("limit") else "") + "."),
            *sections, *(Figure(path, caption) for path, caption in (plots or {}).items())]


def result_names(paths: Sequence[str], payloads: Sequence[dict[str, Any]], labels: dict[str, str] | None = None
                 ) -> list[str]:
    """What each result is called in a comparison: its ``--label`` (``labels``: path as given, or 1-based position
    -> name), else its model's spec, followed by its file where two results share one."""
    labels = dict(labels or {})
    unknown = [key for key in labels if key not in paths and key not in map(str, range(1, len(paths) + 1))]
    if unknown:
        raise ConfigError(f"--label {unknown[0]}={labels[unknown[0]]}: {unknown[0]} is neither a result given "
                          f"({', '.join(paths)}) nor its position (1 to {len(paths)})")
    twice = next((path for i, path in enumerate(paths, 1) if path in labels and str(i) in labels), None)
    if twice is not None:
        i = str(paths.index(twice) + 1)
        raise ConfigError(f"--label: {twice} is labelled twice, by its file ({labels[twice]}) and by its position {i} "
                          f"({labels[i]}); give one label")
    specs = [p["model"]["spec"] for p in payloads]
    names = [labels.get(path, labels.get(str(i), spec if specs.count(spec) == 1 else f"{spec} ({path})"))
             for i, (path, spec) in enumerate(zip(paths, specs), 1)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"--label: {repeated[0]!r} names two results; give each its own label")
    return names


def _named(payloads: Sequence[dict[str, Any]], names: Sequence[str] | None) -> Sequence[str]:
    """``names``, else each result's model spec."""
    return names or [p["model"]["spec"] for p in payloads]


def compare_table(payloads: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> list[Block]:
    """Models side by side: every suite's main scores (:attr:`Suite.main`), in suite order, for the suites any of
    the results has; then what each suite notes about comparing them (:meth:`Presenter.compare_notes`). ``names``:
    the rows' (default: the model specs)."""
    names = _named(payloads, names)
    columns, notes = [], []
    for name, presenter in presenters().items():
        sections = [p[name] for p in payloads if isinstance(p.get(name), dict)]
        if sections:
            columns += [(name, presenter, key, score) for key, score in presenter.suite.main.items()]
            notes += presenter.compare_notes(sections)
    rows = []
    for payload, shown_as in zip(payloads, names):
        values = {name: presenter.main_scores(payload[name]) for name, presenter, _, _ in columns
                  if isinstance(payload.get(name), dict)}
        rows.append([shown_as, *(values.get(name, {}).get(key) for name, _, key, _ in columns)])
    table = [Table(["Model", *(number(score.label, score.digits) for *_, score in columns)], rows)] if columns else []
    return [*table, *map(Paragraph, notes)]


def compare_report(payloads: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> list[Block]:
    """The summary table, then each suite's comparison of the results that have it
    (:meth:`Presenter.compare_sections`); ``names`` as :func:`compare_table`'s."""
    names = _named(payloads, names)
    blocks = compare_table(payloads, names)
    for name, presenter in presenters().items():
        having = [(shown_as, p[name]) for p, shown_as in zip(payloads, names) if isinstance(p.get(name), dict)]
        if having:
            blocks += check_blocks(presenter.compare_sections(having), f"suite {name}: compare_sections()")
    return blocks


def differences_report(paths: Sequence[str], payloads: Sequence[dict[str, Any]], baseline: int = 0,
                       resamples: int = RESAMPLES, seed: int = 0, show: bool = True,
                       names: Sequence[str] | None = None) -> list[Block]:
    """Every other result against the baseline's: per suite, each figure's difference (other - baseline) with its
    paired bootstrap interval, permutation p-value and Holm-corrected p-value, and whether it holds; then what
    differs in how the results were made. A suite whose items differ between the two (another version of a data
    file, another test set ...: :func:`~cselab.probes.paired.item_conflicts`) is not compared item by item, with a
    warning naming what differs and both files; the tables above still show its aggregates. ``show``: progress of
    the resampling (:mod:`cselab.progress`); ``names`` as :func:`compare_table`'s."""
    items = [read_items(path, payload) for path, payload in zip(paths, payloads)]
    names = _named(payloads, names)
    name = names[baseline]
    files = [shown_as if path in shown_as else f"{shown_as} ({path})" for path, shown_as in zip(paths, names)]
    blocks: list[Block] = [
        Heading(f"Differences against {name}"),
        Paragraph(f"Paired over the items both were scored on: bootstrap {int(100 * LEVEL)}% interval (percentile, "
             f"{resamples} resamples), two-sided permutation p-value ({resamples} resamples), seed {seed}; p (Holm) "
             f"corrected across the rows of a table (the average apart); p ≤ {2 / (resamples + 1):.2g} is the floor "
             f"of {resamples} permutations (2/{resamples + 1}: none was as extreme). *holds*: p (Holm) < {ALPHA} and "
                  "the interval leaves 0 out.")]
    for index, (path, payload) in enumerate(zip(paths, payloads)):
        if index == baseline:
            continue
        spec = names[index]
        conflicts = item_conflicts(payloads[baseline], payload)
        for scope, reasons in conflicts.items():
            suite, _, part = scope.partition(".")
            what = f"the {suite} suite's {part}" if part else f"the {suite} suite"
            blocks.append(Paragraph(f"**Warning**: {files[index]} and {files[baseline]} were not scored on the same "
                                    f"items of {what}, so its figures are compared as aggregates only (the tables "
                                    f"above), not item by item; differing ({name} vs {spec}): " + "; ".join(reasons)
                                    + "."))
        base_items, own_items = items[baseline], items[index]
        if base_items is None or own_items is None:
            missing = path if own_items is None else paths[baseline]
            blocks += [Heading(spec, 3), Paragraph(f"{missing} has no per-item outputs (written before they were "
                                                  "kept): no intervals.")]
            continue
        figures = paired_figures(base_items, own_items, tuple(conflicts))
        with Progress(f"probe compare {spec}", table_rows(figures), "figure", enabled=show) as bar, current(bar):
            tables = paired_tables(base_items, own_items, resamples, seed, figures=figures)
        blocks += [Paragraph(f"{spec} vs {name}: {note}.") for found in figures.values() for note in found.notes]
        blocks += _difference_tables(tables, name, spec, resamples)
        settings, provenance = setting_differences(payloads[baseline], payload)
        if settings:
            blocks.append(Paragraph(f"**Warning**: {files[index]} was scored with other settings than "
                                    f"{files[baseline]}, so part of a difference may be theirs ({name} vs {spec}): "
                                    + "; ".join(settings) + "."))
        if provenance:
            blocks.append(Paragraph(f"Provenance ({name} vs {spec}): " + "; ".join(provenance) + "."))
    return blocks


def p_cell(p: float, resamples: int) -> Formatted:
    """A p-value for a table: three decimals, two significant digits below 0.001, and ``≤ FLOOR`` at the smallest
    value ``resamples`` random permutations give (2/(resamples+1), two-sided: none was as extreme)."""
    floor = 2 / (resamples + 1)
    if math.isnan(p):
        return Formatted("n/a")
    if math.isclose(p, floor, rel_tol=1e-9):
        return Formatted(f"≤ {floor:.2g}")
    return Formatted(f"{p:.3f}" if p >= 0.001 else f"{p:.2g}")


def _difference_tables(tables: dict[str, list[dict[str, Any]]], name: str, spec: str, resamples: int
                       ) -> list[Block]:
    blocks: list[Block] = []
    known = suites()
    for suite, rows in tables.items():
        digits = {score.label: score.digits for score in known[suite].main.values()}
        body = []
        for r in rows:  # a row's decimals are its figure's (Score.digits)
            places = digits.get(r["name"], 2)
            body.append([r["name"], fixed(r["a"], places), fixed(r["b"], places), fixed(r["diff"], places, True),
                         fixed(r["ci"], places), p_cell(r["p"], resamples), p_cell(r["p_holm"], resamples),
                         "yes" if r["holds"] else "no"])
        blocks += [Heading(f"{spec} vs {name}: {known[suite].title}", 3),
                   Table(["Figure", number(name), number(spec), number("Diff."),
                          number(f"{int(100 * LEVEL)}% CI"), number("p"), number("p (Holm)"), "Holds"],
                         body)]
    return blocks


def read_results(paths: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """The results JSONs ``probe run`` wrote, each read through :func:`cselab.files.read_json` (size and depth
    bounded) and checked to be one: a file whose fields have other types is a DataError naming it."""
    payloads = []
    for path in paths:
        payload = read_json(path, DataError)
        if not isinstance(payload.get("model"), dict) or not isinstance(payload["model"].get("spec"), str):
            raise DataError(f"{path}: not a results JSON of `probe run` (no model.spec)")
        try:
            to_markdown(compare_report([payload]))  # every field the comparison reads, of the type it expects
        except (AttributeError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as err:
            raise DataError(f"{path}: not a results JSON of `probe run`: a field has another type or is missing "
                            f"({type(err).__name__}: {clipped(err, 80)})") from None
        payloads.append(payload)
    return payloads
