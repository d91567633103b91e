"""``probe run --dims``: the suites scored on the vectors cut to each width (a Matryoshka-trained model's), each width
a results set of its own (``OUT.dim-W.json`` and its reports), then a comparison of the widths: the main scores side
by side, each width's paired differences from the widest (``probe compare``'s), and a plot of each main score
against width (``OUT.dims.md``, ``OUT.dims.png``). Each sentence is encoded once for all widths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cselab.atomic import write_text_atomic
from cselab.document import Block, Figure, Heading, to_markdown
from cselab.encoders import Encoder
from cselab.encoders.truncated import Truncated
from cselab.errors import ConfigError
from cselab.files import check_folder
from cselab.probes.names import RESAMPLES
from cselab.probes.plots import plot_widths
from cselab.probes.report import compare_report, differences_report, read_results
from cselab.probes.runner import results_path, run_probes, write_outputs
from cselab.probes.suite import ProbeOptions, presenters, suite_parts


def width_path(out: Path, width: int) -> Path:
    """The results JSON of one width beside ``out``."""
    return out.with_name(f"{out.stem}.dim-{width}.json")


def summary_paths(out: Path) -> tuple[Path, Path]:
    """The comparison of the widths (Markdown) and its plot."""
    return out.with_name(f"{out.stem}.dims.md"), out.with_name(f"{out.stem}.dims.png")


def check_widths(dims: list[int], suite: str, out: str, inputs: tuple = ()) -> Path:
    """The results JSON ``out`` names, every width's set and the summary checked before any work: distinct widths,
    each at least 1, no mteb suite (mteb has no width setting for a custom model: its results would name the full
    model), files that can be written and are none of ``inputs``."""
    if len(set(dims)) != len(dims) or min(dims) < 1:
        raise ConfigError(f"--dims {','.join(map(str, dims))}: expected distinct widths of at least 1")
    if "mteb" in suite_parts(suite):
        raise ConfigError("--dims with --suite mteb: mteb has no width setting for a custom model, and its results "
                          "would name the full one; score mteb at full width in a run of its own")
    path = results_path(out, inputs)
    for width in dims:
        results_path(width_path(path, width), inputs)
    for file in summary_paths(path):
        check_folder(file, file=True, inputs=inputs)
    return path


def run_widths(encoder: Encoder, dims: list[int], suite: str, options: ProbeOptions, out: Path,
               progress: bool = True) -> tuple[list[Path], str]:
    """Score ``suite`` at each width of ``dims`` and write each width's set and the comparison; the files written
    and the comparison's Markdown."""
    cut = [Truncated(encoder, width) for width in dims]  # a width wider than the vectors: refused before any scoring
    written = []
    with encoder.remembering():
        for width, truncated in zip(dims, cut, strict=True):
            written += write_outputs(run_probes(truncated, suite, options, progress), width_path(out, width))
    paths = [str(width_path(out, width)) for width in dims]
    payloads = read_results(paths)  # as `probe compare` reads them: the per-item archives beside each
    blocks = widths_report(dims, payloads, paths, options.seed)
    report, picture = summary_paths(out)
    scores, figure = main_scores(payloads), []
    if scores:  # suites without main scores draw nothing
        written.append(plot_widths(dims, scores, picture, f"{encoder.spec}: main scores by width"))
        figure = [Figure(picture, "")]
    written.append(write_text_atomic(report, to_markdown([Heading(f"{encoder.spec} by width", 1), *blocks, *figure])
                                     + "\n"))
    return written, to_markdown(blocks)


def widths_report(dims: list[int], payloads: list[dict[str, Any]], paths: list[str], seed: int) -> list[Block]:
    """The widths side by side, then each width's paired differences from the widest."""
    names = [f"dim {width}" for width in dims]
    widest = dims.index(max(dims))
    blocks = compare_report(payloads, names)
    if len(payloads) < 2:
        return blocks
    return blocks + differences_report(paths, payloads, widest, RESAMPLES, seed, show=False, names=names)


def main_scores(payloads: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Each suite's main scores across the payloads (one list per score label), for the plot."""
    scores: dict[str, list[float | None]] = {}
    for name, presenter in presenters().items():
        if not all(isinstance(p.get(name), dict) for p in payloads):
            continue
        for key, score in presenter.suite.main.items():
            values = [presenter.main_scores(p[name]).get(key) for p in payloads]
            if any(value is not None for value in values):
                scores[score.label] = values
    return scores
