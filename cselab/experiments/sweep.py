"""Seed sweeps: train every method (and grid point) with several seeds, score each run, report mean ± std.

Gains of SimCSE variants are often within seed noise (simcse-improvements.txt); a sweep makes the
comparison honest. Layout of ``OUT``:

- ``runs/LABEL-seedS/``: each run's folder (``best/``, ``last/``, ``log.jsonl``), as ``cselab train``;
- ``results/LABEL-seedS.json``: its scores (STS12-16, STS-B, SICK-R and their average; alignment
  and uniformity on STS-B dev), written atomically once the run is scored;
- ``results/LABEL-seedS.items.npz``: its per-item outputs (each STS pair's cosine), as ``probe run`` keeps them;
- ``summary.json``, ``summary.md``, ``summary.png``: mean ± std and a 95% interval over seeds per method and task,
  seeds listed, and each method's STS average against the first's (:mod:`cselab.experiments.seed_stats`).

Runs go one after another in this process, or, with several GPUs, in one worker process per GPU
(:func:`run_parallel`). Started again on the same ``OUT``, a sweep resumes a half-trained run from its ``last/``
and reuses a result only when it records this very run (the run folder's identity: config, data, base model and
its weights, dev set) scored this very way from the same data files (each file the scoring read, test files
included, by sha256: ``made_by.data``); a run folder that holds another run stops the sweep naming what differs.
Each run's seed is its ``--seeds`` value: ``training.seed`` in ``--grid`` or ``--set`` is refused. Every run's
config is checked before the first one trains.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from cselab.atomic import write_json_atomic, write_text_atomic
from cselab.checksum import sha256
from cselab.data import data_root, load_sts
from cselab.encoders import load_encoder
from cselab.errors import ConfigError, DataError, TrainingError
from cselab.experiments.seed_stats import compare_methods, comparison_markdown
from cselab.files import check_folder, kept_only_if_written, read_json, shown
from cselab.probes.geometry import alignment_uniformity
from cselab.document import Formatted, Paragraph, Table, number, to_markdown
from cselab.probes.significance import t_interval
from cselab.probes.results import changed_files, checksums
from cselab.probes.runner import run_suite, write_items
from cselab.probes.suite import ProbeOptions, presenters, suite_parts, suites as registered_suites
from cselab.progress import Progress
from cselab.registry import MAX_SEED, MAX_SEEDS
from cselab.train.config.method import MethodConfig, with_data
from cselab.train.config.methods import load_method
from cselab.train.run.data import data_source
from cselab.train.out.folder import run_identity
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train

logger = logging.getLogger(__name__)

# Named seed sets of the papers: the thesis's five (simcse-improvements.txt section 5) and SG-OPT's eight (Table 8).
SEED_SETS = {"thesis": (19984, 5838, 16822, 19294, 17173), "sg-opt": (1, 2, 3, 4, 1234, 2345, 3456, 7890)}
# the sweep's own columns, after the suites': alignment and uniformity of STS-B dev (lower is better)
OWN_COLUMNS = {"alignment": {"suite": None, "label": "Alignment", "digits": 3, "main": False},
               "uniformity": {"suite": None, "label": "Uniformity", "digits": 3, "main": False}}
SEED_KEY = "training.seed"


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


def parse_seeds(text: str) -> list[int]:
    """``"3"`` -> 0, 1, 2; ``"5,7"`` -> 5, 7; a name of :data:`SEED_SETS` -> its seeds. At most :data:`MAX_SEEDS`
    seeds, each from 0 to :data:`~cselab.registry.MAX_SEED`."""
    if text in SEED_SETS:
        return list(SEED_SETS[text])
    where = f"--seeds {shown(text)}"
    try:
        seeds = [int(s) for s in text.split(",")] if "," in text else int(text)
    except ValueError:
        raise ConfigError(f"{where}: expected a number N, a comma-separated list of seeds, or one of "
                         f"{', '.join(SEED_SETS)}") from None
    count = seeds if isinstance(seeds, int) else len(seeds)
    if count < 1:
        raise ConfigError(f"{where}: no seed to run (give N >= 1)")
    if count > MAX_SEEDS:
        raise ConfigError(f"{where}: {count} seeds, more than the {MAX_SEEDS} a sweep runs")
    seeds = list(range(seeds)) if isinstance(seeds, int) else seeds
    bad = next((seed for seed in seeds if not 0 <= seed <= MAX_SEED), None)
    if bad is not None:
        raise ConfigError(f"{where}: seed {bad} is out of range; expected whole numbers from 0 to {MAX_SEED}")
    return seeds


def parse_grid(items: list[str]) -> list[tuple[str, ...]]:
    """``["a.b=1,2", "c=x,y"]`` -> every combination, as tuples of ``KEY=VALUE``; ``training.seed`` is refused (the
    sweep's ``--seeds`` own it)."""
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise ConfigError(f"--grid {item!r}: expected KEY=V1,V2,...")
        _not_the_seed(key, "--grid")
        axes.append([f"{key}={value}" for value in values.split(",")])
    return list(itertools.product(*axes)) if axes else [()]


def _not_the_seed(key: str, flag: str) -> None:
    if key.strip() == SEED_KEY:
        raise ConfigError(f"{flag} {SEED_KEY}: a sweep's seeds are given with --seeds (each run's {SEED_KEY} is its "
                          "seed), so that each seed is a run of its own in the summary")


def plan(methods: list[str], seeds: list[int], grid: list[str]) -> list[SweepRun]:
    """Every method x grid point x seed; two of them that would share a run folder are refused."""
    runs: list[SweepRun] = []
    slugs: dict[str, SweepRun] = {}
    for run in (SweepRun(m, point, s) for m in methods for point in parse_grid(grid) for s in seeds):
        if run.slug in slugs:
            raise ConfigError(f"{slugs[run.slug].label} (seed {run.seed}) and {run.label} would share the run folder "
                              f"runs/{run.slug}: give each method and grid point once, under names that differ in "
                              "letters or digits")
        slugs[run.slug] = run
        runs.append(run)
    return runs


def score_run(folder: str | os.PathLike, data_dir: str | os.PathLike | None = None, sts_limit: int | None = None,
              suites: tuple[str, ...] = ("sts",), items: dict[str, np.ndarray] | None = None, cache: bool = True,
              files: list | None = None, progress: bool = True
              ) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
    """A run's best checkpoint scored by each of ``suites`` (their :meth:`~cselab.probes.suite.Presenter.sweep_columns`,
    the first ``sts_limit`` pairs or lines of each file: quick checks), then by the sweep's own STS-B dev alignment
    and uniformity; returns the scores by column and each column's suite, label, decimals and whether it is a main
    score. ``items`` (when given) receives the per-item outputs, as ``probe run`` keeps them, and ``files`` the data
    files read; ``cache`` as :func:`~cselab.encoders.load_encoder`'s; ``progress``: each suite's bar or lines."""
    files = [] if files is None else files
    encoder, known, shown = load_encoder(str(folder), cache=cache), registered_suites(), presenters()
    scores: dict[str, float | None] = {}
    columns: dict[str, dict[str, Any]] = {}
    with encoder.remembering():
        for name in suites:
            suite = known[name](ProbeOptions(data_dir=data_dir, limit=sts_limit))
            result = run_suite(suite, encoder, progress)
            files.extend(result.files)
            if items is not None:
                items.update(result.items)
            for key, value in shown[name].sweep_columns({**result.scores, **result.metadata}).items():
                score = suite.main.get(key)
                _add_column(scores, columns, key, value, {"suite": name, "label": score.label if score else key,
                                                          "digits": score.digits if score else 2, "main": bool(score)})
        geometry = alignment_uniformity(encoder, data_dir)
    files.extend(load_sts("stsb", "dev", data_dir)[0].files)
    for key, column in OWN_COLUMNS.items():
        _add_column(scores, columns, key, geometry[key], column)
    return scores, columns


def _add_column(scores: dict, columns: dict, key: str, value: float | None, column: dict[str, Any]) -> None:
    if key in columns:
        raise ConfigError(f"the sweep column {key!r} of the {column['suite'] or 'sweep'} suite is the "
                          f"{columns[key]['suite'] or 'sweep'}'s already: score the two in sweeps of their own")
    scores[key], columns[key] = value, column


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs: every method x grid point x seed, trained on ``data`` from ``model`` into ``out``, with
    ``overrides`` (``KEY=VALUE``) and ``profile`` for every run; ``sts_limit``/``eval_limit`` for quick checks;
    ``suites``: the probe suites each run is scored with (``sts``, ``sts,bias`` ...); ``cache=False`` keeps no
    encoded vectors (the embedding cache)."""

    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    out: str | os.PathLike
    model: str
    grid: tuple[str, ...] = ()
    data: str | os.PathLike | None = None
    overrides: tuple[str, ...] = ()
    data_dir: str | os.PathLike | None = None
    eval_limit: int | None = None
    sts_limit: int | None = None
    profile: str | None = None
    suites: tuple[str, ...] = ("sts",)
    cache: bool = True

    def runs(self) -> list[SweepRun]:
        return plan(list(self.methods), list(self.seeds), list(self.grid))

    def scoring_suites(self) -> tuple[str, ...]:
        """:attr:`suites` checked: known suites, the STS suite among them (the summary's interval and the
        seed-level comparison are over its average)."""
        found = suite_parts(",".join(self.suites))
        named_only = [name for name in found if not registered_suites()[name].in_all]
        if named_only:
            raise ConfigError(f"--suites: {', '.join(named_only)} needs options of its own that a sweep does not "
                              "carry; score the runs' checkpoints with probe run --suite " + named_only[0])
        if "sts" not in found:
            raise ConfigError(f"--suites {','.join(self.suites)}: a sweep scores the sts suite too (its summary "
                              "compares the methods' STS averages); add sts")
        return found


@overload
def run_sweep(spec: SweepSpec, progress: bool = True, worker: None = None) -> dict[str, Any]: ...
@overload
def run_sweep(spec: SweepSpec, progress: bool = True, *, worker: tuple[int, int]) -> None: ...
def run_sweep(spec: SweepSpec, progress: bool = True, worker: tuple[int, int] | None = None
              ) -> dict[str, Any] | None:
    """Train and score every run not scored yet, then write the summary; returns it. A ``worker`` ``(k, n)`` takes
    only every n-th run from the k-th and writes no summary (see :func:`run_parallel`)."""
    out, runs, suites = check_folder(spec.out), spec.runs(), spec.scoring_suites()
    for item in spec.overrides:
        _not_the_seed(item.partition("=")[0], "--set")
    # every run's config is checked before the first run trains
    configs = [load_method(run.method, [*spec.overrides, *run.grid, f"{SEED_KEY}={run.seed}"], spec.profile)
               for run in runs]
    mine = [number for number in range(1, len(runs) + 1) if worker is None or (number - 1) % worker[1] == worker[0]]
    with kept_only_if_written(out) if worker is None else contextlib.nullcontext(), \
            Progress("sweep", len(mine), "run", enabled=progress) as bar:
        for number in mine:
            run, config = runs[number - 1], configs[number - 1]
            bar.note(f"[{number}/{len(runs)}] {run.label}, seed {run.seed}")
            _sweep_run(spec, out, run, config, suites, progress)
            bar.update(1)
    if worker is not None:
        return None
    return write_summary(out, _read_results(out, runs))


def _sweep_run(spec: SweepSpec, out: Path, run: SweepRun, config: MethodConfig, suites: tuple[str, ...],
               progress: bool) -> None:
    """Train and score one run of a sweep into ``out``, unless its results are there already."""
    config = with_data(config, spec.data)  # as train() records it
    data = None if spec.data is None else config.data
    source = data_source(config, data, spec.data_dir)
    made_by = {"run": run_identity(config, spec.model, source, spec.data_dir, spec.eval_limit),
               "scoring": {"sts_limit": spec.sts_limit, "suites": list(suites)}}
    result_path = out / "results" / f"{run.slug}.json"
    if _scored(result_path, made_by, spec.data_dir):
        return
    # a half-trained run resumes; a run folder holding another run (model, settings, data) is refused
    summary = train(config, spec.model, data, out / "runs" / run.slug,
                    RunOptions(data_dir=spec.data_dir, eval_limit=spec.eval_limit, progress=progress))
    items: dict[str, np.ndarray] = {}
    files: list = []
    scores, columns = score_run(summary["best"], spec.data_dir, spec.sts_limit, suites, items, spec.cache, files,
                                progress)
    made_by["data"] = checksums(files, data_root(spec.data_dir))
    result = {"method": run.method, "grid": list(run.grid), "seed": run.seed, "label": run.label,
              "steps": summary["steps"], "dev": summary["dev"], "best_dev": summary["best_dev"], "made_by": made_by,
              "scores": scores, "columns": columns}
    arrays = write_items(result_path.with_suffix(".items.npz"), items)
    result["items"] = {"file": arrays.name, "sha256": sha256(arrays)}
    write_json_atomic(result_path, result)


def _scored(path: Path, made_by: dict[str, Any], data_dir: str | os.PathLike | None) -> bool:
    """Whether ``path`` holds the scores of this very run (its identity) scored this very way, from data files that
    are still what they were (each file the scoring read, by sha256); anything else (none yet, a damaged file,
    another run's or other scoring's, a data file corrected since) is scored again."""
    if not path.exists():
        return False
    try:
        recorded = read_json(path, DataError).get("made_by")
    except DataError as err:
        logger.warning("%s; scoring the run again", err)
        return False
    if not isinstance(recorded, dict) or not isinstance(recorded.get("data"), dict) or made_by != {
            key: value for key, value in recorded.items() if key != "data"}:
        return False  # another run, other scoring, or a result that does not name its data files
    changed = changed_files(recorded["data"], data_root(data_dir))
    if changed:
        logger.warning("%s: scored from data files that changed since (%s); scoring the run again", path,
                       ", ".join(changed[:3]))
    return not changed


def _read_results(out: Path, runs: list[SweepRun]) -> list[dict[str, Any]]:
    return [read_json(out / "results" / f"{run.slug}.json", DataError) for run in runs]


def _worker(spec: SweepSpec, index: int, count: int, device: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = device  # before this process first touches CUDA
    run_sweep(spec, progress=index == 0, worker=(index, count))


def run_parallel(spec: SweepSpec, devices: list[str]) -> dict[str, Any]:
    """One worker process per device (``CUDA_VISIBLE_DEVICES``) sharing the runs, then the summary."""
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_worker, args=(spec, k, len(devices), device))
               for k, device in enumerate(devices)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    failed = [device for device, worker in zip(devices, workers, strict=True) if worker.exitcode != 0]
    if failed:
        raise TrainingError(f"the sweep's worker(s) on device(s) {', '.join(failed)} failed; start the sweep again "
                            "to resume")
    return write_summary(spec.out, _read_results(Path(spec.out), spec.runs()))


def _columns(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The score columns every result has (a suite's only when all runs were scored with it), in the first result's
    order, each with its suite, label, decimals and whether it is a main score."""
    return {key: column for key, column in results[0]["columns"].items()
            if all(key in r["scores"] for r in results)} if results else {}


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per label (method and grid point): mean, std (ddof 1), Student's t 95% interval over seeds (None for one seed)
    and seeds of every column, in first-seen order."""
    labels = list(dict.fromkeys(r["label"] for r in results))
    rows = []
    for label in labels:
        mine = [r for r in results if r["label"] == label]
        stats = {}
        for column in _columns(results):
            values = np.array([r["scores"][column] for r in mine], dtype=float)
            stats[column] = {"mean": float(values.mean()),
                             "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                             "ci95": t_interval(values)}
        rows.append({"label": label, "seeds": [r["seed"] for r in mine], **stats})
    return rows


def summary_markdown(rows: list[dict[str, Any]], columns: dict[str, dict[str, Any]]) -> str:
    body = [[row["label"], ", ".join(map(str, row["seeds"])),
             *(Formatted("{0:.{2}f} ± {1:.{2}f}".format(row[c]["mean"], row[c]["std"], column["digits"]))
               for c, column in columns.items()),
             Formatted("[{:.2f}, {:.2f}]".format(*row["avg"]["ci95"]) if row["avg"]["ci95"] else "(one seed)")]
            for row in rows]
    return to_markdown([Paragraph("Mean ± std over seeds (std with ddof 1); the interval is Student's t over seeds"),
                        Table(["Method", "Seeds", *map(number, columns), number("avg 95% CI")], body)])


def summary_text(summary: dict[str, Any]) -> str:
    """The per-method table and the between-method one."""
    return summary_markdown(summary["rows"], summary["columns"]) + "\n\n" + comparison_markdown(summary["comparison"])


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


def _short_label(label: str) -> str:
    """``osscse[losses.two_way_margin.weight=0.1]`` -> ``weight=0.1``; a label without a grid as it is."""
    if "[" not in label:
        return label
    items = [item.split("=", 1) for item in label[label.index("[") + 1:-1].split(",")]
    return ",".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in items)


def plot_main_summary(rows: list[dict[str, Any]], columns: dict[str, dict[str, Any]], path: str | os.PathLike
                      ) -> None:
    """One panel per main score of the suites scored (``columns``: STS avg., Cont., Oppn. ...), a point per label
    with its ±std, joined in the order of the sweep (a grid's values)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(columns), figsize=(3.0 * len(columns), 3.4), squeeze=False)
    positions = np.arange(len(rows))
    for axis, (key, column) in zip(axes[0], columns.items(), strict=True):
        means = np.array([r[key]["mean"] for r in rows])
        axis.errorbar(positions, means, yerr=[r[key]["std"] for r in rows], capsize=4, color="#3182bd",
                      marker="o", linewidth=1)
        spread = max(float(np.ptp(means)), 50 * 10.0 ** -column["digits"])
        axis.set_ylim(means.min() - spread / 2, means.max() + spread / 2)
        axis.set_xlim(-0.5, len(rows) - 0.5)
        for x, value in zip(positions, means, strict=True):
            axis.annotate(f"{value:.{column['digits']}f}", (x, value), textcoords="offset points", xytext=(0, 5),
                          ha="center", fontsize=7)
        axis.set_xticks(positions, [_short_label(r["label"]) for r in rows], rotation=30, ha="right", fontsize=8)
        axis.set_title(column["label"], fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_summary(out: str | os.PathLike, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``, ``summary.md``, ``summary.png`` and, for a sweep scored with more suites than STS,
    ``summary-main.png`` (a panel per main score)."""
    out, columns = Path(out), _columns(results)
    rows = summarize(results)
    summary = {"rows": rows, "columns": columns, "comparison": compare_methods(out, results), "runs": results}
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "summary.md", summary_text(summary) + "\n")
    plot_summary(rows, results, out / "summary.png")
    main = {key: column for key, column in columns.items() if column["main"]}
    if rows and len(main) > 1:
        plot_main_summary(rows, main, out / "summary-main.png")
    return summary
