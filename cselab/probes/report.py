"""Printable tables of probe results."""

from __future__ import annotations

from typing import Any



def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def sts_table(scores: dict[str, Any], model: str) -> str:
    """A Markdown table: one column per task (its headline Spearman x 100) and the average."""
    names = [name for name in scores if name != "avg"]
    header = ["Model", *names, "Avg."]
    row = [model, *(_cell(scores[name]["all"]) for name in names), _cell(scores["avg"])]
    widths = [max(len(a), len(b)) for a, b in zip(header, row)]
    lines = [header, ["-" * w for w in widths], row]
    return "\n".join("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths)) + " |" for line in lines)


