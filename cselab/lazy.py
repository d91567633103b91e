"""Lazy package exports (PEP 562): ``from cselab.encoders import load_encoder`` still works, but importing the
package alone loads none of its modules, so that the command line starts without torch or scikit-learn."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` serving each name in ``where`` from the module it names."""
    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    def dir_() -> list[str]:
        return sorted(where)
    return getattr_, dir_
