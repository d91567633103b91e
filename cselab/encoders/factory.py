"""Any Python object that encodes, as an :class:`Encoder`: ``probe run --model package.module:factory``.

The factory is called with no arguments and returns an object with ``encode(list[str]) -> array`` (one row per
sentence), e.g. a ``SentenceTransformer``, an MTEB model, or a function of your own wrapped in a class. The
module is imported by name, so its folder must be on ``PYTHONPATH`` (or installed).
"""

from __future__ import annotations

import importlib
import re
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from cselab.encoders.base import Encoder
from cselab.errors import ModelError
from cselab.files import clipped

FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def is_factory_spec(spec: str) -> bool:
    """Whether ``spec`` reads as ``package.module:function`` (and not a Windows path or a tfidf:PATH)."""
    return FACTORY.fullmatch(spec) is not None and not spec.startswith("tfidf:")


def where(err: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of ``err``'s traceback outside cselab, where a user's code raised;
    empty when there is none. ``--debug`` shows the whole traceback."""
    package = str(Path(__file__).resolve().parents[1])
    frames = [frame for frame in traceback.extract_tb(err.__traceback__) if not frame.filename.startswith(package)]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


class FactoryEncoder(Encoder):
    """Wraps the object a factory returns (its vectors are checked as every encoder's, by :class:`Encoder`)."""

    def __init__(self, spec: str):
        module_name, _, function = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ModelError(f"--model {spec}: cannot import {module_name!r} ({err}); is its folder on "
                             "PYTHONPATH?") from None
        except Exception as err:  # the user's module raised, or does not parse
            raise ModelError(f"--model {spec}: importing {module_name} failed: {type(err).__name__}: "
                             f"{clipped(err)}{where(err)}") from None
        factory = getattr(module, function, None)
        if not callable(factory):
            raise ModelError(f"--model {spec}: {module_name} has no function {function!r}")
        try:
            self.model = factory()
        except Exception as err:  # it needs arguments, or fails: the factory's to fix, said in one line
            raise ModelError(f"--model {spec}: {function}() failed: {type(err).__name__}: "
                             f"{clipped(err)}{where(err)}") from None
        if not callable(getattr(self.model, "encode", None)):
            raise ModelError(f"--model {spec}: {function}() returned {type(self.model).__name__}, which has no "
                             "encode(list[str]) method")
        self.spec = spec
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = self._checked(["dimension probe"], 1, False).shape[1]  # one row of dim numbers, or refused
        return self._dim

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "factory_returned": type(self.model).__name__}

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        try:
            vectors = np.asarray(self.model.encode(sentences), dtype=np.float32)
        except Exception as err:  # the user's encode() raised, or returned what is not an array of numbers
            raise ModelError(f"--model {self.spec}: encode() failed: {type(err).__name__}: "
                             f"{clipped(err)}{where(err)}") from None
        self._dim = vectors.shape[1] if vectors.ndim == 2 else None
        return vectors
