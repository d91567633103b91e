"""How sure a sweep's comparison of methods is: an interval over seeds per method, and a test between methods that
counts both the seeds' and the pairs' variance.

Per method and column: Student's t 95% interval of the mean over seeds (:func:`~cselab.probes.significance.
t_interval`). Between methods, each against the sweep's first (its first method and grid point): the STS average's
difference with a hierarchical bootstrap interval and p-value over seeds and pairs
(:func:`~cselab.probes.significance.hierarchical`), read from each run's per-item outputs
(``results/SLUG.items.npz``), Holm-corrected across the methods compared. A difference *holds* when its corrected
p-value is below 0.05, its interval leaves 0 out and each side has at least :data:`FEW_SEEDS` seeds.
docs/comparing.md says why this and not Almost Stochastic Order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cselab.errors import DataError
from cselab.probes.paired import read_items
from cselab.probes.sts import sts_items
from cselab.document import Column, Formatted, Paragraph, Table, number, to_markdown
from cselab.probes.significance import RESAMPLES, hierarchical, holds, holm

FEW_SEEDS = 3  # below this many seeds a method's seed variance is hardly resampled


def _sts_matrix(out: Path, runs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[slice]] | None:
    """The runs' STS cosines as rows (pairs as columns), the gold scores and each task's columns; None when a run
    was scored without per-item outputs."""
    rows, gold, tasks = [], None, None
    for run in runs:
        named = str((run.get("items") or {}).get("file", ""))  # results/SLUG.items.npz beside results/SLUG.json
        items = read_items(out / "results" / named.replace(".items.npz", ".json"), run)
        if items is None:
            return None
        found = sts_items(items)
        if gold is None:
            bounds = np.cumsum([0] + [len(sims) for sims, _ in found.values()])
            tasks, names = [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])], list(found)
            gold = np.concatenate([g for _, g in found.values()])
        elif list(found) != names or not np.array_equal(np.concatenate([g for _, g in found.values()]), gold):
            raise DataError(f"{out / 'results' / run['items']['file']}: scored on other STS pairs than the sweep's "
                            "other runs; they are not compared")
        rows.append(np.concatenate([sims for sims, _ in found.values()]))
    assert gold is not None and tasks is not None  # runs holds a run or more: each label's
    return np.stack(rows), gold, tasks


def compare_methods(out: str | Path, results: list[dict[str, Any]], resamples: int = RESAMPLES, seed: int = 0
                    ) -> dict[str, Any]:
    """Each label's STS average against the first label's (see the module docstring)."""
    labels = list(dict.fromkeys(r["label"] for r in results))
    found = {label: _sts_matrix(Path(out), [r for r in results if r["label"] == label]) for label in labels}
    summary: dict[str, Any] = {"baseline": labels[0] if labels else None, "figure": "STS avg.",
                               "test": "hierarchical bootstrap over seeds, then pairs (Saravanan et al. 2020)",
                               "resamples": resamples, "seed": seed, "rows": []}
    matrices = {label: matrix for label, matrix in found.items() if matrix is not None}
    if len(labels) < 2 or len(matrices) < len(found):
        summary["skipped"] = ("fewer than two methods" if len(labels) < 2
                              else "a run was scored without per-item outputs (an older cselab): score it again")
        return summary
    base, gold, tasks = matrices[labels[0]]
    for label in labels[1:]:
        summary["rows"].append({"label": label, **hierarchical(base, matrices[label][0], gold, tasks, resamples, seed)})
    for row, adjusted in zip(summary["rows"], holm([row["p"] for row in summary["rows"]])):
        row["p_holm"] = adjusted
        row["holds"] = holds(row) and min(row["seeds"]) >= FEW_SEEDS
    return summary


def comparison_markdown(comparison: dict[str, Any]) -> str:
    """The between-method table, or the reason there is none."""
    if comparison.get("skipped"):
        return f"No between-method test: {comparison['skipped']}."
    title = (f"{comparison['figure']} against {comparison['baseline']}: {comparison['test']}, "
             f"{comparison['resamples']} resamples, seed {comparison['seed']}; p Holm-corrected across methods")
    body = [[row["label"], Formatted(f"{row['seeds'][0]} / {row['seeds'][1]}"), row["diff"], row["ci"], row["p"],
             row["p_holm"],
             "yes" if row["holds"] else f"no ({min(row['seeds'])} seed(s))" if min(row["seeds"]) < FEW_SEEDS
             else "no"] for row in comparison["rows"]]
    few = [row["label"] for row in comparison["rows"] if min(row["seeds"]) < FEW_SEEDS]
    note = [Paragraph(f"Fewer than {FEW_SEEDS} seeds on a side ({', '.join(few)}): the bootstrap cannot see the "
                      "spread between seeds that were not run, so these intervals are likely too narrow and no "
                      "difference is said to hold; run more seeds.")] if few else []
    table = Table(["Method", number("Seeds (base / it)"), number("Diff.", signed=True), Column("95% CI", "interval"),
                   number("p", 3), number("p (Holm)", 3), "Holds"], body)
    return to_markdown([Paragraph(title), table, *note])
