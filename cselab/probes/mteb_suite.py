"""``probe run --suite mteb --mteb-tasks NAME,...``: MTEB 2 tasks on any encoder, through mteb's own ``evaluate``.

A task is one of cselab's (:data:`cselab.probes.mteb_bridge.tasks.TASKS`: ``CselabSTSB``, ``CselabCont`` ...,
read from the data root), an MTEB task whose data is in the local Hugging Face cache, or ``NAME=FOLDER``: an MTEB
task read from a local folder of its data files (e.g. ``STSBenchmark=data/stsb`` holding ``test.jsonl``). Nothing is
downloaded: the hub is switched off while the tasks load. The section keeps each task's MTEB result (mteb's
``TaskResult`` as a dict) and the model's ``ModelMeta``; the per-item outputs (mteb's predictions) go to the items,
so ``probe compare`` gives paired intervals on MTEB tasks too (STS-type tasks and cselab's own), and
``probe export-mteb`` writes MTEB's results layout.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from cselab.document import Block, Heading, Paragraph, Table, number, stacked
from cselab.encoders import Encoder
from cselab.errors import ConfigError, DataError
from cselab.evaluation.scoring import Result
from cselab.files import clipped, shown
from cselab.data import DataNotFoundError
from cselab.probes.paired import aligned
from cselab.probes.significance import Stratum
from cselab.probes.suite import PairedFigures, ProbeOptions, Presenter, Score, Suite, register_suite
from cselab.metrics import MIN_PAIRS
from cselab.probes.bias import BiasSuite
from cselab.registry import Param, setting

EXTRA = "pip install 'cselab-toolkit[mteb]'"


def require_mteb():
    try:
        import mteb
    except ImportError:
        raise ConfigError(f"--suite mteb needs mteb 2: {EXTRA}") from None
    return mteb


@contextmanager
def offline():
    """The Hugging Face hub switched off (datasets and huggingface_hub read their flag when they load)."""
    import datasets
    import huggingface_hub

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def resolve_task(spec: str, options: ProbeOptions, params: MTEBSuite.Options | None = None):
    """The task ``spec`` names (see the module docstring), built with the run's options and the suite's settings
    ``params`` (None: their defaults) where it is cselab's."""
    from cselab.probes.mteb_bridge.tasks import TASKS, SplitTask

    name, _, folder = spec.partition("=")
    if name in TASKS:
        if folder:
            raise ConfigError(f"--mteb-tasks {spec}: {name} is cselab's and reads the data root; give no folder")
        cls = TASKS[name]
        p = MTEBSuite.Options() if params is None else params
        own = {"split_rule": p.split_rule, "mer_normalize": p.mer_normalize} \
            if issubclass(cls, SplitTask) else {"testset": p.testset} if "testset" in cls.own else {}
        return cls(options.data_dir, options.limit, **own)
    try:
        task = require_mteb().get_task(name)
    except KeyError:
        raise ConfigError(f"--mteb-tasks: {name!r} is neither one of cselab's tasks ({', '.join(TASKS)}) nor a "
                          "task mteb knows (mteb.get_tasks() lists them)") from None
    if folder:
        if not Path(folder).is_dir():
            raise DataNotFoundError(f"--mteb-tasks {spec}: no folder at {folder}")
        from cselab.checksum import folder_sha256

        try:
            revision = folder_sha256(folder)  # what the folder holds now: an edit changes it
        except OSError as err:
            raise DataError(f"--mteb-tasks {spec}: cannot read {err.filename or folder} ({err.strerror})") from None
        task.metadata = task.metadata.model_copy(update={"dataset": {"path": str(Path(folder).resolve()),
                                                                      "revision": revision}})
    return task


def is_default(subset: str) -> bool:
    """MTEB's one subset of a task: ``default``, or a cselab task's ``default-REVISION``."""
    return subset.split("-")[0] == "default"


def _load(task, spec: str) -> None:
    try:
        task.load_data()
    except (ConfigError, DataError):
        raise
    except Exception as err:  # not in the local cache (the hub is off), or files mteb cannot read
        where = task.metadata.dataset.get("path")
        raise DataNotFoundError(f"MTEB task {spec}: its data ({where}) could not be loaded without the hub "
                                f"({type(err).__name__}: {clipped(err, 160)}); load it once where the hub answers "
                                f"(mteb.get_task({task.metadata.name!r}).load_data()) and copy the Hugging Face "
                                "cache here, or give NAME=FOLDER") from None


def _split(task, subset: str, split: str):
    return task.dataset[split] if subset not in task.dataset and is_default(subset) else task.dataset[subset][split]


