"""Cont./Oppn. splits of STS subsets by surface and deep similarity (OssCSE, Shi et al., section 3).

Each subset is split on its own medians: the gold score (deep structure similarity) and
the MER of the two sentences (surface structure; low MER = similar surface). A pair is
**Cont.** (consistent) when both agree: score above the median and MER below it, or score
below the median and MER above it. Every other pair, ties at either median included, is
**Oppn.** (opposed).

Which subsets are used is the **split rule** (``--split-rule``): ``paper`` (the default) uses the 16 subsets that the
paper's Table 2 names, over which its Table 3 averages; ``footnote`` uses the rule of its
footnote 3, every subset whose median gold score lies in [2, 3.5], which on these files keeps
20 (the four extra have medians of 3.25 to 3.4, so the paper evidently cut tighter than it
says). Excluded subsets are still listed with their medians.

The subsets are STS12-16's and STS-B train and test, in the SentEval-layout text
(lower-cased, tokenized) the paper used. MER takes sentence1 as the reference.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cselab.atomic import write_json_atomic, write_text_atomic
from cselab.data import STSPairs, load_sts
from cselab.document import Formatted, Table, number, to_markdown
from cselab.errors import ConfigError
from cselab.files import check_folder
from cselab.mer import mer_pairs
from cselab.normalizers import Normalizer
from cselab.evaluation.sts import subset_limit
from cselab.probes.names import SPLIT_RULES

SOURCES = (("sts12", "test"), ("sts13", "test"), ("sts14", "test"), ("sts15", "test"), ("sts16", "test"),
           ("stsb", "train"), ("stsb", "test"))
SCORE_BAND = (2.0, 3.5)
# OssCSE's Table 2, in cselab's subset names.
PAPER_SUBSETS = ("STS12-MSRvid", "STS13-headlines", "STS13-OnWN", "STS14-deft-forum", "STS14-headlines",
                 "STS14-images", "STS15-answers-students", "STS15-headlines", "STS15-images", "STS16-answer-answer",
                 "STS16-headlines", "STS16-plagiarism", "STS16-postediting", "STS16-question-question",
                 "STSB-train", "STSB-test")



def split_labels(scores: np.ndarray, mers: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Cont. mask (True = Cont., False = Oppn.), median score and median MER of one subset."""
    scores, mers = np.asarray(scores, dtype=np.float64), np.asarray(mers, dtype=np.float64)
    median_score, median_mer = float(np.median(scores)), float(np.median(mers))
    cont = ((scores > median_score) & (mers < median_mer)) | ((scores < median_score) & (mers > median_mer))
    return cont, median_score, median_mer


@dataclass(frozen=True)
class SubsetSplit:
    """One STS subset with each pair's MER and Cont./Oppn. label."""

    name: str
    pairs: STSPairs
    mer: np.ndarray
    cont: np.ndarray
    median_score: float
    median_mer: float
    included: bool

    @property
    def n_cont(self) -> int:
        return int(self.cont.sum())

    @property
    def n_oppn(self) -> int:
        return len(self.cont) - self.n_cont

    def part(self, cont: bool) -> STSPairs:
        """The Cont. (``cont=True``) or Oppn. pairs as a subset of their own."""
        keep = np.flatnonzero(self.cont == cont)
        p = self.pairs
        return STSPairs(p.task, f"{p.subset}-{'cont' if cont else 'oppn'}", [p.sentences1[i] for i in keep],
                        [p.sentences2[i] for i in keep], p.scores[keep], p.files)


def subset_name(pairs: STSPairs) -> str:
    """``STS12-MSRvid``, ``STSB-train`` ..."""
    task = "STSB" if pairs.task == "STSBenchmark" else pairs.task
    return f"{task}-{pairs.subset}"


def check_split_rule(rule: str) -> str:
    if rule not in SPLIT_RULES:
        raise ConfigError(f"Unknown split rule {rule!r}; choose one of {', '.join(SPLIT_RULES)}")
    return rule


