"""Printable tables, Markdown and HTML reports of probe results."""

from __future__ import annotations

import base64
import html
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cselab.errors import ConfigError, DataError
from cselab.files import clipped, read_json
from cselab.probes.paired import (item_conflicts, paired_figures, paired_tables, read_items, setting_differences,
                                  table_rows)
from cselab.progress import Progress, current
from cselab.probes.results import suite_setting
from cselab.probes.significance import ALPHA, LEVEL, RESAMPLES
from cselab.probes.suite import suites

def cell(value: float | None, digits: int = 2) -> str:
    """A figure for a table: ``digits`` decimals, or n/a."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def table_cell(value: Any) -> str:
    """A value as the text of a Markdown table cell: a ``|`` in it (a user's label) escaped, so that it stays in its
    cell, and a line break as a space."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table whose columns are padded to line up in a terminal."""
    header, rows = [table_cell(c) for c in header], [[table_cell(c) for c in row] for row in rows]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join("| " + " | ".join(str(cell).ljust(w) for cell, w in zip(line, widths)) + " |" for line in lines)


def sts_table(scores: dict[str, Any], model: str) -> str:
    """One column per task (its headline Spearman x 100) and the average."""
    names = [name for name in scores if name != "avg"]
    return markdown_table(["Model", *names, "Avg."],
                          [[model, *(cell(scores[name]["all"]) for name in names), cell(scores["avg"])]])


def bias_tables(bias: dict[str, Any]) -> str:
    """Headline bias figures, the per-subset Cont./Oppn. table, transformations and CANNOT."""
    splits, transformations = bias["splits"], bias["transformations"]
    accuracy = transformations["paraphrase_over_negation"]
    parts = [
        "### Surface-structure bias (Spearman x 100)",
        f"Cont./Oppn. over {len(splits['subsets'])} subsets, split rule "
        f"`{suite_setting(splits, 'split_rule', 'footnote')}` "
        f"({suite_setting(splits, 'split_rule_description', 'median gold score in [2, 3.5]')}); averages weight each "
        "part by its own size, as the paper's Table 3.",
        markdown_table(["Cont. (wavg)", "Oppn. (wavg)", "Gap", "Paraphrase > negation"],
                       [[cell(splits["cont_wavg"]), cell(splits["oppn_wavg"]), cell(splits["gap"]),
                         f"{cell(accuracy['accuracy'] and 100 * accuracy['accuracy'], 1)}% of {accuracy['n']}"]]),
        "### Cont. and Oppn. per subset",
        markdown_table(["Subset", "Cont.", "Oppn.", "#Cont.", "#Oppn."],
                       [[name, cell(v["cont"]), cell(v["oppn"]), str(v["n_cont"]), str(v["n_oppn"])]
                        for name, v in splits["subsets"].items()]),
        f"### Transformations ({transformations['n_sources']} sources, {Path(transformations['testset']).name})",
        markdown_table(["Type", "n", "Mean cosine", "Mean MER"],
                       [[kind, str(v["n"]), cell(v["mean_cosine"], 3), cell(v["mean_mer"], 3)]
                        for kind, v in transformations["types"].items()]),
    ]
    cannot = bias["cannot"]
    parts.append("### Negation pairs (CANNOT): similarity of a sentence and its negation")
    if "skipped" in cannot:
        parts.append(f"Skipped: {cannot['skipped']}")
    else:
        rows = [[name, str(v["n"]), cell(v["mean_cosine"], 3), cell(v["mean_mer"], 3)]
                for name, v in {**cannot["sets"], "all": cannot["all"]}.items()]
        parts.append(markdown_table(["Set", "n", "Mean cosine", "Mean MER"], rows))
    return "\n\n".join(parts)


def geometry_tables(geometry: dict[str, Any]) -> str:
    """Alignment/uniformity, the layer-wise measures and STS after PCA."""
    au = geometry["alignment_uniformity"]
    parts = ["### Alignment and uniformity (STS-B dev, normalized vectors; lower is better)",
             markdown_table(["Alignment", "Uniformity", "Positive pairs", "Sentences"],
                            [[cell(au["alignment"], 3), cell(au["uniformity"], 3), str(au["positive_pairs"]),
                              str(au["sentences"])]])]
    layers = geometry["layers"]
    parts.append("### By layer (STS-B test; layer 0 = embeddings)")
    if "skipped" in layers:
        parts.append(f"Skipped: {layers['skipped']}")
    else:
        poolers = list(layers["sts_by_layer"])
        rows = [[str(i), cell(layers["token_similarity"][i], 3),
                 cell(layers["inter_layer_cosine"][i - 1], 3) if i else "",
                 *(cell(layers["sts_by_layer"][p][i]) for p in poolers)] for i in range(layers["layers"] + 1)]
        parts.append(markdown_table(["Layer", "TokSim", "Cosine to previous layer",
                                     *(f"STS-B {p}" for p in poolers)], rows))
    pca = geometry["pca"]
    parts.append("### STS after PCA (Spearman x 100)")
    if "skipped" in pca:
        parts.append(f"Skipped: {pca['skipped']}")
    else:
        dims = sorted(pca["dims"], key=int, reverse=True)
        tasks = [t for t in pca["dims"][dims[0]] if t != "avg"]
        parts.append(markdown_table(["Dims", *tasks, "Avg."], [[d, *(cell(pca["dims"][d][t]) for t in (*tasks, "avg"))]
                                                               for d in dims]))
        parts.append(f"Principal directions from {pca['reference_sentences']} sentences of {pca['reference']}.")
    return "\n\n".join(parts)


def markdown_report(payload: dict[str, Any], sections: Sequence[str], plots: dict[Path, str] | None = None) -> str:
    """The whole report of one results JSON: its header, the suites' ``sections``, pictures (path -> caption) linked
    by file name."""
    model = payload["model"]
    parts = [f"# Probe report: {model['spec']}",
             f"Suite `{payload['suite']}`, {model['class']}"
             + (f", pooler `{model['pooler']}`" if "pooler" in model else "")
             + f"; cselab {payload['cselab_version']}, wall time {payload['wall_time_s']} s"
             + (f"; first {payload['limit']} pairs per file only" if payload.get("limit") else "") + "."]
    parts += sections
    parts += [f"![{caption}]({Path(path).name})" for path, caption in (plots or {}).items()]
    return "\n\n".join(parts) + "\n"


CELL_BORDER = re.compile(r"(?<!\\)\|")  # a | not escaped by table_cell (a border always follows a space)
UNESCAPE = re.compile(r"\\([\\|])")
NUMBER = re.compile(r"n/a|[-+≤<>±\s\d.,/%()\[\]e]*\d[-+≤<>±\s\d.,/%()\[\]e]*")


def _html_table(lines: list[str]) -> str:
    """A Markdown table as HTML: a column of figures right-aligned, any other (model names, tasks) left-aligned."""
    rows = [_cells(line) for line in lines if not set(line) <= set("|- ")]
    width = len(rows[0])
    cells = [[row[i] for row in rows[1:] if i < len(row) and row[i]] for i in range(width)]
    numeric = [bool(column) and all(NUMBER.fullmatch(c) for c in column) for column in cells]

    def row_html(row: list[str], tag: str) -> str:
        return "<tr>" + "".join(f'<{tag} class="{"num" if numeric[i] else "text"}">{html.escape(c)}</{tag}>'
                                for i, c in enumerate(row[:width])) + "</tr>"
    body = "".join(row_html(row, "td") for row in rows[1:])
    return f"<table><thead>{row_html(rows[0], 'th')}</thead><tbody>{body}</tbody></table>"


def _image_source(name: str, folder: Path | None) -> str:
    """An image's ``src``: the picture itself (a base64 data URI) when it is a PNG in ``folder``, else its name."""
    path = folder / name if folder is not None else None
    if path is not None and path.suffix == ".png" and path.is_file():
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return html.escape(name)


def html_report(markdown: str, images: str | os.PathLike | None = None) -> str:
    """The Markdown report as one HTML page (headings, tables, images, paragraphs); ``images``: the folder of its
    pictures, which are then embedded, so that the page is complete on its own (moved, mailed, attached)."""
    folder = Path(images) if images is not None else None
    body = []
    for block in markdown.strip().split("\n\n"):
        lines = block.splitlines()
        heading = re.match(r"^(#{1,3}) (.*)$", block)
        image = re.match(r"^!\[(.*)\]\((.*)\)$", block)
        if heading:
            level = len(heading.group(1))
            body.append(f"<h{level}>{html.escape(heading.group(2))}</h{level}>")
        elif image:
            body.append(f'<figure><img src="{_image_source(image.group(2), folder)}" '
                        f'alt="{html.escape(image.group(1))}"><figcaption>{html.escape(image.group(1))}'
                        "</figcaption></figure>")
        elif lines[0].startswith("|"):
            body.append(_html_table(lines))
        else:
            body.append(f"<p>{html.escape(block)}</p>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}table{border-collapse:"
             "collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px}th{background:#eee}"
             ".num{text-align:right}.text{text-align:left}figure{margin:1em 0}img{max-width:100%;height:auto}"
             "figcaption{font-size:90%;color:#555}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cselab probe report</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


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


def compare_table(payloads: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> str:
    """Models side by side: every suite's main scores (:attr:`Suite.main`), in suite order, for the suites any of
    the results has; then what each suite notes about comparing them (:meth:`Suite.compare_notes`). ``names``:
    the rows' (default: the model specs)."""
    names = _named(payloads, names)
    columns, notes = [], []
    for name, cls in suites().items():
        sections = [p[name] for p in payloads if isinstance(p.get(name), dict)]
        if sections:
            suite = cls()
            columns += [(name, suite, key, score) for key, score in suite.main.items()]
            notes += suite.compare_notes(sections)
    rows = []
    for payload, shown_as in zip(payloads, names):
        values = {name: suite.main_scores(payload[name]) for name, suite, _, _ in columns
                  if isinstance(payload.get(name), dict)}
        rows.append([shown_as, *(cell(values.get(name, {}).get(key), score.digits)
                                                 for name, _, key, score in columns)])
    table = markdown_table(["Model", *(score.label for *_, score in columns)], rows) if columns else None
    return "\n\n".join([*([table] if table else []), *notes])


def _cells(line: str) -> list[str]:
    """The cells of one row of a :func:`markdown_table`, their text as given (``|`` and ``\\`` unescaped)."""
    return [UNESCAPE.sub(r"\1", cell.strip()) for cell in CELL_BORDER.split(line.strip()[1:-1])]


def model_rows(title: str, tables: Sequence[str]) -> list[str]:
    """One-row tables of several models (:func:`markdown_table`'s, a model per table) under ``title``: one table
    with a row per model where their columns agree, else each as it is."""
    parsed = [[_cells(line) for line in table.splitlines()] for table in tables]
    if not parsed:
        return []
    if all(t[0][1:] == parsed[0][0][1:] for t in parsed):
        return [f"### {title}", markdown_table(parsed[0][0], [t[2] for t in parsed])]
    return [f"### {title}", *(markdown_table(t[0], t[2:]) for t in parsed)]


def compare_report(payloads: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> str:
    """The summary table, then each suite's comparison of the results that have it
    (:meth:`Suite.compare_sections`); ``names`` as :func:`compare_table`'s."""
    names = _named(payloads, names)
    parts = [table] if (table := compare_table(payloads, names)) else []
    for name, cls in suites().items():
        having = [(shown_as, p[name]) for p, shown_as in zip(payloads, names) if isinstance(p.get(name), dict)]
        if having:
            parts += cls().compare_sections(having)
    return "\n\n".join(parts)


def differences_report(paths: Sequence[str], payloads: Sequence[dict[str, Any]], baseline: int = 0,
                       resamples: int = RESAMPLES, seed: int = 0, show: bool = True,
                       names: Sequence[str] | None = None) -> str:
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
    parts = [f"## Differences against {name}", "",
             f"Paired over the items both were scored on: bootstrap {int(100 * LEVEL)}% interval (percentile, "
             f"{resamples} resamples), two-sided permutation p-value ({resamples} resamples), seed {seed}; p (Holm) "
             f"corrected across the rows of a table (the average apart); p ≤ {2 / (resamples + 1):.2g} is the floor "
             f"of {resamples} permutations (2/{resamples + 1}: none was as extreme). *holds*: p (Holm) < {ALPHA} and "
             "the interval leaves 0 out."]
    for index, (path, payload) in enumerate(zip(paths, payloads)):
        if index == baseline:
            continue
        spec = names[index]
        conflicts = item_conflicts(payloads[baseline], payload)
        for scope, reasons in conflicts.items():
            suite, _, part = scope.partition(".")
            what = f"the {suite} suite's {part}" if part else f"the {suite} suite"
            parts += ["", f"**Warning**: {files[index]} and {files[baseline]} were not scored on the same "
                          f"items of {what}, so its figures are compared as aggregates only (the tables above), not "
                          f"item by item; differing ({name} vs {spec}): " + "; ".join(reasons) + "."]
        if items[baseline] is None or items[index] is None:
            missing = path if items[index] is None else paths[baseline]
            parts += ["", f"### {spec}", "", f"{missing} has no per-item outputs (written before they were kept): "
                                              "no intervals."]
            continue
        figures = paired_figures(items[baseline], items[index], tuple(conflicts))
        with Progress(f"probe compare {spec}", table_rows(figures), "figure", enabled=show) as bar, current(bar):
            tables = paired_tables(items[baseline], items[index], resamples, seed, figures=figures)
        parts += [line for found in figures.values() for note in found.notes
                  for line in ("", f"{spec} vs {name}: {note}.")]
        parts += _difference_tables(tables, name, spec, resamples)
        settings, provenance = setting_differences(payloads[baseline], payload)
        if settings:
            parts += ["", f"**Warning**: {files[index]} was scored with other settings than {files[baseline]}, "
                          f"so part of a difference may be theirs ({name} vs {spec}): "
                          + "; ".join(settings) + "."]
        if provenance:
            parts += ["", f"Provenance ({name} vs {spec}): " + "; ".join(provenance) + "."]
    return "\n".join(parts)


def p_cell(p: float, resamples: int) -> str:
    """A p-value for a table: three decimals, two significant digits below 0.001, and ``≤ FLOOR`` at the smallest
    value ``resamples`` random permutations give (2/(resamples+1), two-sided: none was as extreme)."""
    floor = 2 / (resamples + 1)
    if math.isnan(p):
        return "n/a"
    if math.isclose(p, floor, rel_tol=1e-9):
        return f"≤ {floor:.2g}"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}"


def _difference_tables(tables: dict[str, list[dict[str, Any]]], name: str, spec: str, resamples: int
                       ) -> list[str]:
    parts, known = [], suites()
    for suite, rows in tables.items():
        digits = {score.label: score.digits for score in known[suite].main.values()}
        body = [[r["name"], cell(r["a"], digits.get(r["name"], 2)), cell(r["b"], digits.get(r["name"], 2)),
                 f"{r['diff']:+.{digits.get(r['name'], 2)}f}",
                 f"[{r['ci'][0]:+.{digits.get(r['name'], 2)}f}, {r['ci'][1]:+.{digits.get(r['name'], 2)}f}]",
                 p_cell(r["p"], resamples), p_cell(r["p_holm"], resamples), "yes" if r["holds"] else "no"]
                for r in rows]
        parts += ["", f"### {spec} vs {name}: {known[suite].title}", "",
                  markdown_table(["Figure", name, spec, "Diff.", f"{int(100 * LEVEL)}% CI", "p", "p (Holm)",
                                  "Holds"], body)]
    return parts


def read_results(paths: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """The results JSONs ``probe run`` wrote, each read through :func:`cselab.files.read_json` (size and depth
    bounded) and checked to be one: a file whose fields have other types is a DataError naming it."""
    payloads = []
    for path in paths:
        payload = read_json(path, DataError)
        if not isinstance(payload.get("model"), dict) or not isinstance(payload["model"].get("spec"), str):
            raise DataError(f"{path}: not a results JSON of `probe run` (no model.spec)")
        try:
            compare_report([payload])  # every field the comparison reads, of the type it expects
        except (AttributeError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as err:
            raise DataError(f"{path}: not a results JSON of `probe run`: a field has another type or is missing "
                            f"({type(err).__name__}: {clipped(err, 80)})") from None
        payloads.append(payload)
    return payloads
