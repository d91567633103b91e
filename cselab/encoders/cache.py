"""Encoded vectors kept on disk, so that a sentence is encoded once per model and setting, across runs.

An encoder's vectors live in one folder per *key*: the sha256 of its weight files, its settings as
:meth:`~cselab.encoders.base.Encoder.describe` gives them (pooler, prompt, max length, dtype, normalisation), the
kind of device (cpu, cuda) and the versions of torch, transformers and sentence-transformers (an upgrade can move
the vectors). Each write is one or more *chunks*: ``SHA256.npz`` holding the sentences (UTF-8) and their float32
vectors, named by the sha256 of its own bytes and written atomically. A chunk whose bytes no longer match its name
(truncated, edited) or that does not parse is removed with a warning and its sentences are encoded again: nothing
is trusted that cannot be checked.

The folder is ``$CSELAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/cselab/embeddings``, else
``~/.cache/cselab/embeddings``; when its chunks pass ``$CSELAB_CACHE_MAX_MB`` (default 4096) the least recently
used are removed. Batch size is not part of the key: padding is masked, so it moves a vector only by float rounding.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from cselab.atomic import write_bytes_atomic
from cselab.errors import ConfigError
from cselab.files import clipped
from cselab.versions import package_versions

FORMAT = 1
CHUNK_ROWS = 8192
DEFAULT_MAX_MB = 4096
VERSIONED = ("torch", "transformers", "sentence-transformers")  # an upgrade of these can move a vector


def cache_root() -> Path:
    """Where the vectors of every model are kept (see the module docstring)."""
    if os.environ.get("CSELAB_CACHE_DIR"):
        return Path(os.environ["CSELAB_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cselab" / "embeddings"


def max_bytes() -> int:
    """The cache's size cap in bytes, from ``$CSELAB_CACHE_MAX_MB``."""
    value = os.environ.get("CSELAB_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    try:
        megabytes = float(value)
    except ValueError:
        megabytes = -1.0
    if not megabytes > 0:
        raise ConfigError(f"CSELAB_CACHE_MAX_MB={value!r}: expected a positive number of megabytes")
    return int(megabytes * 2**20)


def cache_key(weights: str, settings: dict[str, Any], device: str) -> dict[str, Any]:
    """What a vector depends on, as recorded in the folder's ``key.json``."""
    versions = package_versions(VERSIONED)
    return {"format": FORMAT, "weights_sha256": weights, "settings": settings, "device": device,
            "versions": {name: versions[name] for name in VERSIONED}}


def _pack(sentences: list[str], vectors: np.ndarray) -> bytes:
    encoded = [s.encode("utf-8") for s in sentences]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    text = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, text=text, offsets=offsets, vectors=np.asarray(vectors, dtype=np.float32))
    return buffer.getvalue()


def _unpack(data: bytes) -> tuple[list[str], np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        text, offsets, vectors = archive["text"].tobytes(), archive["offsets"], archive["vectors"]
    if (vectors.ndim != 2 or offsets.ndim != 1 or len(offsets) != len(vectors) + 1 or offsets[0] != 0
            or offsets[-1] != len(text) or np.any(np.diff(offsets) < 0) or not np.isfinite(vectors).all()):
        raise ValueError("inconsistent arrays")
    return [text[lo:hi].decode("utf-8") for lo, hi in zip(offsets[:-1], offsets[1:])], vectors


class EmbeddingCache:
    """The chunks of one key (see the module docstring); counts what it served and what was encoded."""

    def __init__(self, key: dict[str, Any], root: str | os.PathLike | None = None):
        self.key = key
        self.root = Path(root) if root is not None else cache_root()
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        self.folder = self.root / digest[:32]
        self.cap = max_bytes()  # a bad $CSELAB_CACHE_MAX_MB stops here, before any encoding
        self.served = 0
        self.encoded = 0
        self._vectors: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._vectors is not None:
            return self._vectors
        self._vectors = {}
        width = None
        for chunk in sorted(self.folder.glob("*.npz")):
            try:
                data = chunk.read_bytes()
                if hashlib.sha256(data).hexdigest() != chunk.stem:
                    raise ValueError("its bytes do not match the sha256 it is named by")
                sentences, vectors = _unpack(data)
                if width is not None and vectors.shape[1] != width:
                    raise ValueError(f"{vectors.shape[1]}-wide vectors among {width}-wide ones")
            except FileNotFoundError:  # removed by another process meanwhile
                continue
            except (OSError, ValueError, KeyError, UnicodeDecodeError) as err:
                warnings.warn(f"embedding cache: {chunk} is damaged ({clipped(err)}); removed, its sentences will "
                              "be encoded again", stacklevel=4)
                chunk.unlink(missing_ok=True)
                continue
            width = vectors.shape[1]
            self._vectors.update(zip(sentences, vectors))
            os.utime(chunk)  # recently used: kept longest under the size cap
        return self._vectors

    def lookup(self, sentences: list[str]) -> dict[str, np.ndarray]:
        """The vectors the cache holds for ``sentences``."""
        known = self._load()
        found = {s: known[s] for s in sentences if s in known}
        self.served += len(found)
        return found

    def store(self, sentences: list[str], vectors: np.ndarray) -> None:
        """Keep new vectors, in chunks of :data:`CHUNK_ROWS`, each written atomically; then hold the size cap."""
        self.encoded += len(sentences)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            key_file = self.folder / "key.json"
            if not key_file.exists():
                write_bytes_atomic(key_file, json.dumps(self.key, indent=1, sort_keys=True).encode())
            for start in range(0, len(sentences), CHUNK_ROWS):
                data = _pack(sentences[start:start + CHUNK_ROWS], vectors[start:start + CHUNK_ROWS])
                write_bytes_atomic(self.folder / f"{hashlib.sha256(data).hexdigest()}.npz", data)
            self._load().update(zip(sentences, vectors))
            self._hold_cap()
        except OSError as err:  # a full or read-only disk costs the cache, not the result
            warnings.warn(f"embedding cache: cannot write under {self.folder} ({clipped(err)}); vectors not kept",
                          stacklevel=4)

    def _hold_cap(self) -> None:
        chunks = []
        for chunk in self.root.glob("*/*.npz"):
            try:
                chunks.append((chunk.stat().st_mtime, chunk.stat().st_size, chunk))
            except FileNotFoundError:
                continue
        total = sum(size for _, size, _ in chunks)
        for _, size, chunk in sorted(chunks):
            if total <= self.cap:
                break
            chunk.unlink(missing_ok=True)
            total -= size

    def summary(self) -> dict[str, Any]:
        """Where the vectors are and how many were served from it or encoded, for the results JSON."""
        return {"folder": str(self.folder), "served": self.served, "encoded": self.encoded}

