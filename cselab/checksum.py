"""File checksums recorded in results and cache manifests."""

from __future__ import annotations

import hashlib
import os


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
