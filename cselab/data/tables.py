"""Tables of training rows: pair and triplet files (CSV, TSV, JSONL, parquet), Hugging Face datasets, and the
derived tables of the data root (``sick-entailment``, ``cannot``, ``stsb-train``).

A table is columns of strings (and numbers, where a JSONL or parquet file holds them). Its columns are mapped onto
the columns a method reads (``text``, ``positive``, ``hard_negative``, ``negation``, a scored pair's ``text_pair``
and ``score`` ...) by the method's ``data_columns``, else by the layout the file has: cselab's own names, SimCSE's
NLI file (``sent0,sent1,hard_neg``), sentence-transformers' triplets (``anchor, positive, negative``) or scored pairs
(``sentence1, sentence2, score``), or AnglE's format A (``text1, text2, label``). A row whose ``text`` is empty is
refused (FILE:LINE); an empty field of any other column leaves that row without it (as a cache row without a
paraphrase), and the count is recorded.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from cselab.checksum import sha256
from cselab.data.errors import DataFormatError, DataNotFoundError
from cselab.data.readers import json_object, read_lines
from cselab.data.named import DataDir, load_cannot, raw_stsb_pairs
from cselab.data.root import senteval_dir
from cselab.errors import ConfigError, DataError
from cselab.files import clipped, read_text

SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
HUB_PREFIX = "hf:"
#: Known layouts: the file's column -> cselab's.
LAYOUTS = {"SimCSE's NLI file": {"sent0": "text", "sent1": "positive", "hard_neg": "hard_negative"},
           "sentence-transformers' triplets": {"anchor": "text", "positive": "positive", "negative": "hard_negative"},
           "sentence-transformers' scored pairs": {"sentence1": "text", "sentence2": "text_pair", "score": "score"},
           "AnglE's format A": {"text1": "text", "text2": "text_pair", "label": "score"}}
DERIVED = {"sick-entailment": "SICK's training pairs labelled ENTAILMENT (text, positive), with the sentence_B of a "
                              "CONTRADICTION pair of the same sentence_A as hard_negative where there is one",
           "cannot": "the CANNOT negation pairs under contrast/cannot/ (text, negation)",
           "stsb-train": "STS-B's training pairs as released (cased, untokenised; sts_raw/) with their gold scores 0-5 "
                         "(text, text_pair, score): scored pairs for CoSENT and AnglE"}


@dataclass
class Table:
    """Columns of strings or numbers (``""``: no value), where they came from (``files`` and their sha256, or a
    dataset's fingerprint) and, per row, the line it was read from."""

    name: str
    columns: dict[str, list[str | float]]
    files: tuple[Path, ...] = ()
    fingerprint: str | None = None
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))


