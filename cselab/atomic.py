"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False, encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)
    return path


def write_json_atomic(path: str | os.PathLike, payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically."""
    return write_text_atomic(path, json.dumps(payload, indent=2) + "\n")
