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


def folder_sha256(folder: str | os.PathLike) -> str:
    """One sha256 over every file under ``folder``: its path relative to the folder and its own sha256, in sorted
    order (a linked file read through its link; linked folders not entered), so renaming, editing, adding or
    removing a file changes it."""
    files = sorted(os.path.relpath(os.path.join(root, name), folder)
                   for root, _, names in os.walk(os.fspath(folder)) for name in names)
    digest = hashlib.sha256()
    for name in files:
        digest.update(f"{name}\0{sha256(os.path.join(folder, name))}\n".encode())
    return digest.hexdigest()
