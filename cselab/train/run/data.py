"""What a run trains on: an augment cache, a table of pairs or triplets, or a plain corpus whose sentences become
the ``text`` column.

``--data`` (or a method's ``data`` key) is one of: an augment cache folder; a root holding caches (the
newest finished one is used); a table (:mod:`cselab.data.tables`: a CSV, TSV, JSONL or parquet file, ``hf:NAME``,
``sick-entailment``, ``cannot``), its columns mapped onto the views' by ``data_columns`` or its layout; a corpus name
(``wiki1m``, ``stsb-sentences``) or a one-sentence-per-line file. A plain corpus has only ``text``: methods whose
views read ``paraphrase`` or ``negation`` need a cache or a table that has them. Corpora and tables are held as
:class:`ColumnRows`, without the ``datasets`` package.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from cselab.data import is_corpus, load_corpus
from cselab.checksum import sha256
from cselab.data.augmented import MANIFEST, finished_cache, load_cache, read_manifest
from cselab.data.tables import Table, column_map, is_table, load_table, training_columns
from cselab.errors import ConfigError
from cselab.train.config.method import MethodConfig
from cselab.train.config.schema import value_columns

logger = logging.getLogger(__name__)

DEFAULT_DATA = "cache/augment"


class ColumnRows:
    """Columns of values as rows: ``rows[[i, j]]`` is ``{column: [...]}``, as a ``datasets.Dataset`` gives."""

    def __init__(self, columns: dict[str, list]):
        self.columns = columns
        self.column_names = list(columns)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.columns[key]
        return {name: [values[i] for i in key] for name, values in self.columns.items()}


def _columns(method: MethodConfig) -> list[str]:
    """The data columns the method reads: its forward views' and the numeric ones of its losses (a score)."""
    return sorted({view.column for view in method.views.values() if view.column} | set(value_columns(method.losses)))


def _kind(method: MethodConfig, data: str | os.PathLike | None) -> tuple[str, str]:
    """What ``data`` names (``data``, else the method's ``data``, else ``cache/augment``) and its kind: ``table``,
    ``corpus`` (refused for a method that reads more than the text) or ``cache``."""
    spec = str(data if data is not None else method.data or DEFAULT_DATA)
    if is_table(spec) and not Path(spec).is_dir():
        return spec, "table"
    if not (is_corpus(spec) and not Path(spec).is_dir()):
        return spec, "cache"
    missing = [column for column in _columns(method) if column != "text"]
    if missing:
        raise ConfigError(f"{spec} is a plain corpus (one sentence a line): it has no {', '.join(missing)} "
                          f"column, which method {method.name} reads; build an augment cache with "
                          f"`cselab augment --corpus {spec}` and train on it")
    return spec, "corpus"


def _table_rows(method: MethodConfig, table: Table) -> tuple[ColumnRows, dict[str, Any]]:
    """The table's columns under the views' names, and its description (where from, the column map, the rows left
    without a column)."""
    mapping = column_map(table, _columns(method), dict(method.data_columns or {}))
    columns, without = training_columns(table, mapping, numbers=set(value_columns(method.losses)))
    if any(without.values()):
        logger.info("%s: %s", table.name, ", ".join(f"{n} row(s) without {c}" for c, n in without.items() if n))
    source = {"kind": "table", "name": table.name, "rows": len(table), "sha256": table.fingerprint,
              "columns": mapping, "rows_without": without}
    return ColumnRows(columns), source


def _corpus_source(spec: str, sentences: list[str]) -> dict[str, Any]:
    digest = hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()
    return {"kind": "corpus", "name": spec, "rows": len(sentences), "sha256": digest}


def _cache_source(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "augment-cache", "path": str(folder), "key": manifest.get("key"),
            "manifest_sha256": sha256(folder / MANIFEST), "backtranslation": manifest.get("models", {})}


def data_source(method: MethodConfig, data: str | os.PathLike | None = None,
                data_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The description of what :func:`training_rows` would load, without loading a cache's rows (what a run's
    identity records)."""
    spec, kind = _kind(method, data)
    if kind == "table":
        return _table_rows(method, load_table(spec, data_dir))[1]
    if kind == "corpus":
        return _corpus_source(spec, load_corpus(spec, data_dir))
    folder = finished_cache(spec)
    return _cache_source(folder, read_manifest(folder))


def training_rows(method: MethodConfig, data: str | os.PathLike | None = None,
                  data_dir: str | os.PathLike | None = None):
    """The rows ``method`` trains on (``data``, else the method's ``data``, else ``cache/augment``): a cache's
    ``datasets.Dataset`` or a table's or corpus's :class:`ColumnRows`, and a description of where they came from
    (recorded with the run). A cache or table without a column the method reads, or with that column empty in every
    row, is refused."""
    spec, kind = _kind(method, data)
    if kind == "table":
        rows, source = _table_rows(method, load_table(spec, data_dir))
        _check_columns(rows, method, spec, "the table")
        return rows, source
    if kind == "corpus":
        sentences = load_corpus(spec, data_dir)
        return ColumnRows({"text": sentences}), _corpus_source(spec, sentences)
    folder = finished_cache(spec)
    manifest = read_manifest(folder)
    warn_if_paraphrases_differ(method, manifest, folder)
    rows = load_cache(folder)
    backend = manifest.get("config", {}).get("backend")
    _check_columns(rows, method, folder, "the cache", f" (built with backend {backend!r}?)")
    return rows, _cache_source(folder, manifest)


def _check_columns(rows, method: MethodConfig, where, what: str, hint: str = "") -> None:
    """Refuse rows without a column the method reads, or with that column empty in every row."""
    for column in _columns(method):
        if column not in rows.column_names:
            raise ConfigError(f"{where}: {what} has no column {column!r}, which method {method.name} "
                              f"reads; its columns: {', '.join(rows.column_names)}")
        if all(value is None or value == "" for value in rows[column]):
            raise ConfigError(f"{where}: no row of {what} has a {column}{hint}, which method {method.name} reads")


def warn_if_paraphrases_differ(method: MethodConfig, manifest: dict[str, Any], folder: Path) -> bool:
    """Warn (one line) when ``method`` reads paraphrases that were not made by the paper's WMT19 round trips;
    returns whether it warned."""
    if not any(view.column == "paraphrase" for view in method.views.values()):
        return False
    models = manifest.get("models", {})
    if models.get("paper_backtranslation"):
        return False
    pivots, made_by = models.get("pivots", []), models.get("backtranslation", "unknown")
    compute_type = manifest.get("config", {}).get("compute_type", "auto")  # int8 ctranslate2: the paper's models
    made_by += "" if compute_type == "auto" else f" in {compute_type}"
    logger.warning("%s: paraphrases made by %s%s, not the paper's WMT19 en-de/en-ru round trips; figures of %s on "
                   "this cache are not comparable with the paper's", folder, made_by,
                   f" ({', '.join('+'.join(p) for p in pivots)})" if pivots else "", method.name)
    return True
