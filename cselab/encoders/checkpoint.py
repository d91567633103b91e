"""The cselab checkpoint folder: a transformers model folder plus ``cselab.json``.

``cselab.json`` says how the folder encodes sentences, so ``probe run --model DIR``
needs no other flag::

    {"format": "cselab-checkpoint", "version": 1,
     "pooler": "cls_before_pooler", "prompt": null, "max_length": 32, "normalize": false,
     "method": "simcse", "base_model": "bert-base-uncased", "config": {...}}

The trainer writes it; :func:`write_checkpoint_info` is the one writer (atomic).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cselab.atomic import write_json_atomic
from cselab.encoders import pooling  # noqa: F401  (registers the poolers)
from cselab.errors import ModelError
from cselab.registry import get

CHECKPOINT_FILE = "cselab.json"
FORMAT = "cselab-checkpoint"
VERSION = 1


@dataclass
class CheckpointInfo:
    """How a checkpoint folder encodes sentences, and what produced it."""

    pooler: str = "cls_before_pooler"
    prompt: str | None = None
    max_length: int = 32
    normalize: bool = False
    method: str | None = None
    base_model: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        get("pooler", self.pooler, "pooler")


def write_checkpoint_info(folder: str | os.PathLike, info: CheckpointInfo) -> Path:
    """Write ``cselab.json`` into ``folder`` atomically (temporary file, then rename)."""
    return write_json_atomic(Path(folder) / CHECKPOINT_FILE, {"format": FORMAT, "version": VERSION, **asdict(info)})


def read_checkpoint_info(path: str | os.PathLike) -> CheckpointInfo:
    """Read a ``cselab.json`` file; unknown keys or another format are errors naming the file."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ModelError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    if payload.pop("format", None) != FORMAT:
        raise ModelError(f"{path}: 'format' must be {FORMAT!r}")
    version = payload.pop("version", None)
    if version != VERSION:
        raise ModelError(f"{path}: checkpoint version {version!r} is not supported (this cselab reads {VERSION})")
    known = set(CheckpointInfo.__dataclass_fields__)
    unknown = sorted(set(payload) - known)
    if unknown:
        raise ModelError(f"{path}: unknown field(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
    try:
        return CheckpointInfo(**payload)
    except ValueError as err:
        raise ModelError(f"{path}: {err}") from None
