"""The cselab checkpoint folder: a transformers model folder plus ``cselab.json``.

``cselab.json`` says how the folder encodes sentences, so ``probe run --model DIR``
needs no other flag::

    {"format": "cselab-checkpoint", "version": 1,
     "pooler": "cls_before_pooler", "prompt": null, "pool_tokens": "all", "bidirectional": false,
     "denoise": false, "head": null, "head_before_denoise": false, "max_length": 32, "normalize": false,
     "method": "simcse", "base_model": "bert-base-uncased", "data": {"kind": "corpus", "name": "wiki1m", ...},
     "config": {...}}

``base_model`` is the base's hub name where it has one (:func:`cselab.encoders.specs.hub_name`), else its folder;
``data`` describes what the run trained on (the ``--data`` given, else the method's own), as ``OUT/run.json``
records it. ``denoise`` subtracts the template's own [MASK] vector at test (PromptBERT's supervised runs); ``head``
(``{kind, ...its parameters}``, :mod:`cselab.encoders.heads`) is a head kept at test, its weights in
``head.safetensors``, applied after the denoising or, with ``head_before_denoise``, to both vectors before it.

The trainer writes it; :func:`write_checkpoint_info` is the one writer (atomic).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cselab.atomic import write_json_atomic
from cselab.encoders import pooling  # noqa: F401  (registers the poolers)
from cselab.encoders.transformer import POOL_TOKENS
from cselab.errors import ConfigError, ModelError
from cselab.files import read_json, shown
from cselab.registry import Param, check, get

logger = logging.getLogger(__name__)
CHECKPOINT_FILE = "cselab.json"
FORMAT = "cselab-checkpoint"
VERSION = 1


@dataclass
class CheckpointInfo:
    """How a checkpoint folder encodes sentences, and what produced it."""

    pooler: str = "cls_before_pooler"
    prompt: str | None = None
    pool_tokens: str = "all"
    bidirectional: bool = False
    denoise: bool = False
    head: dict[str, Any] | None = None
    head_before_denoise: bool = False
    max_length: int = 32
    normalize: bool = False
    method: str | None = None
    base_model: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    weights_sha256: str | None = None  # the folder's weights this lineage describes (combined_sha256 of its files)

    def __post_init__(self):
        get("pooler", self.pooler, "pooler")


def needs_module(info: CheckpointInfo) -> bool:
    """Whether sentence-transformers needs cselab's module (:mod:`cselab.encoders.st_module`, loaded with
    ``trust_remote_code=True``) for the checkpoint: a prompt, a pooler its own Pooling lacks, bidirectional
    attention or a head kept at test."""
    return (bool(info.prompt) or info.pooler not in ("cls_before_pooler", "avg") or info.bidirectional
            or info.head is not None)


def write_checkpoint_info(folder: str | os.PathLike, info: CheckpointInfo) -> Path:
    """Write ``cselab.json`` into ``folder`` atomically (temporary file, then rename), once the folder's weights are
    written: it records their sha256, which its lineage (``method``, ``data``, ``config``) describes. Rewritten over
    other weights than those it was read with (a checkpoint trained further elsewhere, sentence-transformers' trainer
    say), it drops that lineage, with a warning: what the new weights were trained on is not known here."""
    from cselab.encoders.pretrained import combined_sha256, weight_files

    digest = combined_sha256(weight_files(str(folder)))
    if info.weights_sha256 is not None and digest != info.weights_sha256 and (info.data or info.config):
        logger.warning("%s: its weights are not those %s was read with (trained further?): what they were trained "
                       "on is not known, so the earlier run's lineage (method %s, data %s) is left out", folder,
                       CHECKPOINT_FILE, info.method, (info.data or {}).get("name"))
        info = replace(info, method=None, data={}, config={})
    return write_json_atomic(Path(folder) / CHECKPOINT_FILE, {"format": FORMAT, "version": VERSION,
                                                              **asdict(replace(info, weights_sha256=digest))})


def trusted(info: CheckpointInfo, folder: str | os.PathLike) -> CheckpointInfo:
    """``info`` as ``folder``'s lineage: as it is where the folder's weights are those ``cselab.json`` recorded (or
    it recorded none: a checkpoint written before cselab did), else without its ``method``, ``data`` and ``config``
    (the weights changed after it was written), with a warning."""
    from cselab.encoders.pretrained import combined_sha256, weight_files

    if info.weights_sha256 is None or combined_sha256(weight_files(str(folder))) == info.weights_sha256:
        return info
    logger.warning("%s: its weights are not those its %s describes (changed after cselab wrote it): the earlier "
                   "run's lineage (method %s, data %s) is left out", folder, CHECKPOINT_FILE, info.method,
                   (info.data or {}).get("name"))
    return replace(info, method=None, data={}, config={})


INFO_SCHEMA = {"pooler": Param(str, "cls_before_pooler", choices="plugin:pooler"),
               "prompt": Param(str, None, nullable=True), "pool_tokens": Param(str, "all", choices=POOL_TOKENS),
               "bidirectional": Param(bool, False), "denoise": Param(bool, False),
               "head": Param(dict, None, nullable=True), "head_before_denoise": Param(bool, False),
               "max_length": Param(int, 32, min=1),
               "normalize": Param(bool, False), "method": Param(str, None, nullable=True),
               "base_model": Param(str, None, nullable=True), "data": Param(dict, {}), "config": Param(dict, {}),
               "weights_sha256": Param(str, None, nullable=True)}


def read_checkpoint_info(path: str | os.PathLike) -> CheckpointInfo:
    """Read a ``cselab.json`` file; unknown keys, values of the wrong type or another format are errors naming
    the file."""
    path = Path(path)
    payload = read_json(path, ModelError)
    if payload.pop("format", None) != FORMAT:
        raise ModelError(f"{path}: 'format' must be {FORMAT!r}")
    version = payload.pop("version", None)
    if version != VERSION:
        raise ModelError(f"{path}: checkpoint version {shown(version)} is not supported (this cselab reads "
                         f"{VERSION})")
    try:
        return CheckpointInfo(**check(payload, INFO_SCHEMA, ""))
    except ConfigError as err:
        raise ModelError(f"{path}: {err}") from None
