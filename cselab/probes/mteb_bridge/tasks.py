"""cselab's test sets as MTEB 2 tasks, read from the data root (no hub): the STS tasks in SentEval's files and the
bias benchmark (the Cont. and Oppn. splits, the transformation probe, the CANNOT negation pairs).

Every task is an ``AbsTaskSTS`` over one ``default`` subset and a ``test`` split: mteb encodes both sides of every
pair with the model's ``encode`` and computes the cosines (and writes them to its prediction folder); the task turns
them into the same figures as ``probe run``, on MTEB's scale (a fraction, where ``probe run`` prints x 100).

A task reads its pairs when it is built, so its dataset revision (one sha256 over the files read and the settings
that change the pairs) is known before ``mteb.evaluate`` looks in its result cache. mteb 2 reuses a cached result
that holds every split and subset of a task without comparing dataset revisions, so each task's one subset is named
after its revision (``default-`` and 16 hex digits, as the datasets library names a configuration built with other
settings): a cached result of other data lacks this subset, is found not mergeable (its revision differs) and is
computed again, never served.
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata

from cselab.checksum import sha256
from cselab.data import load_cannot, load_sts
from cselab.metrics import spearman
from cselab.probes.bias import weighted_average
from cselab.probes.names import SPLIT_RULES, STS_SUITE
from cselab.probes.splits import build_splits
from cselab.evaluation.sts import subset_limit
from cselab.probes.sts import SHORT_NAMES
from cselab.probes.transformations import (TRANSFORMATIONS, handwritten_testset, paraphrase_over_negation,
                                           read_testset)

REFERENCE = "https://aclanthology.org/2023.emnlp-main.448"  # OssCSE (Shi et al., 2023)


def _metadata(name: str, description: str, main_score: str) -> TaskMetadata:
    return TaskMetadata(
        name=name, dataset={"path": f"cselab/{name}", "revision": "read-when-built"}, description=description,
        reference=REFERENCE, type="STS", category="t2t", modalities=["text"], eval_splits=["test"],
        eval_langs=["eng-Latn"], main_score=main_score, date=None, domains=None, task_subtypes=None, license=None,
        annotations_creators="human-annotated", dialect=None, sample_creation="found", bibtex_citation="")


class PairTask(AbsTaskSTS):
    """A task of sentence pairs read from the data root by :meth:`pairs`, scored as mteb scores STS; ``groups``:
    (name, size) of consecutive runs of pairs (STS subsets, negation sets), in order."""

    settings: tuple[str, ...] = ("limit",)
    own: tuple[str, ...] = ()  # keyword arguments of the constructor that are the task's own settings

    def __init__(self, data_dir: str | os.PathLike | None = None, limit: int | None = None, **kwargs: Any):
        self.data_dir, self.limit = data_dir, limit
        self.groups: list[tuple[str, int]] = []
        self.files: list[Path] = []
        super().__init__(**{k: v for k, v in kwargs.items() if k not in self.own})
        for key in self.own:
            setattr(self, key, kwargs.get(key, getattr(type(self), key)))
        self._pairs = self.pairs()  # the revision, and so the subset's name, before any cache lookup
        revision = self.revision()
        self.subset = f"default-{revision[:16]}"
        self.metadata = self.metadata.model_copy(update={
            "dataset": {**self.metadata.dataset, "revision": revision}, "eval_langs": {self.subset: ["eng-Latn"]}})
        self.hf_subsets = [self.subset]

    @abstractmethod
    def pairs(self) -> tuple[list[str], list[str], list[float]]:
        """First sentences, second sentences and gold scores; fills :attr:`groups` and :attr:`files`."""

    def paired_items(self, similarity: np.ndarray, gold: np.ndarray) -> dict[str, np.ndarray]:
        """The per-item arrays ``probe compare`` pairs for this task's main score: ``sim``, ``gold`` and (when the
        figure weighs subsets) ``group``, each pair's group index, for a Spearman figure; ``hit`` or ``cos`` for a
        mean."""
        return {"sim": similarity, "gold": gold}

    def revision(self) -> str:
        """One sha256 over the files read (names and contents) and the settings that change the pairs."""
        digest = hashlib.sha256()
        for path in sorted(self.files, key=lambda p: p.name):
            digest.update(f"{path.name}\0{sha256(path)}\n".encode())
        digest.update(json.dumps({key: getattr(self, key) for key in self.settings}, sort_keys=True).encode())
        return digest.hexdigest()

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        first, second, gold = self._pairs
        self.dataset = {self.subset: DatasetDict({"test": Dataset.from_dict(
            {"sentence1": first, "sentence2": second, "score": [float(g) for g in gold]})})}
        self.data_loaded = True

    def slices(self) -> list[tuple[str, slice]]:
        """Each group's name and its pairs' positions."""
        found, start = [], 0
        for name, size in self.groups:
            found.append((name, slice(start, start + size)))
            start += size
        return found


class LocalSTS(PairTask):
    """An STS task of the SentEval layout, every subset's pairs pooled, scored as mteb scores STS: its ``spearman``
    (the model's similarity) is ``probe run``'s headline figure of the task (``all``) / 100 under cselab's adapter;
    the main score stays mteb's ``cosine_spearman``."""

    key = "stsb"

    def pairs(self) -> tuple[list[str], list[str], list[float]]:
        subsets = subset_limit(load_sts(self.key, data_dir=self.data_dir), self.limit)
        self.groups = [(s.subset, len(s)) for s in subsets]
        self.files = sorted({path for s in subsets for path in s.files})
        return ([t for s in subsets for t in s.sentences1], [t for s in subsets for t in s.sentences2],
                [g for s in subsets for g in s.scores])


def _sts_task(key: str) -> type[LocalSTS]:
    name = "Cselab" + SHORT_NAMES[key].replace("-", "")
    return type(name, (LocalSTS,), {"key": key, "metadata": _metadata(
        name, f"{SHORT_NAMES[key]} from the SentEval layout under cselab's data root (its evaluation split, every "
              "subset pooled)", "cosine_spearman")})


STS_TASKS = {key: _sts_task(key) for key in STS_SUITE}
CselabSTS12, CselabSTS13, CselabSTS14, CselabSTS15, CselabSTS16, CselabSTSB, CselabSICKR = STS_TASKS.values()


class FigureTask(PairTask):
    """A pair task scored by its own :meth:`figures` instead of mteb's STS metrics."""

    @abstractmethod
    def figures(self, similarity: np.ndarray, gold: np.ndarray) -> dict[str, Any]:
        """The task's scores from each pair's similarity (and gold score)."""

    def _calculate_scores(  # type: ignore[override]  # mteb keeps any scores dict; STSMetrics too narrow
            self, scores, normalized_scores: list[float]) -> dict[str, Any]:
        """:meth:`figures` of the model's own similarity (cselab's float64 cosine under
        :mod:`cselab.encoders.mteb_model`), else of mteb's cosine."""
        similarity = scores["similarity_scores"] if scores["similarity_scores"] is not None else scores["cosine_scores"]
        return self.figures(np.asarray(similarity, dtype=np.float64), np.asarray(normalized_scores, dtype=np.float64))


class SplitTask(FigureTask):
    """The Cont. (or Oppn.) part of every STS subset the split rule uses: ``spearman`` (main) is the size-weighted
    average of the subsets' Spearman correlations (the paper's aggregate, ``probe run``'s ``cont_wavg``/``oppn_wavg``
    / 100); ``spearman.SUBSET`` and ``n.SUBSET`` each subset's."""

    cont = True
    split_rule, mer_normalize = "paper", "lower"
    own = ("split_rule", "mer_normalize")
    settings = ("limit", "split_rule", "mer_normalize")

    def pairs(self) -> tuple[list[str], list[str], list[float]]:
        splits = [s for s in build_splits(self.data_dir, self.mer_normalize, self.split_rule, self.limit)
                  if s.included]
        masks = [np.asarray(s.cont if self.cont else ~np.asarray(s.cont), dtype=bool) for s in splits]
        self.groups = [(s.name, int(mask.sum())) for s, mask in zip(splits, masks)]
        self.files = sorted({path for s in splits for path in s.pairs.files})
        picked = [(s.pairs, np.flatnonzero(mask)) for s, mask in zip(splits, masks)]
        return ([p.sentences1[i] for p, rows in picked for i in rows],
                [p.sentences2[i] for p, rows in picked for i in rows],
                [float(p.scores[i]) for p, rows in picked for i in rows])

    def figures(self, cosines: np.ndarray, gold: np.ndarray) -> dict[str, Any]:
        per = {name: spearman(cosines[part], gold[part]) for name, part in self.slices()}
        sizes = dict(self.groups)
        found: dict[str, Any] = {"spearman": weighted_average(list(per.values()), list(sizes.values())),
                                 "split_rule": self.split_rule, "mer_normalize": self.mer_normalize}
        for name, value in per.items():
            found[f"spearman.{name}"], found[f"n.{name}"] = value, sizes[name]
        return found

    def paired_items(self, similarity: np.ndarray, gold: np.ndarray) -> dict[str, np.ndarray]:
        return {"sim": similarity, "gold": gold, "group": np.repeat(np.arange(len(self.groups)),
                                                                    [size for _, size in self.groups])}


class CselabCont(SplitTask):
    metadata = _metadata("CselabCont", "Cont. pairs of OssCSE's split of STS12-16 and STS-B (gold score and surface "
                                       "similarity agree); size-weighted Spearman over the subsets", "spearman")


class CselabOppn(SplitTask):
    cont = False
    metadata = _metadata("CselabOppn", "Oppn. pairs of OssCSE's split of STS12-16 and STS-B (gold score and surface "
                                       "similarity disagree); size-weighted Spearman over the subsets",
                         "spearman")


class CselabTransformations(FigureTask):
    """Each source sentence against its transformations (paraphrase, negation, insertion, deletion, substitution,
    random): ``paraphrase_over_negation`` (main), the share of sources whose paraphrase is closer than their
    negation; ``mean_cosine.TYPE`` per transformation. There is no gold score (``score`` is 0)."""

    testset: str | os.PathLike | None = None
    own = ("testset",)
    settings = ()  # --limit cuts STS subsets and negation sets, not the test set (as in probe run)
    metadata = _metadata("CselabTransformations", "cselab's transformation probe: 48 hand-written sources in four "
                         "domains, each against six transformations", "paraphrase_over_negation")

    def pairs(self) -> tuple[list[str], list[str], list[float]]:
        path = Path(self.testset) if self.testset else handwritten_testset()
        items = read_testset(path)
        self.files = [path]
        self.kinds = [(i, kind) for i, item in enumerate(items) for kind in item.transformed]
        self.groups = [("pairs", len(self.kinds))]
        return ([items[i].source for i, _ in self.kinds], [items[i].transformed[k] for i, k in self.kinds],
                [0.0] * len(self.kinds))

    def figures(self, cosines: np.ndarray, gold: np.ndarray) -> dict[str, Any]:
        hits = self.paired_items(cosines, gold)["hit"]
        found: dict[str, Any] = {"paraphrase_over_negation": float(np.mean(hits)) if len(hits) else None,
                                 "n_sources": len(hits)}
        for kind in TRANSFORMATIONS:
            rows = [c for (_, k), c in zip(self.kinds, cosines) if k == kind]
            found[f"mean_cosine.{kind}"] = float(np.mean(rows)) if rows else None
        return found

    def paired_items(self, similarity: np.ndarray, gold: np.ndarray) -> dict[str, np.ndarray]:
        records = [{"item": i, "type": kind, "cosine": float(c)} for (i, kind), c in zip(self.kinds, similarity)]
        return {"hit": paraphrase_over_negation(records)}


class CselabCANNOT(FigureTask):
    """The CANNOT negation sets: ``mean_cosine`` (main) of each sentence with its negation over all pairs (lower
    means negation moves the embedding further), ``mean_cosine.SET`` per set."""

    metadata = _metadata("CselabCANNOT", "CANNOT negation pairs (Anschütz et al., 2023): each sentence against its "
                         "minimally negated version", "mean_cosine")

    def pairs(self) -> tuple[list[str], list[str], list[float]]:
        sets = [(s.name, s.sentences[:self.limit], s.negated[:self.limit], s.files) for s in load_cannot(self.data_dir)]
        self.groups = [(name, len(first)) for name, first, _, _ in sets]
        self.files = sorted({path for *_, files in sets for path in files})
        return [t for _, first, _, _ in sets for t in first], [t for _, _, neg, _ in sets for t in neg], \
            [0.0] * sum(size for _, size in self.groups)

    def figures(self, cosines: np.ndarray, gold: np.ndarray) -> dict[str, Any]:
        found: dict[str, Any] = {"mean_cosine": float(np.mean(cosines)), "n": len(cosines)}
        for name, part in self.slices():
            found[f"mean_cosine.{name}"] = float(np.mean(cosines[part]))
        return found

    def paired_items(self, similarity: np.ndarray, gold: np.ndarray) -> dict[str, np.ndarray]:
        return {"cos": similarity}


BIAS_TASKS: tuple[type[FigureTask], ...] = (CselabCont, CselabOppn, CselabTransformations, CselabCANNOT)
TASKS: dict[str, type[PairTask]] = {cls.metadata.name: cls for cls in (*STS_TASKS.values(), *BIAS_TASKS)}


def bias_tasks(data_dir: str | os.PathLike | None = None, split_rule: str = "paper", mer_normalize: str = "lower",
               testset: str | os.PathLike | None = None, limit: int | None = None) -> list[PairTask]:
    """The bias benchmark as MTEB tasks, with ``probe run --suite bias``'s settings (its defaults)."""
    if split_rule not in SPLIT_RULES:
        raise ValueError(f"split_rule {split_rule!r}: choose from {', '.join(SPLIT_RULES)}")
    splits = {"split_rule": split_rule, "mer_normalize": mer_normalize}
    return [CselabCont(data_dir, limit, **splits), CselabOppn(data_dir, limit, **splits),
            CselabTransformations(data_dir, limit, testset=testset), CselabCANNOT(data_dir, limit)]


def sts_tasks(data_dir: str | os.PathLike | None = None, tasks=STS_SUITE, limit: int | None = None
              ) -> list[LocalSTS]:
    """STS12-16, STS-B and SICK-R from the SentEval layout under the data root, as MTEB tasks."""
    return [STS_TASKS[key](data_dir, limit) for key in tasks]
