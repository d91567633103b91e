"""STS probe: Spearman's rho x 100 between cosine similarity and gold scores, no training.

For STS12-16 the headline figure of a task is ``all``: rho over the pooled pairs of every
subset (SentEval's "all", the figure SimCSE reports); ``mean`` and ``wmean`` (mean over
subsets, unweighted and weighted by pair count) are in the results too. STS-B and SICK-R
are scored on their test splits. The suite's ``avg`` is the mean of the seven headline figures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cselab.data import STSPairs, load_sts
from cselab.data.named import STS_TASKS, sts_task
from cselab.document import Block, Heading, Table, number, stacked
from cselab import progress
from cselab.encoders import Encoder
from cselab.metrics import pearson, spearman
from cselab.evaluation.scoring import Result
from cselab.evaluation.sts import similarities, subset_limit
from cselab.errors import ConfigError, DataError
from cselab.probes.paired import item_groups
from cselab.probes.significance import Stratum
from cselab.probes.suite import PairedFigures, Presenter, Score, Suite, register_suite, split_setting
from cselab.probes.names import STS_SUITE
from cselab.registry import Checked, Param, setting

DEV_SPLITS = ("dev", "trial")  # STS-B's dev split, SICK-R's trial split (SentEval's SICK_trial.txt)
SHORT_NAMES = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
               "stsb": "STS-B", "sickr": "SICK-R"}


def x100(value: float) -> float | None:
    """``100 * value``; None for NaN (a constant side, e.g. the same vector for every sentence)."""
    return None if math.isnan(value) else 100 * value


def score_task(subsets: Sequence[STSPairs], sims: Sequence[np.ndarray]) -> dict[str, Any]:
    """Per-subset and pooled correlations (x 100) of one task."""
    per_subset = {s.subset: {"spearman": x100(spearman(sim, s.scores)), "pearson": x100(pearson(sim, s.scores)),
                             "n": len(s)} for s, sim in zip(subsets, sims)}
    rhos = [v["spearman"] for v in per_subset.values()]
    sizes = [len(s) for s in subsets]
    values = [rho for rho in rhos if rho is not None]
    complete = bool(rhos) and len(values) == len(rhos)
    pooled_sims = np.concatenate(sims)
    pooled_gold = np.concatenate([s.scores for s in subsets])
    return {
        "all": x100(spearman(pooled_sims, pooled_gold)),
        "mean": float(np.mean(values)) if complete else None,
        "wmean": float(np.average(values, weights=sizes)) if complete else None,
        "pearson_all": x100(pearson(pooled_sims, pooled_gold)),
        "n": sum(sizes),
        "subsets": per_subset,
    }


def run_sts(encoder: Encoder, tasks: Sequence[str] = STS_SUITE, data_dir: str | os.PathLike | None = None,
            batch_size: int = 64, limit: int | None = None, items: dict[str, np.ndarray] | None = None,
            split: str = "test") -> tuple[dict[str, Any], list]:
    """Score ``encoder`` on STS tasks (their ``split``: ``test``, each task's evaluation split, or ``dev``: STS-B's
    dev and SICK-R's trial split); returns the scores and the data files read.

    ``scores[name]`` holds ``all`` (the headline figure), ``mean``, ``wmean`` and per-subset
    figures; ``scores["avg"]`` is the mean headline figure over the tasks run. ``items`` (when given) receives
    every pair's cosine and gold score, ``sts/TASK/SUBSET/sim`` and ``.../gold``.
    """
    scores: dict[str, Any] = {}
    files: list = []
    loaded = sts_sets(tasks, split, data_dir, limit)
    progress.plan(sum(len({text for s in subsets for text in (*s.sentences1, *s.sentences2)})
                      for subsets in loaded.values()))
    for key, subsets in loaded.items():
        files.extend(path for s in subsets for path in s.files)
        name = SHORT_NAMES.get(key, key)
        sims = similarities(encoder, subsets, batch_size)
        scores[name] = score_task(subsets, sims)
        if items is not None:
            for s, sim in zip(subsets, sims):
                items[f"sts/{name}/{s.subset}/sim"], items[f"sts/{name}/{s.subset}/gold"] = sim, s.scores
    headline = [task["all"] for task in scores.values()]
    scores["avg"] = float(np.mean(headline)) if headline and None not in headline else None
    return scores, files


def sts_sets(tasks: Sequence[str], split: str, data_dir: str | os.PathLike | None = None, limit: int | None = None
             ) -> dict[str, list[STSPairs]]:
    """Each task's subsets on ``split`` (``test``: its evaluation split; ``dev``: :func:`dev_split`), the first
    ``limit`` pairs of each."""
    return {key: subset_limit(load_sts(key, dev_split(key) if split == "dev" else None, data_dir), limit)
            for key in tasks}


def dev_split(task: str) -> str:
    """The split of STS ``task`` that ``split: dev`` scores: its dev split (SICK-R's is SentEval's trial split); a
    task without one (STS12-16) is refused."""
    found = [name for name in DEV_SPLITS if name in sts_task(task).splits]
    if not found:
        with_one = [key for key in STS_TASKS if set(DEV_SPLITS) & set(STS_TASKS[key].splits)]
        raise ConfigError(f"split dev: the STS task {task} has no dev split; the tasks with one: {', '.join(with_one)}")
    return found[0]


def sts_items(items: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each STS task's cosines and gold scores over its pooled subsets, in the table's order."""
    tasks = {}
    for task, keys in item_groups(items, "sts").items():
        sims = [key for key in keys if key.endswith("/sim")]
        tasks[task] = (np.concatenate([items[k] for k in sims]).astype(np.float64),
                       np.concatenate([items[k[:-4] + "/gold"] for k in sims]).astype(np.float64))
    return tasks


class STSPresenter(Presenter):
    """The sts suite's section: one column per task, compared pair by pair per task."""

    def sweep_columns(self, section: dict[str, Any]) -> dict[str, float | None]:
        """Each task's headline figure, then the average."""
        return {**{task: value["all"] for task, value in self.scores(section).items() if task != "avg"},
                "avg": section["avg"]}

    @staticmethod
    def table(section: dict[str, Any], model: str) -> Table:
        """One column per task (its headline Spearman x 100) and the average."""
        names = [name for name in section if name not in ("avg", *STSSuite.metadata)]
        return Table(["Model", *(number(name) for name in names), number("Avg.")],
                     [[model, *(section[name]["all"] for name in names), section["avg"]]])

    def compare_sections(self, sections: list[tuple[str, dict[str, Any]]]) -> list[Block]:
        return [Heading(self.suite.title, 3), *stacked([self.table(section, spec) for spec, section in sections])]

    def paired(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: frozenset[str]) -> PairedFigures:
        """Each task's Spearman x 100 over its pooled pairs (the cosines against the gold scores), and their mean."""
        figures, theirs = {}, sts_items(b)
        for task, (sims, gold) in sts_items(a).items():
            if task not in theirs:
                continue
            if theirs[task][0].shape != sims.shape or not np.array_equal(theirs[task][1], gold):
                raise DataError(f"sts/{task}: the two results' pairs differ ({len(sims)} and {len(theirs[task][0])} "
                                "pairs, or other gold scores); results over different items are not compared")
            figures[task] = ([Stratum(sims, theirs[task][0], gold)], 100.0)
        return PairedFigures(figures, "Avg.")

    def settings(self, section: dict[str, Any]) -> dict[str, Any]:
        return {"sts split": section.get("split", "test")}

    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        dev = " on the dev splits" if section.get("split") == "dev" else ""
        return [Heading(f"STS (Spearman x 100){dev}"), self.table(section, spec)]


@dataclass
class STSTasks(Checked):
    """The STS tasks a suite scores: the sts suite's and the geometry suite's STS after PCA (one declaration)."""

    where = "probe options"

    tasks: tuple[str, ...] = setting(STS_SUITE, "STS tasks of the sts suite, and of the geometry suite's "
                                     "STS after PCA, e.g. sts12,stsb", items=Param(str))


@register_suite
class STSSuite(Suite):
    """STS12-16, STS-B and SICK-R (the tasks of ``options.tasks``)."""

    name, title = "sts", "STS (Spearman x 100)"
    rank = 10
    main = {"avg": Score("STS avg.")}
    metadata = ("split",)  # recorded on a dev split only
    presenter = STSPresenter

    @dataclass
    class Options(STSTasks):
        split: str = split_setting()

    params: Options

    def run(self, encoder: Encoder) -> Result:
        items: dict[str, np.ndarray] = {}
        o = self.options
        scores, files = run_sts(encoder, self.params.tasks, o.data_dir, o.batch_size, o.limit, items,
                                self.params.split)
        return Result(scores, scores["avg"], items, files, {"split": "dev"} if self.params.split == "dev" else {})

    def files(self) -> list[Path]:
        sets = sts_sets(self.params.tasks, self.params.split, self.options.data_dir)
        return [path for subsets in sets.values() for s in subsets for path in s.files]
