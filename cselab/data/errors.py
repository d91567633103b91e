"""Errors raised while locating or reading data files."""

from __future__ import annotations

from pathlib import Path

from cselab.errors import DataError


class DataNotFoundError(DataError, FileNotFoundError):
    """The data root, or a file expected inside it, is missing."""


class DataFormatError(DataError, ValueError):
    """A line of a data file does not have the expected form."""

    def __init__(self, path: str | Path, line: int, message: str):
        self.path = Path(path)
        self.line = line
        super().__init__(f"{self.path}:{line}: {message}")
