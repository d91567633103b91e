"""Named data sets: the STS tasks of SentEval and the plain-text corpora under the data root."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cselab.data.errors import DataFormatError, DataNotFoundError
from cselab.data.readers import (
    NegationPairs,
    STSPairs,
    read_corpus,
    read_lines,
    read_negation_pairs,
    read_sick_split,
    read_sts_subset,
    read_stsb_split,
)
from cselab.data.root import corpus_dir, data_root, senteval_dir
from cselab.errors import ConfigError, DataError, did_you_mean
from cselab.metrics import MIN_PAIRS

DataDir = str | os.PathLike | None

# SentEval's subsets; STS13's SMT inputs are not public (LDC licence), so STS13 has three.
STS_YEARS = {
    "sts12": ("STS12", "STS12-en-test", ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")),
    "sts13": ("STS13", "STS13-en-test", ("FNWN", "headlines", "OnWN")),
    "sts14": ("STS14", "STS14-en-test", ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")),
    "sts15": ("STS15", "STS15-en-test", ("answers-forums", "answers-students", "belief", "headlines", "images")),
    "sts16": ("STS16", "STS16-en-test",
              ("answer-answer", "headlines", "plagiarism", "postediting", "question-question")),
}
STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


@dataclass(frozen=True)
class STSTask:
    """A named STS data set: its display name, its splits and the split the probe scores."""

    key: str
    name: str
    splits: tuple[str, ...]
    eval_split: str
    description: str


STS_TASKS = {
    **{key: STSTask(key, name, ("test",), "test", f"SemEval {name} English test, subsets {', '.join(subsets)}")
       for key, (name, _, subsets) in STS_YEARS.items()},
    "stsb": STSTask("stsb", "STSBenchmark", tuple(STSB_FILES), "test", "STS Benchmark (Cer et al. 2017)"),
    "sickr": STSTask("sickr", "SICKRelatedness", tuple(SICK_FILES), "test", "SICK relatedness scores 1-5"),
}
CORPORA = {"wiki1m": ("wiki1m_for_simcse.txt", "wiki1m_for_simcse.*.txt")}
# Corpora made from other data sets, STS-B's train, dev and test sentences without their scores (the unlabelled
# training text of BERT-flow and SG/SG-OPT, sg-opt.txt footnote 7): `stsb-rows` has both sentences of every row in
# file order, repeats kept (the concatenation SG-BERT's training.py reads), `stsb-sentences` each sentence once;
# both from SentEval's lower-cased, tokenised copy. `stsb-raw-rows` is `stsb-rows` from the original release under
# sts_raw/ (cased, untokenised: the text SG-BERT's stsbenchmark.tsv.gz holds).
DERIVED_CORPORA = ("stsb-rows", "stsb-sentences", "stsb-raw-rows")
RAW_STSB = Path("sts_raw") / "STSBenchmark"


def raw_stsb_pairs(split: str, data_dir: DataDir = None) -> tuple[Path, list[tuple[str, str, float]]]:
    """The file of one split of the original STS-B release and its rows: (sentence1, sentence2, score 0-5) from
    fields 6, 7 and 5 of each line, the source columns some rows carry after them left out."""
    path = data_root(data_dir) / RAW_STSB / STSB_FILES[split]
    found = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) < 7 or not fields[5].strip() or not fields[6].strip():
            raise DataFormatError(path, number, f"expected genre, file, year, id, score, sentence1, sentence2 "
                                                f"(tab-separated); got {len(fields)} field(s)")
        try:
            score = float(fields[4])
        except ValueError:
            raise DataFormatError(path, number, f"field 5 (score) must be a number, got {fields[4]!r}") from None
        found.append((fields[5].strip(), fields[6].strip(), score))
    return path, found


def _raw_stsb_rows(data_dir: DataDir) -> list[str]:
    """Both sentences of every row of the original STS-B release (train, dev, test)."""
    return [sentence for split in STSB_FILES for row in raw_stsb_pairs(split, data_dir)[1] for sentence in row[:2]]


def sts_task(key: str) -> STSTask:
    """The registry entry for ``key`` (``sts12`` ... ``sts16``, ``stsb``, ``sickr``)."""
    try:
        return STS_TASKS[key.lower()]
    except KeyError:
        raise ConfigError(f"Unknown STS task {key!r}{did_you_mean(key, STS_TASKS)}; known: {', '.join(STS_TASKS)}"
                          ) from None


def load_sts(key: str, split: str | None = None, data_dir: DataDir = None) -> list[STSPairs]:
    """The pairs of one STS task split (its evaluation split by default), one entry per subset."""
    task = sts_task(key)
    split = split or task.eval_split
    if split not in task.splits:
        raise ConfigError(f"{task.name} has no split {split!r}; it has {', '.join(task.splits)}")
    return [_scorable(pairs) for pairs in _read_task(task, split, senteval_dir(data_dir))]


def _read_task(task: STSTask, split: str, root: Path) -> list[STSPairs]:
    if task.key in STS_YEARS:
        name, folder, subsets = STS_YEARS[task.key]
        base = root / "STS" / folder
        if not (base / f"STS.input.{subsets[0]}.txt").is_file() and (base / "STS.input.all.txt").is_file():
            subsets = ("all",)  # a hub copy (``cselab data download``) has no subset labels
        return [read_sts_subset(name, subset, base / f"STS.input.{subset}.txt", base / f"STS.gs.{subset}.txt")
                for subset in subsets]
    if task.key == "stsb":
        return [read_stsb_split(root / "STS" / "STSBenchmark" / STSB_FILES[split], split)]
    return [read_sick_split(root / "SICK" / SICK_FILES[split], split)]


def _scorable(pairs: STSPairs) -> STSPairs:
    """Pairs a correlation can be computed on: at least two (an empty file would score "n/a" without a word)."""
    if len(pairs) < MIN_PAIRS:
        raise DataError(f"{', '.join(map(str, pairs.files))}: {len(pairs)} scored pair(s) in {pairs.task} "
                        f"{pairs.subset}; a correlation needs at least {MIN_PAIRS}")
    return pairs


def corpus_path(name_or_path: str | os.PathLike, data_dir: DataDir = None) -> Path:
    """A registered corpus name (``wiki1m``) resolved under the data root, or a file path."""
    if str(name_or_path) not in CORPORA:
        path = Path(name_or_path)
        if not path.is_file():
            raise DataNotFoundError(f"{path} is neither a file nor a known corpus ({', '.join(CORPORA)})")
        return path
    folder = corpus_dir(data_dir)
    full, sample = CORPORA[str(name_or_path)]
    if (folder / full).is_file():
        return folder / full
    found = sorted(folder.glob(sample))
    if not found:
        raise DataNotFoundError(f"No {full} (nor a sample {sample}) in {folder}")
    return found[0]


def load_corpus(name_or_path: str | os.PathLike, data_dir: DataDir = None) -> list[str]:
    """The sentences of a corpus: a file's non-blank lines, or a derived corpus (``stsb-rows``,
    ``stsb-sentences``, ``stsb-raw-rows``)."""
    if str(name_or_path) == "stsb-raw-rows":
        return _raw_stsb_rows(data_dir)
    if str(name_or_path) in DERIVED_CORPORA:
        pairs = [p for split in STSB_FILES for p in load_sts("stsb", split, data_dir)]
        if str(name_or_path) == "stsb-rows":
            return [s for p in pairs for row in zip(p.sentences1, p.sentences2) for s in row]
        return list(dict.fromkeys(s for p in pairs for s in (*p.sentences1, *p.sentences2)))
    return read_corpus(corpus_path(name_or_path, data_dir))


def is_corpus(name_or_path: str | os.PathLike) -> bool:
    """Whether ``name_or_path`` names a corpus (registered, derived) or is a plain file."""
    return str(name_or_path) in CORPORA or str(name_or_path) in DERIVED_CORPORA or Path(name_or_path).is_file()


def load_cannot(data_dir: DataDir = None) -> list[NegationPairs]:
    """The CANNOT negation sets under ``contrast/cannot/``, one per source (numbered parts joined)."""
    folder = data_root(data_dir) / "contrast" / "cannot"
    files = sorted(folder.glob("*.tsv"))
    if not files:
        raise DataNotFoundError(f"No CANNOT files (*.tsv with 'sentence<TAB>negated') in {folder}")
    groups: dict[str, list[NegationPairs]] = {}
    for path in files:
        source = re.sub(r"_\d+$", "", path.stem)
        groups.setdefault(source, []).append(read_negation_pairs(path, source))
    return [NegationPairs(name, [s for p in parts for s in p.sentences], [n for p in parts for n in p.negated],
                          tuple(f for p in parts for f in p.files)) for name, parts in groups.items()]
