"""The results JSON every probe writes: scores plus what is needed to reproduce them."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

from cselab.checksum import sha256

PACKAGES = ("cselab", "torch", "transformers", "sentence-transformers", "numpy", "scipy", "scikit-learn")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape the scores, and Python's."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def checksums(paths, root: str | os.PathLike) -> dict[str, str]:
    """sha256 of each data file read, keyed by its path relative to the data root."""
    root = Path(root).resolve()
    result = {}
    for path in sorted({Path(p).resolve() for p in paths}):
        key = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        result[key] = sha256(path)
    return result