def is_table(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` names a table: a file with a table's suffix, ``hf:NAME`` or a derived table."""
    spec = str(spec)
    return spec in DERIVED or spec.startswith(HUB_PREFIX) or Path(spec).suffix.lower() in SUFFIXES


def _text(value, path: Path, line: int, column: str) -> str | float:
    """A field as a table holds it: a string stripped, a number as it is (a score; :func:`training_columns` refuses
    one where text is read), ``""`` for none."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        raise DataFormatError(path, line, f"field '{column}' must be a string or a number, not {type(value).__name__}")
    return value.strip()


def _read_delimited(path: Path, delimiter: str) -> tuple[dict[str, list[str | float]], list[int]]:
    reader = csv.reader(io.StringIO(read_text(path, DataError), newline=""), delimiter=delimiter)
    rows = _csv_rows(reader, path)
    header = next(rows, None)
    if not header:
        raise DataFormatError(path, 1, "empty file: expected a header line naming the columns")
    names = [name.strip() for name in header]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataFormatError(path, 1, "the header repeats the column name(s) " + ", ".join(map(repr, repeated))
                              + "; every column needs its own name")
    columns: dict[str, list[str | float]] = {name: [] for name in names}
    lines = []
    for row in rows:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise DataFormatError(path, reader.line_num, f"{len(row)} fields, the header has {len(header)}")
        for name, cell in zip(columns, row):
            columns[name].append(cell.strip())
        lines.append(reader.line_num)
    return columns, lines


def _csv_rows(reader, path: Path):
    """The reader's rows; what the csv module refuses (a field over its size limit, a NUL byte) is a DataFormatError
    naming the line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            kind = "CSV" if reader.dialect.delimiter == "," else "TSV"
            raise DataFormatError(path, reader.line_num, f"not a readable {kind} row ({err})") from None


def _read_jsonl(path: Path) -> tuple[dict[str, list[str | float]], list[int]]:
    records, lines = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        records.append(json_object(path, number, line))
        lines.append(number)
    names = list(dict.fromkeys(key for record in records for key in record))
    return {name: [_text(r.get(name), path, n, name) for r, n in zip(records, lines)] for name in names}, lines


def _read_parquet(path: Path) -> tuple[dict[str, list[str | float]], list[int]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path).to_pydict()
    except Exception as err:  # pyarrow's errors of a file that is not parquet, or a damaged one
        raise DataError(f"{path}: not a readable parquet file ({type(err).__name__}: {clipped(err, 160)})") from None
    lines = list(range(1, len(next(iter(table.values()), [])) + 1))  # row numbers
    return {name: [_text(v, path, n, name) for v, n in zip(values, lines)] for name, values in table.items()}, lines


def read_table(path: str | os.PathLike) -> Table:
    """A CSV, TSV, JSONL or parquet file as a :class:`Table` (a parquet row's "line" is its row number)."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"no data file at {path}")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        columns, lines = _read_delimited(path, "," if suffix == ".csv" else "\t")
    elif suffix == ".jsonl":
        columns, lines = _read_jsonl(path)
    else:
        columns, lines = _read_parquet(path)
    if not lines:
        raise DataFormatError(path, 1, "no rows")
    return Table(str(path), columns, (path,), sha256(path), lines)


def _hub_table(spec: str) -> Table:
    """``hf:NAME`` or ``hf:NAME:SPLIT`` (default ``train``): a dataset through ``datasets.load_dataset`` (a local
    folder of data files too)."""
    import datasets

    name, _, split = spec[len(HUB_PREFIX):].partition(":")
    try:
        rows = datasets.load_dataset(name, split=split or "train")
    except Exception as err:  # unreachable hub, unknown name, unreadable files
        raise DataNotFoundError(f"--data {spec}: datasets could not load it ({type(err).__name__}: {err})") from None
    columns = {column: [_text(v, Path(name), i + 1, column) for i, v in enumerate(rows[column])]
               for column in rows.column_names}
    return Table(spec, columns, (), rows._fingerprint, list(range(1, len(rows) + 1)))


def _sick_entailment(data_dir: DataDir) -> Table:
    path = senteval_dir(data_dir) / "SICK" / "SICK_train.txt"
    source = _read_delimited_checked(path)
    contradictions: dict[str | float, str | float] = {}
    for a, b, label in zip(source["sentence_A"], source["sentence_B"], source["entailment_judgment"]):
        if label == "CONTRADICTION":
            contradictions.setdefault(a, b)
    pairs = [(a, b) for a, b, label in zip(source["sentence_A"], source["sentence_B"], source["entailment_judgment"])
             if label == "ENTAILMENT"]
    return Table("sick-entailment", {"text": [a for a, _ in pairs], "positive": [b for _, b in pairs],
                                     "hard_negative": [contradictions.get(a, "") for a, _ in pairs]},
                 (path,), sha256(path))


def _read_delimited_checked(path: Path) -> dict[str, list[str | float]]:
    if not path.is_file():
        raise DataNotFoundError(f"Missing data file {path}")
    columns, _ = _read_delimited(path, "\t")
    missing = {"sentence_A", "sentence_B", "entailment_judgment"} - set(columns)
    if missing:
        raise DataFormatError(path, 1, f"no column {', '.join(sorted(missing))} in the header")
    return columns


def _cannot(data_dir: DataDir) -> Table:
    sets = load_cannot(data_dir)
    files = tuple(path for s in sets for path in s.files)
    digest = hashlib.sha256("".join(f"{path.name} {sha256(path)}\n" for path in files).encode()).hexdigest()
    return Table("cannot", {"text": [t for s in sets for t in s.sentences],
                            "negation": [t for s in sets for t in s.negated]}, files, digest)


def _stsb_train(data_dir: DataDir) -> Table:
    path, rows = raw_stsb_pairs("train", data_dir)
    return Table("stsb-train", {"text": [a for a, _, _ in rows], "text_pair": [b for _, b, _ in rows],
                                "score": [score for _, _, score in rows]}, (path,), sha256(path),
                 list(range(1, len(rows) + 1)))


def load_table(spec: str | os.PathLike, data_dir: DataDir = None) -> Table:
    """The table ``spec`` names: a file, ``hf:NAME[:SPLIT]`` or a derived table (:data:`DERIVED`)."""
    spec = str(spec)
    if spec == "sick-entailment":
        return _sick_entailment(data_dir)
    if spec == "cannot":
        return _cannot(data_dir)
    if spec == "stsb-train":
        return _stsb_train(data_dir)
    if spec.startswith(HUB_PREFIX):
        return _hub_table(spec)
    return read_table(spec)


def column_map(table: Table, wanted: list[str], given: dict[str, str] | None) -> dict[str, str]:
    """cselab's column -> the table's, for each column in ``wanted``: ``given`` (``data_columns``), else the
    table's own name, else a known layout's; a column found nowhere is a ConfigError naming the table's columns."""
    found = dict(given or {})
    for column, source in found.items():
        if source not in table.columns:
            raise ConfigError(f"data_columns.{column}: {table.name} has no column {source!r}; its columns: "
                              f"{', '.join(table.columns)}")
    layouts = [{ours: theirs for theirs, ours in layout.items() if theirs in table.columns}
               for layout in LAYOUTS.values()]
    for column in wanted:
        if column in found:
            continue
        if column in table.columns:
            found[column] = column
            continue
        match = next((layout[column] for layout in layouts if column in layout), None)
        if match is None:
            raise ConfigError(f"{table.name}: no column for {column!r}, which the method's views read; its columns: "
                              f"{', '.join(table.columns)} (map one with --set data_columns.{column}=NAME)")
        found[column] = match
    return found


def training_columns(table: Table, mapping: dict[str, str], numbers: Collection[str] = frozenset()
                     ) -> tuple[dict[str, list], dict[str, int]]:
    """The table's columns under cselab's names, and per column the rows left without it (an empty field). Each
    column in ``numbers`` (a scored pair's ``score``) holds finite numbers (None for an empty field), every other
    one strings. An empty ``text``, a number where text is read, or a value of ``numbers`` that is no finite number is
    refused with its line."""
    columns = {}
    for ours, theirs in mapping.items():
        columns[ours] = [_typed(value, ours in numbers, table, i, theirs) for i, value in
                         enumerate(table.columns[theirs])]
    if "text" in columns:
        for i, value in enumerate(columns["text"]):
            if not value:
                raise DataFormatError(Path(table.name), _line(table, i), f"empty {mapping['text']!r} (the text "
                                                                         "column): every row needs one")
    return columns, {ours: sum(1 for v in values if v is None or v == "") for ours, values in columns.items()
                     if ours != "text"}


def _line(table: Table, row: int) -> int:
    return table.lines[row] if table.lines else row + 1


def _typed(value: str | float, number: bool, table: Table, row: int, column: str) -> str | float | None:
    """A field of a text column (a string), or of a numeric one (a finite float, None when empty)."""
    if not number:
        if isinstance(value, float):
            raise DataFormatError(Path(table.name), _line(table, row), f"field '{column}' must be a string, not a "
                                                                       f"number ({value:g})")
        return value
    if value == "":
        return None
    try:
        parsed = float(value)
    except ValueError:
        parsed = math.nan
    if not math.isfinite(parsed):
        raise DataFormatError(Path(table.name), _line(table, row), f"field '{column}' must be a finite number, "
                                                                   f"got {clipped(str(value), 40)!r}")
    return parsed
