"""Encoded vectors kept on disk, so that a sentence is encoded once per model and setting, across runs.

An encoder's vectors live in one folder per *key*: the sha256 of every file of the model (the weight, configuration
and tokenizer files of every module, :mod:`cselab.encoders.model_files`), its settings as
:meth:`~cselab.encoders.base.Encoder.describe` gives them (pooler, prompt, max length, dtype, normalisation), the
kind of device (cpu, cuda), the versions of torch, transformers and sentence-transformers (an upgrade can move the
vectors) and the code that computed them: cselab's version, its git commit and whether the package had changes, and
the sha256 of the package's files (:func:`cselab.provenance.source`; a checkout with changes gets the key of its
changed code, so a changed pooler never meets the vectors of the old one), and for a pooler an installed package adds
(an entry point of ``cselab.poolers``), that package and its version. Each write is one or more *chunks*:
``SHA256.npz`` holding the key's digest, the sentences (UTF-8) and their float32 vectors, named by the sha256 of its
own bytes and written atomically. A chunk whose bytes no longer match its name (truncated, edited), that does not
parse, or that records another key (moved from another folder) is removed with a warning and its sentences are
encoded again: nothing is trusted that cannot be checked.

The folder is ``$CSELAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/cselab/embeddings``, else
``~/.cache/cselab/embeddings``; when its chunks pass ``$CSELAB_CACHE_MAX_MB`` (default 4096, at most
:data:`MAX_MB`) the least recently used are removed. A folder that cannot be read or written (read-only, not a
folder, full) costs the cache, not the result: a warning says so and encoding goes on without it. Batch size is not
part of the key: padding is masked, so it moves a vector only by float rounding.
"""

from __future__ import annotations

import contextlib
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
from cselab.provenance import source
from cselab.registry import origins
from cselab.versions import package_versions

FORMAT = 2
CHUNK_ROWS = 8192
DEFAULT_MAX_MB = 4096
MAX_MB = 2**30  # a pebibyte: any larger cap is a typo
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
    if not 0 < megabytes <= MAX_MB:  # NaN and infinity fail too
        raise ConfigError(f"CSELAB_CACHE_MAX_MB={value!r}: expected a number of megabytes above 0 and at most "
                          f"{MAX_MB}")
    return int(megabytes * 2**20)


def cache_key(model_files: str, settings: dict[str, Any], device: str) -> dict[str, Any]:
    """What a vector depends on (see the module docstring), as recorded in the folder's ``key.json``;
    ``model_files`` is :meth:`~cselab.encoders.model_files.ModelFiles.combined`."""
    versions = package_versions(VERSIONED)
    code = source()
    package = origins("pooler").get(settings.get("pooler", ""))
    return {"format": FORMAT, "model_files_sha256": model_files, "settings": settings, "device": device,
            "versions": {name: versions[name] for name in VERSIONED},
            "cselab": {name: code[name] for name in ("version", "commit", "dirty", "source_sha256")},
            **({"pooler_package": package} if package else {})}  # cselab's own poolers: the keys they always had


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _pack(digest: str, sentences: list[str], vectors: np.ndarray) -> bytes:
    encoded = [s.encode("utf-8") for s in sentences]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    text = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, key=np.frombuffer(digest.encode(), dtype=np.uint8), text=text, offsets=offsets,
             vectors=np.asarray(vectors, dtype=np.float32))
    return buffer.getvalue()


