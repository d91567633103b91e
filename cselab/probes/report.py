"""Printable tables and Markdown reports of probe results."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _cell(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table whose columns are padded to line up in a terminal."""
    widths = [max(len(str(line[i])) for line in [header, *rows]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join("| " + " | ".join(str(cell).ljust(w) for cell, w in zip(line, widths)) + " |" for line in lines)


def sts_table(scores: dict[str, Any], model: str) -> str:
    """One column per task (its headline Spearman x 100) and the average."""
    names = [name for name in scores if name != "avg"]
    return markdown_table(["Model", *names, "Avg."],
                          [[model, *(_cell(scores[name]["all"]) for name in names), _cell(scores["avg"])]])


def bias_tables(bias: dict[str, Any]) -> str:
    """Headline bias figures, the per-subset Cont./Oppn. table, transformations and CANNOT."""
    splits, transformations = bias["splits"], bias["transformations"]
    accuracy = transformations["paraphrase_over_negation"]
    parts = [
        "### Surface-structure bias (Spearman x 100)",
        markdown_table(["Cont. (wavg)", "Oppn. (wavg)", "Gap", "Paraphrase > negation"],
                       [[_cell(splits["cont_wavg"]), _cell(splits["oppn_wavg"]), _cell(splits["gap"]),
                         f"{_cell(accuracy['accuracy'] and 100 * accuracy['accuracy'], 1)}% of {accuracy['n']}"]]),
        "### Cont. and Oppn. per subset",
        markdown_table(["Subset", "Cont.", "Oppn.", "#Cont.", "#Oppn."],
                       [[name, _cell(v["cont"]), _cell(v["oppn"]), str(v["n_cont"]), str(v["n_oppn"])]
                        for name, v in splits["subsets"].items()]),
        f"### Transformations ({transformations['n_sources']} sources, {Path(transformations['testset']).name})",
        markdown_table(["Type", "n", "Mean cosine", "Mean MER"],
                       [[kind, str(v["n"]), _cell(v["mean_cosine"], 3), _cell(v["mean_mer"], 3)]
                        for kind, v in transformations["types"].items()]),
    ]
    cannot = bias["cannot"]
    parts.append("### Negation pairs (CANNOT): similarity of a sentence and its negation")
    if "skipped" in cannot:
        parts.append(f"Skipped: {cannot['skipped']}")
    else:
        rows = [[name, str(v["n"]), _cell(v["mean_cosine"], 3), _cell(v["mean_mer"], 3)]
                for name, v in {**cannot["sets"], "all": cannot["all"]}.items()]
        parts.append(markdown_table(["Set", "n", "Mean cosine", "Mean MER"], rows))
    return "\n\n".join(parts)


def markdown_report(payload: dict[str, Any], plots: Sequence[str | os.PathLike] = ()) -> str:
    """The whole report of one results JSON, pictures linked by file name."""
    model = payload["model"]
    parts = [f"# Probe report: {model['spec']}",
             f"Suite `{payload['suite']}`, {model['class']}"
             + (f", pooler `{model['pooler']}`" if "pooler" in model else "")
             + f"; cselab {payload['cselab_version']}, wall time {payload['wall_time_s']} s"
             + (f"; first {payload['limit']} pairs per file only" if payload.get("limit") else "") + "."]
    if "sts" in payload:
        parts += ["## STS (Spearman x 100)", sts_table(payload["sts"], model["spec"])]
    if "bias" in payload:
        parts += ["## Bias probes", bias_tables(payload["bias"])]
        parts += [f"![cosine against MER per transformation]({Path(p).name})" for p in plots]
    return "\n\n".join(parts) + "\n"


def compare_table(payloads: Sequence[dict[str, Any]]) -> str:
    """Models side by side: STS average, Cont., Oppn., gap, paraphrase-over-negation accuracy, CANNOT cosine."""
    rows = []
    for payload in payloads:
        sts, bias = payload.get("sts", {}), payload.get("bias", {})
        splits = bias.get("splits", {})
        accuracy = bias.get("transformations", {}).get("paraphrase_over_negation", {}).get("accuracy")
        cannot = bias.get("cannot", {}).get("all", {}).get("mean_cosine")
        rows.append([payload["model"]["spec"], _cell(sts.get("avg")), _cell(splits.get("cont_wavg")),
                     _cell(splits.get("oppn_wavg")), _cell(splits.get("gap")),
                     _cell(accuracy and 100 * accuracy, 1), _cell(cannot, 3)])
    return markdown_table(["Model", "STS avg.", "Cont.", "Oppn.", "Gap", "Para > neg (%)", "CANNOT cos."], rows)
