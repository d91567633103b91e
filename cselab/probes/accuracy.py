"""What the transfer and probing suites share: a section of per-task classifier accuracies (test accuracy x 100),
read, tabled, compared item by item (each test item's prediction right or wrong) and drawn the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from cselab.document import Block, Column, Formatted, Heading, Paragraph, Table, number, stacked
from cselab.errors import DataError
from cselab.evaluation.setups import CLASSIFIER_SETUPS
from cselab.probes.paired import aligned, item_groups
from cselab.probes.plots import plot_accuracies
from cselab.probes.results import suite_setting
from cselab.probes.significance import Stratum
from cselab.probes.suite import PairedFigures, Presenter, Suite
from cselab.registry import Checked, setting

# the keys of a section that are not tasks ('protocol': older results' name for the classifier setup)
METADATA = ("folder", "classifier", "protocol", "sentences_encoded", "encode_s", "skipped", "split")


def tasks_of(section: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A section's entries by task: its keys but the metadata and the average."""
    return {name: value for name, value in section.items() if name not in (*METADATA, "avg")}


def average_accuracy(section: dict[str, Any]) -> float | None:
    """A section's ``avg``, else the mean of its tasks' test accuracies (None for none)."""
    accuracies = [accuracy(task) for task in tasks_of(section).values()]
    return section.get("avg", float(np.mean(accuracies)) if accuracies else None)


def accuracy(task: dict[str, Any]) -> float:
    """A task's figure: its test accuracy, or on a dev split (``split: dev``, no test scored) its ``devacc``."""
    return task["acc"] if "acc" in task else task["devacc"]


class AccuracyPresenter(Presenter):
    """A section of one entry per task (``acc``, ``devacc`` ...), headed by the suite's ``heading`` in the report;
    compared item by item (each test item's prediction right or wrong)."""

    suite: type[AccuracySuite]

    def main_scores(self, section: dict[str, Any]) -> dict[str, float | None]:
        return {"avg": average_accuracy(section)}

    def settings(self, section: dict[str, Any]) -> dict[str, Any]:
        return {f"{self.suite.name} classifier": suite_setting(section, "classifier"),
                f"{self.suite.name} split": section.get("split", "test")}

    def table(self, section: dict[str, Any], model: str) -> Table:
        """Test accuracy x 100 per task (MRPC: accuracy/F1; on a dev split its dev accuracy) and the average."""
        tasks = tasks_of(section)
        values = [Formatted(f"{v['acc']:.2f}/{v['f1']:.2f}") if "f1" in v else accuracy(v) for v in tasks.values()]
        columns: list[Column] = [Column("Model"), *(number(name) for name in tasks)]
        if "avg" in section:
            columns, values = [*columns, number("Avg.")], [*values, section["avg"]]
        return Table(columns, [[model, *values]])

    def details(self, section: dict[str, Any]) -> Table:
        """Per task: validation and test accuracy, chosen weight decay (and classifier), sizes, classifier time."""
        rows = []
        for name, v in tasks_of(section).items():
            sizes = Formatted(" / ".join(str(v[k]) for k in ("n_all", "n_train", "n_dev", "n_test") if k in v))
            classifier = "LR" if not v.get("nhid") else f"MLP {v['nhid']}, dropout {v['dropout']}"
            reg = None if "reg" not in v else Formatted(str(v["reg"]) if not isinstance(v["reg"], list) else "per fold")
            rows.append([name, v["devacc"], v.get("acc"), classifier, reg, sizes, v.get("classifier_s")])
        return Table(["Task", number("Dev acc."), number("Test acc."), "Classifier", number("L2"), number("Sizes"),
                      number("Time (s)", 1)], rows)

    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        """The accuracy table and details, or why the suite was skipped."""
        if "skipped" in section and not tasks_of(section):
            return [Heading(self.suite.heading), Paragraph(f"Skipped: {section['skipped']}")]
        setup = suite_setting(section, "classifier")
        blocks: list[Block] = [
            Heading(f"{self.suite.heading} ({section.get('split', 'test')} accuracy x 100, {setup} classifier setup)"),
            self.table(section, spec), self.details(section),
            Paragraph(f"{section['sentences_encoded']} distinct sentences encoded once ({section['encode_s']} s).")]
        if section.get("skipped"):
            blocks.append(Paragraph(f"Not present: {', '.join(section['skipped'])}."))
        return blocks

    def compare_sections(self, sections: list[tuple[str, dict[str, Any]]]) -> list[Block]:
        tables = [self.table(section, spec) for spec, section in sections if tasks_of(section)]
        return [Heading(self.suite.title, 3), *stacked(tables)] if tables else []

    def paired(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: frozenset[str]) -> PairedFigures:
        """Each task's test accuracy from each item's prediction being right (1) or wrong (0), and their mean."""
        figures = {}
        for task in item_groups(a, self.suite.name):
            key = f"{self.suite.name}/{task}"
            if f"{key}/pred" not in b:
                continue
            if not np.array_equal(a[f"{key}/label"], b[f"{key}/label"]):
                raise DataError(f"{key}: the two results' test items differ; results over different items are not "
                                "compared")
            pa, pb = aligned(a, b, f"{key}/pred")
            labels = a[f"{key}/label"]
            figures[task] = ([Stratum((pa == labels).astype(np.float64), (pb == labels).astype(np.float64))], 100.0)
        return PairedFigures(figures, "Avg.")

    def plots(self, section: dict[str, Any], out: Path, spec: str) -> dict[Path, str]:
        tasks = tasks_of(section)
        if not tasks:
            return {}
        name = self.suite.name
        title = f"{spec}: {name} ({suite_setting(section, 'classifier')} classifier setup)"
        accuracies = {task: value["acc"] for task, value in tasks.items()}
        path = plot_accuracies(accuracies, out.with_suffix(f".{name}.png"), title)
        return {path: f"test accuracy per {name} task"}


class AccuracySuite(Suite):
    """A suite whose section holds one entry per task, with ``heading`` in the report (:class:`AccuracyPresenter`)."""

    heading: ClassVar[str]
    metadata = METADATA
    presenter = AccuracyPresenter

    @dataclass
    class Options(Checked):
        where = "probe options"

        classifier: str = setting("full", "transfer and probing classifiers: full = SentEval's default (10 "
                                  "folds, Adam, batch 64, tenacity 5, epoch size 4), fast = its prototyping setting "
                                  "(5 folds, RMSprop, batch 128, tenacity 3, epoch size 2)",
                                  choices=tuple(CLASSIFIER_SETUPS))
        n_jobs: int = setting(1, "worker processes for the classifiers", min=1)