def _unpack(data: bytes, digest: str) -> tuple[list[str], np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        if "key" not in archive.files or archive["key"].tobytes() != digest.encode():
            raise ValueError("it was written under another key (moved from another folder?)")
        text, offsets, vectors = archive["text"].tobytes(), archive["offsets"], archive["vectors"]
    if (vectors.ndim != 2 or offsets.ndim != 1 or len(offsets) != len(vectors) + 1 or offsets[0] != 0
            or offsets[-1] != len(text) or np.any(np.diff(offsets) < 0) or not np.isfinite(vectors).all()):
        raise ValueError("inconsistent arrays")
    return [text[lo:hi].decode("utf-8") for lo, hi in zip(offsets[:-1], offsets[1:])], vectors


class EmbeddingCache:
    """The chunks of one key (see the module docstring); counts what it served and what was encoded. Once a read or
    a write of its folder fails, it says so in a warning and is left alone for the rest of the run."""

    def __init__(self, key: dict[str, Any], root: str | os.PathLike[str] | None = None):
        self.key = key
        self.root = Path(root) if root is not None else cache_root()
        self.digest = key_digest(key)
        self.folder = self.root / self.digest[:32]
        self.cap = max_bytes()  # a bad $CSELAB_CACHE_MAX_MB stops here, before any encoding
        self.served = 0
        self.encoded = 0
        self.failed: str | None = None  # why the cache was given up for this run
        self._vectors: dict[str, np.ndarray] | None = None

    def _give_up(self, doing: str, err: OSError) -> None:
        self.failed = f"cannot {doing} {self.folder} ({clipped(err.strerror or err)})"
        self._vectors = self._vectors or {}
        warnings.warn(f"embedding cache: {self.failed}; encoding goes on without the cache", stacklevel=5)

    def _load(self) -> dict[str, np.ndarray]:
        if self._vectors is not None:
            return self._vectors
        self._vectors = {}
        try:
            chunks = sorted(self.folder.glob("*.npz"))
            for chunk in chunks:
                self._read_chunk(chunk, self._vectors)
        except OSError as err:  # the folder (or a chunk) cannot be read: no permission, not a folder ...
            self._give_up("read", err)
        return self._vectors

    def _read_chunk(self, chunk: Path, into: dict[str, np.ndarray]) -> None:
        try:
            data = chunk.read_bytes()
        except FileNotFoundError:  # removed by another process meanwhile
            return
        width = next((len(v) for v in into.values()), None)
        try:
            if hashlib.sha256(data).hexdigest() != chunk.stem:
                raise ValueError("its bytes do not match the sha256 it is named by")
            sentences, vectors = _unpack(data, self.digest)
            if width is not None and vectors.shape[1] != width:
                raise ValueError(f"{vectors.shape[1]}-wide vectors among {width}-wide ones")
        except (ValueError, KeyError, UnicodeDecodeError, OSError) as err:
            warnings.warn(f"embedding cache: {chunk} is damaged or not this folder's ({clipped(err)}); removed, its "
                          "sentences will be encoded again", stacklevel=6)
            with contextlib.suppress(OSError):  # a read-only folder keeps it, and it is never served
                chunk.unlink(missing_ok=True)
            return
        into.update(zip(sentences, vectors))
        with contextlib.suppress(OSError):  # recently used: kept longest under the size cap (when it can be marked)
            os.utime(chunk)

    def lookup(self, sentences: list[str]) -> dict[str, np.ndarray]:
        """The vectors the cache holds for ``sentences``."""
        known = self._load()
        found = {s: known[s] for s in sentences if s in known}
        self.served += len(found)
        return found

    def store(self, sentences: list[str], vectors: np.ndarray) -> None:
        """Keep new vectors, in chunks of :data:`CHUNK_ROWS`, each written atomically; then hold the size cap."""
        self.encoded += len(sentences)
        if self.failed is not None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            key_file = self.folder / "key.json"
            if not key_file.exists():
                write_bytes_atomic(key_file, json.dumps(self.key, indent=1, sort_keys=True).encode())
            for start in range(0, len(sentences), CHUNK_ROWS):
                data = _pack(self.digest, sentences[start:start + CHUNK_ROWS], vectors[start:start + CHUNK_ROWS])
                write_bytes_atomic(self.folder / f"{hashlib.sha256(data).hexdigest()}.npz", data)
            self._load().update(zip(sentences, vectors))
            self._hold_cap()
        except OSError as err:  # a full, read-only or unusable folder costs the cache, not the result
            self._give_up("write under", err)

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
        """Where the vectors are and how many were served from it or encoded, for the results JSON (``failed``: why
        the cache was given up during the run, else None)."""
        return {"folder": str(self.folder), "served": self.served, "encoded": self.encoded, "failed": self.failed}
