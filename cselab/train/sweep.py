"""Seed sweeps: train every method (and grid point) with several seeds, score each run, report mean ± std.

Gains of SimCSE variants are often within seed noise (simcse-improvements.txt); a sweep makes the
comparison honest. Layout of ``OUT``:

- ``runs/LABEL-seedS/``: each run's folder (``best/``, ``last/``, ``log.jsonl``), as ``cselab train``;
- ``results/LABEL-seedS.json``: its scores (STS12-16, STS-B, SICK-R and their average; alignment
  and uniformity on STS-B dev), written atomically once the run is scored;
- ``summary.json``, ``summary.md``, ``summary.png``: mean ± std per method and task, seeds listed.

Runs go one after another in this process, or, with several GPUs, in one worker process per GPU
(:func:`run_parallel`). Started again on the same ``OUT``, a sweep skips the scored runs and
resumes a half-trained one from its ``last/``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cselab.atomic import write_json_atomic, write_text_atomic

COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "avg", "alignment", "uniformity")


@dataclass(frozen=True)
class SweepRun:
    method: str
    grid: tuple[str, ...]  # KEY=VALUE overrides of this grid point
    seed: int

    @property
    def label(self) -> str:
        return self.method + (f"[{','.join(self.grid)}]" if self.grid else "")

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.=+-]+", "_", self.label).strip("_") + f"-seed{self.seed}"


def parse_grid(items: list[str]) -> list[tuple[str, ...]]:
    """``["a.b=1,2", "c=x,y"]`` -> every combination, as tuples of ``KEY=VALUE``."""
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise ValueError(f"--grid {item!r}: expected KEY=V1,V2,...")
        axes.append([f"{key}={value}" for value in values.split(",")])
    return list(itertools.product(*axes)) if axes else [()]


def plan(methods: list[str], seeds: list[int], grid: list[str]) -> list[SweepRun]:
    return [SweepRun(m, point, s) for m in methods for point in parse_grid(grid) for s in seeds]


def score_run(folder: str | os.PathLike, data_dir: str | os.PathLike | None = None, sts_limit: int | None = None
              ) -> dict[str, Any]:
    """STS suite (the first ``sts_limit`` pairs of each subset: quick checks) and STS-B dev alignment/uniformity
    of a run's best checkpoint."""
    from cselab.encoders import load_encoder
    from cselab.probes.geometry import alignment_uniformity
    from cselab.probes.sts import run_sts

    encoder = load_encoder(str(folder))
    scores, _ = run_sts(encoder, data_dir=data_dir, limit=sts_limit)
    geometry = alignment_uniformity(encoder, data_dir)
    return {**{task: value["all"] for task, value in scores.items() if task != "avg"}, "avg": scores["avg"],
            "alignment": geometry["alignment"], "uniformity": geometry["uniformity"]}


