"""The augment cache as its readers see it: the artifact ``cselab augment`` writes and ``cselab train`` reads.

A cache is a folder of ``chunk-NNNNN.parquet`` files (columns ``id``, ``text``, ``paraphrase``,
``paraphrase_mer``, ``negation``, ``negation_rule``, ``negation_reason``) and a ``manifest.json`` written last;
a folder without the manifest is unfinished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cselab.errors import DataError

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
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); run `cselab augment` again") from None


def load_cache(folder: str | os.PathLike):
    """The cached rows as a ``datasets.Dataset``, in id order."""
    from datasets import load_dataset

    folder = Path(folder)
    read_manifest(folder)
    files = sorted(str(p) for p in folder.glob("chunk-*.parquet"))
    return load_dataset("parquet", data_files=files, split="train")
