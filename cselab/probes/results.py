"""The results JSON every probe writes: scores plus what is needed to reproduce them."""

from __future__ import annotations

import os
from pathlib import Path

from cselab.checksum import sha256


def checksums(paths, root: str | os.PathLike) -> dict[str, str]:
    """sha256 of each data file read, keyed by its path relative to the data root."""
    root = Path(root).resolve()
    result = {}
    for path in sorted({Path(p).resolve() for p in paths}):
        key = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        result[key] = sha256(path)
    return result
