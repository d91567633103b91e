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


def checksums(paths, root: str | os.PathLike) -> dict[str, str]:
    """sha256 of each data file read, keyed by its path relative to the data root."""
    root = Path(root).resolve()
    result = {}
    for path in sorted({Path(p).resolve() for p in paths}):
        key = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        result[key] = sha256(path)
    return result
