"""The results JSON every probe writes: scores plus what is needed to reproduce them."""

from __future__ import annotations

import os
from pathlib import Path

from cselab.checksum import sha256

# results written before the settings had names of their own called each of these "protocol"
FORMER_NAMES = {"classifier": "protocol", "split_rule": "protocol", "split_rule_description": "protocol_description"}


def suite_setting(section: dict, key: str, default=None):
    """A setting a suite recorded (``classifier``, ``split_rule`` ...), read under its former name in older
    results."""
    return section.get(key, section.get(FORMER_NAMES.get(key, key), default))


def data_key(path: str | os.PathLike, root: str | os.PathLike) -> str:
    """How a results JSON names a data file: its path relative to the data root, or its own path outside it."""
    path, root = Path(path).resolve(), Path(root).resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def checksums(paths, root: str | os.PathLike) -> dict[str, str]:
    """sha256 of each data file read, keyed by :func:`data_key`."""
    return {data_key(path, root): sha256(path) for path in sorted({Path(p).resolve() for p in paths})}


def changed_files(recorded: dict[str, str], root: str | os.PathLike) -> list[str]:
    """The files of :func:`checksums`' record (``recorded``, keyed relative to the data root ``root``) that are
    missing now or whose sha256 differs."""
    root = Path(root).resolve()
    changed = []
    for key, digest in recorded.items():
        path = Path(key) if Path(key).is_absolute() else root / key
        try:
            same = sha256(path) == digest
        except OSError:
            same = False
        if not same:
            changed.append(key)
    return changed