def run_sweep(methods: list[str], seeds: list[int], grid: list[str], out: str | os.PathLike, model: str,
              data: str | os.PathLike, overrides: list[str] = (), data_dir: str | os.PathLike | None = None,
              eval_limit: int | None = None, progress: bool = True, sts_limit: int | None = None,
              worker: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """Train and score every run not scored yet, then write the summary; returns it. A ``worker`` ``(k, n)`` takes
    only every n-th run from the k-th and writes no summary (see :func:`run_parallel`)."""
    from cselab.train.methods import load_method
    from cselab.train.trainer import train

    out = Path(out)
    runs = plan(methods, seeds, grid)
    for method in methods:  # every config is checked before the first run starts
        for point in parse_grid(grid):
            load_method(method, [*overrides, *point])
    for number, run in enumerate(runs, 1):
        if worker is not None and (number - 1) % worker[1] != worker[0]:
            continue
        result_path = out / "results" / f"{run.slug}.json"
        if result_path.exists():
            continue
        if progress:
            print(f"[{number}/{len(runs)}] {run.label}, seed {run.seed}", flush=True)
        config = load_method(run.method, [*overrides, *run.grid, f"training.seed={run.seed}"])
        summary = train(config, model, data, out / "runs" / run.slug, data_dir, eval_limit, progress=progress)
        result = {"method": run.method, "grid": list(run.grid), "seed": run.seed, "label": run.label,
                  "steps": summary["steps"], "best_stsb_dev": summary["best_stsb_dev"],
                  "scores": score_run(summary["best"], data_dir, sts_limit)}
        write_json_atomic(result_path, result)
    if worker is not None:
        return None
    return write_summary(out, _read_results(out, runs))


def _read_results(out: Path, runs: list[SweepRun]) -> list[dict[str, Any]]:
    return [json.loads((out / "results" / f"{run.slug}.json").read_text()) for run in runs]


def run_parallel(arguments: list[str], devices: list[str], out: str | os.PathLike, runs: list[SweepRun]
                 ) -> dict[str, Any]:
    """One ``cselab sweep ... --worker k/n`` process per device (``CUDA_VISIBLE_DEVICES``), then the summary."""
    import subprocess
    import sys

    workers = [subprocess.Popen([sys.executable, "-m", "cselab.cli", "sweep", *arguments,
                                 "--worker", f"{k}/{len(devices)}"],
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": device})
               for k, device in enumerate(devices)]
    failed = [device for device, worker in zip(devices, workers, strict=True) if worker.wait() != 0]
    if failed:
        raise RuntimeError(f"the sweep's worker(s) on device(s) {', '.join(failed)} failed; start the sweep again "
                           "to resume")
    return write_summary(out, _read_results(Path(out), runs))


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per label (method and grid point): mean, std (ddof 1) and seeds of every column, in first-seen order."""
    labels = list(dict.fromkeys(r["label"] for r in results))
    rows = []
    for label in labels:
        mine = [r for r in results if r["label"] == label]
        stats = {}
        for column in COLUMNS:
            values = np.array([r["scores"][column] for r in mine], dtype=float)
            stats[column] = {"mean": float(values.mean()),
                             "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0}
        rows.append({"label": label, "seeds": [r["seed"] for r in mine], **stats})
    return rows


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    from cselab.probes.report import markdown_table

    header = ["Method", "Seeds", *COLUMNS]
    body = [[row["label"], ", ".join(map(str, row["seeds"])),
             *(f"{row[c]['mean']:.2f} ± {row[c]['std']:.2f}" if c not in ("alignment", "uniformity")
               else f"{row[c]['mean']:.3f} ± {row[c]['std']:.3f}" for c in COLUMNS)] for row in rows]
    return markdown_table(header, body)


def plot_summary(rows: list[dict[str, Any]], results: list[dict[str, Any]], path: str | os.PathLike) -> None:
    """STS average per method: mean with a ±std error bar, each seed a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(1.6 + 1.2 * len(rows), 3.6))
    positions = np.arange(len(rows))
    axis.bar(positions, [r["avg"]["mean"] for r in rows], yerr=[r["avg"]["std"] for r in rows], capsize=6,
             color="#9ecae1", edgecolor="#3182bd")
    for x, row in zip(positions, rows, strict=True):
        seeds = [r["scores"]["avg"] for r in results if r["label"] == row["label"]]
        axis.scatter([x] * len(seeds), seeds, color="#08519c", s=14, zorder=3)
    low = min(r["scores"]["avg"] for r in results)
    high = max(r["scores"]["avg"] for r in results)
    axis.set_ylim(low - 2, high + 2)
    axis.set_xticks(positions, [r["label"] for r in rows], rotation=20, ha="right")
    axis.set_ylabel("STS avg. (Spearman x 100)")
    axis.set_title("Mean ± std over seeds; dots: single runs")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_summary(out: str | os.PathLike, results: list[dict[str, Any]]) -> dict[str, Any]:
    out = Path(out)
    rows = summarize(results)
    summary = {"rows": rows, "runs": results}
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "summary.md", summary_markdown(rows) + "\n")
    plot_summary(rows, results, out / "summary.png")
    return summary
