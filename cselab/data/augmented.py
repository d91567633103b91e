"""The augment cache as its readers see it: the artifact ``cselab augment`` writes and ``cselab train`` reads.

A cache is a folder of ``chunk-NNNNN.parquet`` files (columns ``id``, ``text``, ``paraphrase``,
``paraphrase_mer``, ``negation``, ``negation_rule``, ``negation_reason``), the input lines each chunk skipped
(``skipped-NNNNN.json``) and a ``manifest.json`` written last, which records every such file's size, sha256 and
(for a chunk) row count; a folder without the manifest is unfinished. Opening a cache checks every file against
the manifest: a damaged one is named, and ``cselab augment`` with the same settings rebuilds it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cselab.checksum import sha256
from cselab.errors import DataError
from cselab.files import member, read_json

MANIFEST = "manifest.json"


def finished_cache(path: str | os.PathLike) -> Path:
    """An augment cache folder, or the newest finished one under a root of caches."""
    data = Path(path)
    if not (data / MANIFEST).exists():
        finished = sorted(data.glob(f"*/{MANIFEST}"), key=lambda p: p.stat().st_mtime)
        if not finished:
            raise DataError(f"{data} holds no finished augment cache (run `cselab augment` or `make augment`), "
                            "and is not a corpus name or file")
        data = finished[-1].parent
    return data


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise DataError(f"{folder} has no {MANIFEST}: the cache is unfinished (run `cselab augment` again)")
    try:
        manifest = read_json(path, DataError)
    except DataError as err:
        raise DataError(f"{err}; run `cselab augment` again") from None
    files = manifest.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(r, dict) and isinstance(r.get("bytes"), int)
                                              and isinstance(r.get("sha256"), str) for r in files.values()):
        raise DataError(f"{path}: files: expected name -> {{bytes, sha256, rows}}; run `cselab augment` again")
    return manifest


def data_files(folder: Path) -> list[Path]:
    """The files a manifest records: the chunks and their skipped-line lists."""
    return sorted([*folder.glob("chunk-*.parquet"), *folder.glob("skipped-*.json")])


def file_record(path: Path) -> dict[str, Any]:
    record = {"bytes": path.stat().st_size, "sha256": sha256(path)}
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        record["rows"] = pq.ParquetFile(path).metadata.num_rows
    return record


def damaged_files(folder: Path, manifest: dict[str, Any]) -> list[str]:
    """The recorded files that are missing or differ from the manifest (size or sha256), and files the manifest
    does not list."""
    recorded = manifest["files"]
    damaged = [name for name, record in recorded.items()
               if not member(folder, name, MANIFEST).is_file() or (folder / name).stat().st_size != record["bytes"]
               or sha256(folder / name) != record["sha256"]]
    return damaged + [p.name for p in data_files(folder) if p.name not in recorded]


def verified_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """The manifest, once every file it records is checked; a DataError names the first damaged one."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if "files" not in manifest:
        raise DataError(f"{folder / MANIFEST}: written by an older cselab, without checksums; run `cselab augment` "
                        "again with the same corpus, --out and settings: it checks the chunks and records them")
    damaged = damaged_files(folder, manifest)
    if damaged:
        raise DataError(f"{folder / damaged[0]}: damaged or missing (its size or sha256 differs from {MANIFEST}"
                        f"{f'; {len(damaged) - 1} more file(s) too' if len(damaged) > 1 else ''}); run `cselab "
                        "augment` again with the same corpus, --out and settings to rebuild it")
    return manifest


def load_cache(folder: str | os.PathLike):
    """The cached rows as a ``datasets.Dataset``, in id order, every file checked first."""
    from datasets import Dataset

    folder = Path(folder)
    verified_manifest(folder)
    files = sorted(str(p) for p in folder.glob("chunk-*.parquet"))
    # not load_dataset("parquet", ...): that counts the load with a request to the hub's servers, local files or not
    return Dataset.from_parquet(files, split="train")
