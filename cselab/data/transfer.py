"""SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC) from the SentEval layout.

Files are read as SentEval reads them (TREC as latin-1: ``train_5500.label`` holds one latin-1 byte),
tokens re-joined by single spaces, and labelled as SentEval labels them (MR, CR, MPQA: pos 1, neg 0;
SUBJ: objective 1, subjective 0; TREC: ABBR DESC ENTY HUM LOC NUM = 0..5; MRPC: its Quality column).
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

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
# the binary tasks: (folder, file labelled 1, file labelled 0)
BINARY = {"MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"), "CR": ("CR", "custrev.pos", "custrev.neg"),
          "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"), "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg")}
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
SST2_FILES = {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"}
MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


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


def _sst2(root: Path, limit: int | None) -> dict[str, LabelledText]:
    splits = {}
    for split, name in SST2_FILES.items():
        path = root / "SST" / "binary" / name
        texts, labels = [], []
        for number, line in enumerate(_lines(path, limit), start=1):
            sentence, _, label = line.strip().rpartition("\t")
            if label not in ("0", "1"):
                raise DataFormatError(path, number, f"label {label!r} is not 0 or 1 (expected sentence<TAB>label)")
            texts.append(_tokens(sentence))
            labels.append(int(label))
        splits[split] = LabelledText("SST2", split, texts, np.array(labels), files=(path,))
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
    """The splits of a transfer task: ``all`` (MR, CR, SUBJ, MPQA), ``train``/``dev``/``test`` (SST2),
    ``train``/``test`` (TREC, MRPC); ``limit`` keeps the first N rows of each file (quick checks)."""
    key = task.upper().replace("-", "")
    if key not in TRANSFER_TASKS:
        raise ConfigError(f"Unknown transfer task {task!r}{did_you_mean(key, TRANSFER_TASKS)}; known: "
                          f"{', '.join(TRANSFER_TASKS)}")
    root = senteval_dir(data_dir)
    if key in BINARY:
        return _binary(key, root, limit)
    return {"SST2": _sst2, "TREC": _trec, "MRPC": _mrpc}[key](root, limit)
