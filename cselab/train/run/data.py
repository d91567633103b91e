"""What a run trains on: an augment cache, or a plain corpus whose sentences become the ``text`` column.

``--data`` (or a method's ``data`` key) is one of: an augment cache folder; a root holding caches (the
newest finished one is used); a corpus name (``wiki1m``, ``stsb-sentences``) or a one-sentence-per-line
file. A plain corpus has only ``text`` (held as :class:`TextRows`, without the ``datasets`` package): methods
whose views read ``paraphrase`` or ``negation`` need a cache.
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
from cselab.errors import ConfigError
from cselab.train.config.method import MethodConfig

logger = logging.getLogger(__name__)

DEFAULT_DATA = "cache/augment"


class TextRows:
    """Sentences as a one-column table: ``rows[[i, j]]`` is ``{"text": [...]}``, as a ``datasets.Dataset`` gives."""

    def __init__(self, sentences: list[str]):
        self.sentences = sentences

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, indices: list[int]) -> dict[str, list[str]]:
        return {"text": [self.sentences[i] for i in indices]}


def _columns(method: MethodConfig) -> list[str]:
    return sorted({view.column for view in method.views.values() if view.column})


def _plain_corpus(method: MethodConfig, data: str | os.PathLike | None) -> tuple[str, bool]:
    """What ``data`` names (``data``, else the method's ``data``, else ``cache/augment``) and whether it is a plain
    corpus (refused for a method that reads more than the text)."""
    spec = str(data if data is not None else method.data or DEFAULT_DATA)
    if not (is_corpus(spec) and not Path(spec).is_dir()):
        return spec, False
    missing = [column for column in _columns(method) if column != "text"]
    if missing:
        raise ConfigError(f"{spec} is a plain corpus (one sentence a line): it has no {', '.join(missing)} "
                          f"column, which method {method.name} reads; build an augment cache with "
                          f"`cselab augment --corpus {spec}` and train on it")
    return spec, True


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
    spec, corpus = _plain_corpus(method, data)
    if corpus:
        return _corpus_source(spec, load_corpus(spec, data_dir))
    folder = finished_cache(spec)
    return _cache_source(folder, read_manifest(folder))


def training_rows(method: MethodConfig, data: str | os.PathLike | None = None,
                  data_dir: str | os.PathLike | None = None):
    """The rows ``method`` trains on (``data``, else the method's ``data``, else ``cache/augment``): a cache's
    ``datasets.Dataset`` or a corpus's :class:`TextRows`, and a description of where they came from (recorded with
    the run). A cache without a column the method reads, or with that column empty in every row, is refused."""
    spec, corpus = _plain_corpus(method, data)
    if corpus:
        sentences = load_corpus(spec, data_dir)
        return TextRows(sentences), _corpus_source(spec, sentences)
    folder = finished_cache(spec)
    manifest = read_manifest(folder)
    warn_if_paraphrases_differ(method, manifest, folder)
    rows = load_cache(folder)
    for column in _columns(method):
        if column not in rows.column_names:
            raise ConfigError(f"{folder}: the cache has no column {column!r}, which method {method.name} "
                              f"reads; its columns: {', '.join(rows.column_names)}")
        if not any(value for value in rows[column]):
            raise ConfigError(f"{folder}: no row of the cache has a {column} (built with backend "
                              f"{manifest.get('config', {}).get('backend')!r}?), which method {method.name} "
                              "reads; build a cache that makes them")
    return rows, _cache_source(folder, manifest)


def warn_if_paraphrases_differ(method: MethodConfig, manifest: dict[str, Any], folder: Path) -> bool:
    """Warn (one line) when ``method`` reads paraphrases that were not made by the paper's WMT19 round trips;
    returns whether it warned."""
    if not any(view.column == "paraphrase" for view in method.views.values()):
        return False
    models = manifest.get("models", {})
    if models.get("paper_backtranslation"):
        return False
    pivots, made_by = models.get("pivots", []), models.get("backtranslation", "unknown")
    logger.warning("%s: paraphrases made by %s%s, not the paper's WMT19 en-de/en-ru round trips; figures of %s on "
                   "this cache are not comparable with the paper's", folder, made_by,
                   f" ({', '.join('+'.join(p) for p in pivots)})" if pivots else "", method.name)
    return True