def check_pairs(task, spec: str) -> None:
    """An STS-type task's loaded data, checked before mteb scores it: each split it evaluates has the columns
    ``sentence1``, ``sentence2`` and ``score``, a finite number in every ``score`` and at least two pairs (one
    DataError naming the task, its data and the split)."""
    if task.metadata.type != "STS":
        return
    where = f"MTEB task {task.metadata.name} ({task.metadata.dataset.get('path')})"
    for subset in task.hf_subsets or ["default"]:
        for split in task.eval_splits:
            try:
                data = _split(task, subset, split)
            except (KeyError, TypeError):
                raise DataError(f"{where}: has no {split!r} split (subset {subset!r}) to score") from None
            missing = [c for c in ("sentence1", "sentence2", "score") if c not in data.column_names]
            if missing:
                raise DataError(f"{where}: split {split!r} has no column {', '.join(map(repr, missing))} (it has "
                                f"{', '.join(map(repr, data.column_names))})")
            bad = next((i for i, v in enumerate(data["score"]) if isinstance(v, bool) or not isinstance(
                v, (int, float)) or not np.isfinite(v)), None)
            if bad is not None:
                raise DataError(f"{where}: split {split!r}, row {bad + 1}: score {shown(data['score'][bad], 30)} "
                                "is not a finite number")
            if len(data) < MIN_PAIRS:
                raise DataError(f"{where}: split {split!r} holds {len(data)} pair; a correlation needs at least "
                                f"{MIN_PAIRS}")


def _gold(task, subset: str, split: str) -> np.ndarray:
    return np.asarray(_split(task, subset, split)["score"], dtype=np.float64)


def task_items(task, folder: Path) -> dict[str, np.ndarray]:
    """``mteb/TASK/SUBSET/SPLIT/NAME`` arrays of an STS-type task from mteb's predictions in ``folder``: the model's
    similarity of each pair and, per task, the arrays its main score is computed from (cselab's tasks' own
    ``paired_items``; ``sim`` and ``gold`` for MTEB's STS tasks). Other task types give none."""
    path = folder / task.prediction_file_name
    if task.metadata.type != "STS" or not path.is_file():
        return {}
    predictions = json.loads(path.read_text(encoding="utf-8"))
    items = {}
    for subset, splits in predictions.items():
        if subset == "mteb_model_meta":
            continue
        for split, scores in splits.items():
            # the scores the main score is computed from: mteb's float32 cosine for cosine_spearman (MTEB's STS
            # tasks), the model's similarity (cselab's float64 cosine) for cselab's bias tasks
            key = "cosine_scores" if task.metadata.main_score.startswith("cosine_") else "similarity_scores"
            similarity = np.asarray(scores.get(key) or scores["cosine_scores"], dtype=np.float64)
            gold = _gold(task, subset, split)
            arrays = task.paired_items(similarity, gold) if hasattr(task, "paired_items") else \
                {"sim": similarity, "gold": gold}
            # a cselab task's subset (default-REVISION) is keyed as "default": results of two revisions are told
            # apart by their dataset revisions (item_inputs), and keys of results written before still pair
            prefix = f"mteb/{task.metadata.name}/{'default' if is_default(subset) else subset}/{split}/"
            items.update({prefix + key: value for key, value in arrays.items()})
    return items


def _figure(a: dict[str, np.ndarray], b: dict[str, np.ndarray], prefix: str) -> tuple[list[Stratum], float]:
    """One task's main score as strata (see :meth:`MTEBPresenter.paired`)."""
    if prefix + "hit" in a:
        return [Stratum(*aligned(a, b, prefix + "hit"))], 100.0
    if prefix + "cos" in a:
        return [Stratum(*aligned(a, b, prefix + "cos"))], 100.0
    x, y = aligned(a, b, prefix + "sim")
    gold = a[prefix + "gold"].astype(np.float64)
    if not np.array_equal(gold, b[prefix + "gold"]):
        raise DataError(f"{prefix}gold: the two results' gold scores differ; results over different items are not "
                        "compared")
    if prefix + "group" not in a:
        return [Stratum(x, y, gold)], 100.0
    groups = a[prefix + "group"]
    return [Stratum(x[groups == g], y[groups == g], gold[groups == g], float(np.mean(groups == g)))
            for g in np.unique(groups)], 100.0


