"""SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC; SST-5 and SICK-E) from the SentEval layout.

Files are read as SentEval reads them (TREC as latin-1: ``train_5500.label`` holds one latin-1 byte),
tokens re-joined by single spaces, and labelled as SentEval labels them (MR, CR, MPQA: pos 1, neg 0;
SUBJ: objective 1, subjective 0; TREC: ABBR DESC ENTY HUM LOC NUM = 0..5; MRPC: its Quality column; SST-5: the
label before the sentence, 0..4; SICK-E: CONTRADICTION NEUTRAL ENTAILMENT = 0..2, SentEval's ``sick.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cselab.data.errors import DataFormatError
from cselab.data.readers import read_lines
from cselab.data.root import senteval_dir
from cselab.errors import ConfigError, did_you_mean

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")  # SimCSE's seven: the default, its average
MORE_TRANSFER_TASKS = ("SST5", "SICKE")  # SentEval's fine-grained SST and SICK entailment, scored by name
ALL_TRANSFER_TASKS = (*TRANSFER_TASKS, *MORE_TRANSFER_TASKS)
# the binary tasks: (folder, file labelled 1, file labelled 0)
BINARY = {"MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"), "CR": ("CR", "custrev.pos", "custrev.neg"),
          "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"), "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg")}
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
SST2_FILES = {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"}
MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}
SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
SICK_CLASSES = ("CONTRADICTION", "NEUTRAL", "ENTAILMENT")


@dataclass(frozen=True)
class LabelledText:
    """One split of a classification task: sentences (or sentence pairs, ``texts2``) and integer labels."""

    task: str
    split: str
    texts: list[str]
    labels: np.ndarray
    texts2: list[str] | None = None
    files: tuple[Path, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.labels)


def _tokens(text: str) -> str:
    """Tokens joined by single spaces; a blank line stays, as an empty sentence (CR has one, SentEval keeps it)."""
    return " ".join(text.split())


def _lines(path: Path, limit: int | None, encoding: str = "utf-8", header: int = 0) -> list[str]:
    lines = read_lines(path, encoding)
    return lines if limit is None else lines[: header + limit]


def _binary(task: str, root: Path, limit: int | None) -> dict[str, LabelledText]:
    folder, positive, negative = BINARY[task]
    texts, labels = [], []
    for name, label in ((positive, 1), (negative, 0)):
        path = root / folder / name
        for line in _lines(path, limit):
            texts.append(_tokens(line))
            labels.append(label)
    files = (root / folder / positive, root / folder / negative)
    return {"all": LabelledText(task, "all", texts, np.array(labels), files=files)}


def _sst(task: str, root: Path, limit: int | None) -> dict[str, LabelledText]:
    """SST-2 (``SST/binary``: sentence<TAB>label, 0 or 1) or SST-5 (``SST/fine``: label<SPACE>sentence, 0 to 4), as
    SentEval's ``sst.py`` splits their lines."""
    binary = task == "SST2"
    splits = {}
    for split, name in SST2_FILES.items():
        path = root / "SST" / ("binary" if binary else "fine") / name
        texts, labels = [], []
        for number, line in enumerate(_lines(path, limit), start=1):
            sentence, _, label = line.strip().rpartition("\t")
            if not binary:
                label, _, sentence = line.strip().partition(" ")
            if label not in (("0", "1") if binary else ("0", "1", "2", "3", "4")):
                raise DataFormatError(path, number, f"label {label!r} is not " + (
                    "0 or 1 (expected sentence<TAB>label)" if binary else "0 to 4 (expected label<SPACE>sentence)"))
            texts.append(_tokens(sentence))
            labels.append(int(label))
        splits[split] = LabelledText(task, split, texts, np.array(labels), files=(path,))
    return splits


def _sicke(root: Path, limit: int | None) -> dict[str, LabelledText]:
    splits = {}
    for split, name in SICK_FILES.items():
        path = root / "SICK" / name
        lines = _lines(path, limit, header=1)
        if not lines or not lines[0].startswith("pair_ID"):
            raise DataFormatError(path, 1, "expected the header line 'pair_ID<TAB>sentence_A<TAB>sentence_B<TAB>"
                                           "relatedness_score<TAB>entailment_judgment'")
        first, second, labels = [], [], []
        for number, line in enumerate(lines[1:], start=2):
            parts = line.strip().split("\t")  # as sick.py: the test file's CRLF goes too
            if len(parts) < 5 or parts[4] not in SICK_CLASSES:
                raise DataFormatError(path, number, f"expected pair_ID, sentence_A, sentence_B, relatedness_score and "
                                                    f"entailment_judgment (one of {', '.join(SICK_CLASSES)})")
            first.append(_tokens(parts[1]))
            second.append(_tokens(parts[2]))
            labels.append(SICK_CLASSES.index(parts[4]))
        splits[split] = LabelledText("SICKE", split, first, np.array(labels), second, (path,))
    return splits


def _trec(root: Path, limit: int | None) -> dict[str, LabelledText]:
    splits = {}
    for split, name in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = root / "TREC" / name
        texts, labels = [], []
        for number, line in enumerate(_lines(path, limit, "latin-1"), start=1):
            coarse, _, rest = line.strip().partition(":")
            if coarse not in TREC_CLASSES or " " not in rest:
                raise DataFormatError(path, number, f"expected 'CLASS:fine question' with CLASS one of "
                                                    f"{', '.join(TREC_CLASSES)}, found {line[:40]!r}")
            texts.append(_tokens(rest.split(" ", 1)[1]))
            labels.append(TREC_CLASSES.index(coarse))
        splits[split] = LabelledText("TREC", split, texts, np.array(labels), files=(path,))
    return splits


def _mrpc(root: Path, limit: int | None) -> dict[str, LabelledText]:
    splits = {}
    for split, name in MRPC_FILES.items():
        path = root / "MRPC" / name
        lines = _lines(path, limit, header=1)
        if not lines or not lines[0].startswith("Quality"):
            raise DataFormatError(path, 1, "expected the header line 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String...'")
        first, second, labels = [], [], []
        for number, line in enumerate(lines[1:], start=2):
            parts = line.strip().split("\t")
            if len(parts) < 5 or parts[0] not in ("0", "1"):
                raise DataFormatError(path, number, "expected Quality (0/1), #1 ID, #2 ID, #1 String, #2 String")
            first.append(_tokens(parts[3]))
            second.append(_tokens(parts[4]))
            labels.append(int(parts[0]))
        splits[split] = LabelledText("MRPC", split, first, np.array(labels), second, (path,))
    return splits


def load_transfer(task: str, data_dir: str | os.PathLike | None = None, limit: int | None = None
                  ) -> dict[str, LabelledText]:
    """The splits of a transfer task: ``all`` (MR, CR, SUBJ, MPQA), ``train``/``dev``/``test`` (SST2, SST5, SICKE),
    ``train``/``test`` (TREC, MRPC); ``limit`` keeps the first N rows of each file (quick checks)."""
    key = task.upper().replace("-", "")
    if key not in ALL_TRANSFER_TASKS:
        raise ConfigError(f"Unknown transfer task {task!r}{did_you_mean(key, ALL_TRANSFER_TASKS)}; known: "
                          f"{', '.join(ALL_TRANSFER_TASKS)}")
    root = senteval_dir(data_dir)
    if key in BINARY:
        return _binary(key, root, limit)
    if key in ("SST2", "SST5"):
        return _sst(key, root, limit)
    return {"TREC": _trec, "MRPC": _mrpc, "SICKE": _sicke}[key](root, limit)
