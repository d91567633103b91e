"""Readers for the files of the SentEval layout and for plain-text corpora.

Every reader checks each line and raises :class:`DataFormatError` naming the file, the
line number (1-based) and what was wrong. Lines are split on ``\\n`` only; a trailing
``\\r`` (CRLF files) and a leading UTF-8 byte-order mark are removed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cselab.data.errors import DataFormatError, DataNotFoundError
from cselab.errors import DataError
from cselab.files import parse_json


@dataclass(frozen=True)
class STSPairs:
    """Scored sentence pairs of one STS subset (or split), in file order."""

    task: str
    subset: str
    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray
    files: tuple[Path, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.scores)


def read_lines(path: str | Path, encoding: str = "utf-8") -> list[str]:
    """The lines of a text file, without line endings; no final empty line."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"Missing data file {path}")
    try:
        raw = path.read_bytes()
    except OSError as err:  # permissions, a device error
        raise DataFormatError(path, 1, f"cannot be read ({err.strerror or err})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataFormatError(path, line, f"byte {raw[err.start]:#04x} is not valid {encoding}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def json_object(path: Path, number: int, line: str) -> dict:
    """Line ``number`` of a JSON Lines file, which must be one JSON object (read through :func:`cselab.files.
    parse_json`); anything else is a :class:`DataFormatError` naming the file and line."""
    try:
        record = parse_json(line, f"{path}:{number}", DataError)
    except json.JSONDecodeError as err:
        raise DataFormatError(path, number, f"not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(record, dict):
        raise DataFormatError(path, number, "expected a JSON object")
    return record


def _score(path: Path, line: int, text: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataFormatError(path, line, f"score {text!r} is not a number") from None
    if not low <= value <= high:
        raise DataFormatError(path, line, f"score {value} is outside [{low}, {high}]")
    return value


def _fields(path: Path, line: int, text: str, needed: int, what: str, exact: bool = False) -> list[str]:
    parts = text.split("\t")
    if len(parts) < needed or (exact and len(parts) != needed):
        raise DataFormatError(path, line, f"expected {needed} tab-separated fields ({what}), found {len(parts)}")
    return parts


def read_sts_subset(task: str, subset: str, input_path: Path, gold_path: Path) -> STSPairs:
    """An ``STS.input.X.txt`` / ``STS.gs.X.txt`` pair; pairs with a blank gold line are unscored and dropped."""
    inputs, golds = read_lines(input_path), read_lines(gold_path)
    if len(inputs) != len(golds):
        raise DataFormatError(gold_path, min(len(inputs), len(golds)) + 1,
                              f"{len(golds)} gold lines but {len(inputs)} lines in {input_path.name}")
    s1, s2, scores = [], [], []
    for number, (pair, gold) in enumerate(zip(inputs, golds), start=1):
        if not gold.strip():
            continue
        scores.append(_score(gold_path, number, gold.strip(), 0.0, 5.0))
        first, second = _fields(input_path, number, pair, 2, "sentence1, sentence2", exact=True)
        s1.append(first)
        s2.append(second)
    return STSPairs(task, subset, s1, s2, np.asarray(scores), (input_path, gold_path))


def read_stsb_split(path: Path, split: str) -> STSPairs:
    """SentEval's STS Benchmark csv: ``genre, file, year, id, score, sentence1, sentence2`` per line."""
    s1, s2, scores = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        parts = _fields(path, number, line, 7, "genre, file, year, id, score, sentence1, sentence2")
        scores.append(_score(path, number, parts[4], 0.0, 5.0))
        s1.append(parts[5])
        s2.append(parts[6])
    return STSPairs("STSBenchmark", split, s1, s2, np.asarray(scores), (path,))


def read_sick_split(path: Path, split: str) -> STSPairs:
    """A SICK file with header ``pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment``."""
    lines = read_lines(path)
    if not lines or not lines[0].startswith("pair_ID"):
        raise DataFormatError(path, 1, "expected the header line starting with 'pair_ID'")
    s1, s2, scores = [], [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = _fields(path, number, line.strip(), 4, "pair_ID, sentence_A, sentence_B, relatedness_score")
        scores.append(_score(path, number, parts[3], 1.0, 5.0))
        s1.append(parts[1])
        s2.append(parts[2])
    return STSPairs("SICKRelatedness", split, s1, s2, np.asarray(scores), (path,))


@dataclass(frozen=True)
class NegationPairs:
    """Sentences and their minimally negated versions (e.g. the CANNOT sets)."""

    name: str
    sentences: list[str]
    negated: list[str]
    files: tuple[Path, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.sentences)


def read_negation_pairs(path: Path, name: str | None = None) -> NegationPairs:
    """A TSV with the header ``sentence<TAB>negated`` and one pair per line."""
    lines = read_lines(path)
    if not lines or lines[0].split("\t")[:2] != ["sentence", "negated"]:
        raise DataFormatError(path, 1, "expected the header line 'sentence<TAB>negated'")
    sentences, negated = [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        first, second = _fields(path, number, line, 2, "sentence, negated")[:2]
        if not first.strip() or not second.strip():
            raise DataFormatError(path, number, "empty sentence or negation")
        sentences.append(first.strip())
        negated.append(second.strip())
    return NegationPairs(name or path.stem, sentences, negated, (path,))


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters a sentence never holds (tab aside)


def control_character(text: str) -> str | None:
    """The first control character of ``text`` as ``U+XXXX`` (NUL bytes mark a UTF-16 file read as UTF-8), or
    None."""
    found = CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def read_corpus(path: str | Path, encoding: str = "utf-8") -> list[str]:
    """A plain-text corpus, one sentence per line; blank lines are skipped, a line holding a control character
    stops the read naming it."""
    sentences = []
    for number, line in enumerate(read_lines(path, encoding), start=1):
        if (control := control_character(line)) is not None:
            raise DataFormatError(path, number, f"holds the control character {control} (corpora are UTF-8 text, "
                                                "one sentence a line; a UTF-16 file?)")
        if line.strip():
            sentences.append(line.strip())
    return sentences