class MTEBPresenter(Presenter):
    """The mteb suite's section: each task's main score, compared item by item where its items are known."""

    def _table(self, section: dict[str, Any], spec: str) -> Table:
        tasks = section.get("tasks", {})
        return Table(["Model", *(number(name) for name in tasks)],
                     [[spec, *(100 * t["main_score"] for t in tasks.values())]])

    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        metrics = ", ".join(f"{name}: {t['main_metric']}" for name, t in section.get("tasks", {}).items())
        return [Heading(self.suite.title), self._table(section, spec), Paragraph(f"Main scores: {metrics}.")]

    def compare_sections(self, sections: list[tuple[str, dict[str, Any]]]) -> list[Block]:
        return [Heading(self.suite.title, 3), *stacked([self._table(section, spec) for spec, section in sections])]

    def item_inputs(self, section: dict[str, Any], inputs: dict[str, Any], data: dict[str, Any]
                    ) -> dict[str, dict[str, Any]]:
        """The data files read and each task's dataset revision (an MTEB task's data is not under the data root)."""
        revisions = {f"dataset:{name}": t.get("dataset_revision") for name, t in section.get("tasks", {}).items()}
        return {self.suite.name: {**inputs, **revisions}}

    def paired(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: frozenset[str]) -> PairedFigures:
        """Each task's main score over its items: Spearman x 100 of the similarities against the gold scores (per
        subset, weighted by size, where the task weighs subsets: Cont., Oppn.), paraphrase over negation (% of
        sources), the mean CANNOT cosine; all x 100, as the suite's table."""
        prefixes = sorted({key.rsplit("/", 1)[0] + "/" for key in a if key.startswith("mteb/")})
        figures = {}
        for prefix in prefixes:
            if not any(key.startswith(prefix) for key in b):
                continue
            _, task, subset, split, _ = prefix.split("/")
            label = task if (subset, split) == ("default", "test") else f"{task} ({subset}, {split})"
            figures[label] = _figure(a, b, prefix)
        return PairedFigures(figures)


@register_suite
class MTEBSuite(Suite):
    """MTEB tasks (``--mteb-tasks``), run by mteb on the encoder through :mod:`cselab.encoders.mteb_model`."""

    name, title = "mteb", "MTEB (main score x 100)"
    rank = 60
    main: ClassVar[dict[str, Score]] = {}  # each task's main score is in its own table (no one figure sums them up)
    metadata = ("model_meta", "mteb_version")
    in_all = False  # it needs --mteb-tasks

    @dataclass
    class Options(BiasSuite.Options):  # cselab's own MTEB tasks are the bias suite's, under its settings
        mteb_tasks: tuple[str, ...] = setting((), "tasks of the mteb suite: cselab's (CselabSTSB, CselabCont "
                                              "...), an MTEB task in the local Hugging Face cache, or NAME=FOLDER "
                                              "(nothing is downloaded)", items=Param(str))
    presenter = MTEBPresenter
    params: Options

    def run(self, encoder: Encoder) -> Result:
        if not self.params.mteb_tasks:
            raise ConfigError("--suite mteb needs --mteb-tasks NAME,... (cselab's CselabSTSB, CselabCont, ...; an "
                              "MTEB task whose data is in the local Hugging Face cache; or NAME=FOLDER)")
        mteb = require_mteb()
        from cselab.encoders.mteb_model import MTEBEncoder

        model = MTEBEncoder(encoder)
        tasks = [resolve_task(spec, self.options, self.params) for spec in self.params.mteb_tasks]
        items: dict[str, np.ndarray] = {}
        with offline(), tempfile.TemporaryDirectory() as folder:
            for task, spec in zip(tasks, self.params.mteb_tasks):
                _load(task, spec)
                check_pairs(task, spec)
            found = mteb.evaluate(model, tasks, cache=None, prediction_folder=folder, show_progress_bar=False,
                                  encode_kwargs={"batch_size": self.options.batch_size})
            for task in tasks:
                items.update(task_items(task, Path(folder)))
        results = {result.task_name: result for result in found.task_results}
        scores = {"tasks": {task.metadata.name: {
            "main_score": results[task.metadata.name].get_score(), "main_metric": task.metadata.main_score,
            "type": task.metadata.type, "dataset_revision": task.metadata.revision,
            "compared_by_item": any(key.startswith(f"mteb/{task.metadata.name}/") for key in items),
            "result": json.loads(results[task.metadata.name].model_dump_json())} for task in tasks}}
        files = [path for task in tasks for path in getattr(task, "files", [])]
        metadata = {"model_meta": json.loads(json.dumps(model.mteb_model_meta.to_dict(), default=str)),
                    "mteb_version": mteb.__version__}
        return Result(scores, None, items, files, metadata)