def split_subset(pairs: STSPairs, normalize: str | Normalizer = "lower", rule: str = "paper") -> SubsetSplit:
    mers = mer_pairs(pairs.sentences1, pairs.sentences2, normalize)
    cont, median_score, median_mer = split_labels(pairs.scores, mers)
    name = subset_name(pairs)
    used = name in PAPER_SUBSETS if check_split_rule(rule) == "paper" else \
        SCORE_BAND[0] <= median_score <= SCORE_BAND[1]
    return SubsetSplit(name, pairs, mers, cont, median_score, median_mer, used)


def build_splits(data_dir: str | os.PathLike | None = None, normalize: str | Normalizer = "lower",
                 rule: str = "paper", limit: int | None = None) -> list[SubsetSplit]:
    """Every subset of STS12-16 and STS-B train/test, split; ``included`` marks those the split ``rule`` uses."""
    splits = [split_subset(pairs, normalize, rule)
              for key, split in SOURCES for pairs in subset_limit(load_sts(key, split, data_dir), limit)]
    if not any(s.included for s in splits):
        raise ConfigError(f"no STS subset is used under the {rule!r} split rule ({SPLIT_RULES[rule]}); "
                         f"the subsets found are {', '.join(s.name for s in splits)}")
    return splits


def _used(s: SubsetSplit) -> str:
    if s.included:
        return "yes"
    in_band = SCORE_BAND[0] <= s.median_score <= SCORE_BAND[1]
    return "no (not in Table 2)" if in_band else "no (median score outside [2, 3.5])"


def split_table(splits: Sequence[SubsetSplit]) -> str:
    """Markdown: subset, #Cont., #Oppn., median score, median MER; excluded subsets marked with the reason."""
    used = [s for s in splits if s.included]
    rows = [[s.name, s.n_cont, s.n_oppn, s.median_score, s.median_mer, _used(s)] for s in splits]
    rows.append([f"**used: {len(used)} subsets**", sum(s.n_cont for s in used), sum(s.n_oppn for s in used),
                 Formatted(""), Formatted(""), ""])
    return to_markdown([Table(["Subset", number("#Cont."), number("#Oppn."), number("Median score"),
                               number("Median MER", 4), "Used"], rows)])


def split_summary(splits: Sequence[SubsetSplit]) -> list[dict[str, Any]]:
    """The split table as records, for JSON."""
    return [{"subset": s.name, "n_cont": s.n_cont, "n_oppn": s.n_oppn, "median_score": s.median_score,
             "median_mer": s.median_mer, "included": s.included} for s in splits]


def write_pairs_jsonl(splits: Sequence[SubsetSplit], path: str | os.PathLike) -> Path:
    """Every pair with its subset, gold score, MER and split label (``cont`` / ``oppn``), one JSON object a line."""
    lines = []
    for s in splits:
        for i, (a, b) in enumerate(zip(s.pairs.sentences1, s.pairs.sentences2)):
            lines.append(json.dumps({"subset": s.name, "index": i, "sentence1": a, "sentence2": b,
                                     "score": float(s.pairs.scores[i]), "mer": float(s.mer[i]),
                                     "split": "cont" if s.cont[i] else "oppn", "subset_used": s.included}))
    return write_text_atomic(path, "\n".join(lines) + "\n")


def write_split_files(splits: Sequence[SubsetSplit], out_dir: str | os.PathLike, normalize: str,
                      rule: str) -> list[Path]:
    """``splits.json`` (the table and the split rule), ``splits.md`` and ``pairs.jsonl`` in ``out_dir``."""
    out = check_folder(out_dir, "--out-dir")
    summary = {"mer_normalize": normalize, "split_rule": rule, "split_rule_description": SPLIT_RULES[rule],
               "subsets": split_summary(splits)}
    return [write_json_atomic(out / "splits.json", summary),
            write_text_atomic(out / "splits.md", split_table(splits) + "\n"),
            write_pairs_jsonl(splits, out / "pairs.jsonl")]
