"""Token ids made once per corpus: each forward view's ids, so that a training batch only pads.

For each ``(column, prompt)`` a method's views encode, every row's ids (made by the view's own
:meth:`~cselab.encoders.transformer.TransformerEncoder.tokenize`, after the column's text plug-in, so they are the ids
a batch tokenised on the fly would get) are kept as two arrays: the ids of all rows one after another (``ids.npy``,
int32) and where each row's start (``offsets.npy``, int64, one more than the rows); a row without the column has no
ids. They live in one folder per *key* (:func:`ids_key`): the sha256 of the column's values, of the tokenizer's files
(as ``save_pretrained`` writes them, where it was loaded from aside), the view's tokenisation settings (the template
as filled, its pieces, ``max_length``, the model's limit, ``lowercase``), the text plug-in and its code, the code
that tokenises (:data:`CODE`) and the versions of transformers and tokenizers. ``key.json`` is written last and records
the key and each array's size and sha256; a folder whose arrays differ from it (truncated, edited) is removed with a
warning and built again, and a folder of another key is never read. Building writes chunks of :data:`CHUNK_ROWS` rows
into ``DIGEST.partial/`` (atomically, each named by its rows), which a build killed half-way resumes from, then joins
them; the arrays are read memory-mapped.

The folder is ``token-ids/`` inside an augment cache, else under ``$CSELAB_CACHE_DIR/token-ids``, else
``$XDG_CACHE_HOME/cselab/token-ids`` (``~/.cache``). A folder that cannot be written costs the cache, not the run: a
warning says so and the ids are kept in memory.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import cselab
from cselab.atomic import write_bytes_atomic, write_json_atomic
from cselab.boundary import note
from cselab.checksum import sha256
from cselab.errors import DataError
from cselab.files import cache_folder
from cselab.locking import FolderLock
from cselab.progress import Progress
from cselab.registry import described
from cselab.versions import package_versions

logger = logging.getLogger(__name__)

FORMAT = 1
CHUNK_ROWS = 65536
KEY = "key.json"
ARRAYS = ("ids.npy", "offsets.npy")
# the code that makes a row's ids: a change to it is a new key
CODE = ("encoders/transformer.py", "encoders/encoding.py", "train/batches.py", "train/token_ids.py")
VERSIONED = ("transformers", "tokenizers")
# fields that say where a tokenizer was loaded from (tokenizer_config.json) or how its last call truncated and padded
# (tokenizer.json: a call with truncation=True leaves it set), not what it does to a text
CALL_STATE = {"tokenizer_config.json": ("name_or_path", "is_local", "local_files_only", "_commit_hash"),
              "tokenizer.json": ("truncation", "padding")}


@dataclass(frozen=True)
class TokenIds:
    """Every row's ids for one ``(column, prompt)``: ``ids[offsets[i]:offsets[i + 1]]`` is row ``i``'s (none: the
    row has no value in the column)."""

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def batch(self, indices: Sequence[int], pad_id: int) -> tuple[list[int], torch.Tensor | None, torch.Tensor | None]:
        """The positions in ``indices`` of the rows that have ids, and their ids right-padded with ``pad_id`` to the
        longest, with the attention mask (as :meth:`~cselab.encoders.transformer.TransformerEncoder.pad`)."""
        rows = np.asarray(indices, dtype=np.int64)
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        present = np.flatnonzero(ends > starts)
        if not len(present):
            return [], None, None
        starts, lengths = starts[present], (ends - starts)[present]
        width = int(lengths.max())
        input_ids = np.full((len(present), width), pad_id, dtype=np.int64)
        attention_mask = np.arange(width) < lengths[:, None]
        take = starts[:, None] + np.arange(width)
        input_ids[attention_mask] = self.ids[take[attention_mask]]
        return present.tolist(), torch.from_numpy(input_ids), torch.from_numpy(attention_mask.astype(np.int64))


def values_sha256(values: Sequence[Any]) -> str:
    """The sha256 of a column's values (a missing or empty one marked apart from any text)."""
    digest = hashlib.sha256()
    for start in range(0, len(values), CHUNK_ROWS):
        digest.update("\x1e".join(value if value else "\x00" for value in values[start:start + CHUNK_ROWS])
                      .encode("utf-8", "surrogatepass"))
        digest.update(b"\x1d")
    return digest.hexdigest()


def tokenizer_sha256(tokenizer) -> str:
    """The sha256 of the files ``tokenizer.save_pretrained`` writes (where it was loaded from and its last call's
    truncation and padding left out)."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        for path in sorted(Path(folder).iterdir()):
            data = path.read_bytes()
            if path.name in CALL_STATE:
                config = {k: v for k, v in json.loads(data).items() if k not in CALL_STATE[path.name]}
                data = json.dumps(config, sort_keys=True).encode()
            digest.update(f"{path.name}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return digest.hexdigest()


def _code_sha256(extra: Sequence[str] = ()) -> str:
    package = Path(cselab.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [package / name for name in CODE] + [Path(p) for p in extra]:
        digest.update(f"{path.name}\0{sha256(path)}\n".encode())
    return digest.hexdigest()


def view_settings(view) -> dict[str, Any]:
    """What a view's tokenisation reads beside the tokenizer and the text (see the module docstring)."""
    return {"prompt": view.prompt, "pieces": view.pieces, "echo": view.echo, "max_length": view.max_length,
            "limit": view.limit, "lowercase": view.encoding.lowercase, "prompt_pieces": view.encoding.prompt_pieces}


def ids_key(view, values_digest: str, tokenizer_digest: str, text=None, text_spec: dict | None = None
            ) -> dict[str, Any]:
    """What a column's ids depend on (see the module docstring), as ``key.json`` records it."""
    text_code = [inspect.getsourcefile(type(text)) or ""] if text is not None else []
    return {"format": FORMAT, "values_sha256": values_digest, "tokenizer_sha256": tokenizer_digest,
            "view": view_settings(view),
            "text": None if text is None else {"plugin": described(text),
                                               "spec": json.loads(json.dumps(text_spec, default=dict))},
            "code_sha256": _code_sha256(text_code), "cselab": cselab.__version__,
            "versions": {name: version for name, version in package_versions(VERSIONED).items() if name in VERSIONED}}


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def ids_root(source: dict[str, Any]) -> Path:
    """Where the ids of a run's data go (see the module docstring)."""
    if source.get("kind") == "augment-cache":
        return Path(source["path"]) / "token-ids"
    return cache_folder("token-ids")


def _array_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """Where each row's ids start in the flat array, and where the last ends."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _tokenised(tokenize: Callable[[list[str]], list[list[int]]], values: Sequence[Any], start: int, what: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the chunk of ``values`` from ``start`` (none for a missing or empty value) and each row's length; a
    plug-in that fails (the column's text plug-in) is told the rows it failed in."""
    values = values[start:start + CHUNK_ROWS]
    present = [i for i, value in enumerate(values) if value]
    try:
        rows = tokenize([values[i] for i in present]) if present else []
    except Exception as err:
        note(err, during=f"the tokenising of {what} before the first step, rows {start + 1} to {start + len(values)}")
        raise
    lengths = np.zeros(len(values), dtype=np.int64)
    lengths[present] = [len(row) for row in rows]
    ids = np.fromiter((i for row in rows for i in row), dtype=np.int32, count=int(lengths.sum()))
    return ids, lengths


class IdsFolder:
    """One key's folder under ``root``: verified, built (resuming a killed build) and read."""

    def __init__(self, root: Path, key: dict[str, Any], what: str):
        self.key, self.what = key, what
        self.folder = root / key_digest(key)[:32]
        self.partial = self.folder.with_name(self.folder.name + ".partial")

    def read(self) -> TokenIds | None:
        """The ids when the folder holds them as ``key.json`` records; a damaged folder is removed (a warning)."""
        if not (self.folder / KEY).is_file():
            return None
        try:
            recorded = json.loads((self.folder / KEY).read_text())
            if recorded.get("key") != json.loads(json.dumps(self.key, default=str)):
                raise DataError(f"{KEY} records another key")
            for name in ARRAYS:
                record, path = recorded["files"][name], self.folder / name
                if path.stat().st_size != record["bytes"] or sha256(path) != record["sha256"]:
                    raise DataError(f"{name}: its size or sha256 differs from {KEY}")
            ids, offsets = (np.load(self.folder / name, mmap_mode="r", allow_pickle=False) for name in ARRAYS)
        except (OSError, ValueError, KeyError, TypeError, DataError) as err:
            logger.warning("%s: token ids of %s damaged (%s); built again", self.folder, self.what, err)
            shutil.rmtree(self.folder, ignore_errors=True)
            return None
        return TokenIds(ids, offsets)

    def build(self, tokenize: Callable[[list[str]], list[list[int]]], values: Sequence[Any]) -> TokenIds:
        """Tokenise ``values`` in chunks into the partial folder (chunks a killed build left are kept), then join
        them into the folder, ``key.json`` last."""
        self.partial.mkdir(parents=True, exist_ok=True)
        chunks = []
        with Progress(f"token ids of {self.what}", total=len(values), unit="row") as bar:
            for start in range(0, len(values), CHUNK_ROWS):
                chunks.append(self.partial / f"rows-{start:012d}-{min(start + CHUNK_ROWS, len(values)):012d}.npz")
                if not _readable(chunks[-1]):
                    ids, lengths = _tokenised(tokenize, values, start, self.what)
                    buffer = io.BytesIO()
                    np.savez(buffer, ids=ids, lengths=lengths)
                    write_bytes_atomic(chunks[-1], buffer.getvalue())
                bar.update(min(CHUNK_ROWS, len(values) - start))
        ids, offsets = _joined([(part["ids"], part["lengths"]) for part in map(np.load, chunks)])
        staging = self.folder.with_name(f"{self.folder.name}.staging-{os.getpid()}")
        files = {}
        for name, array in zip(ARRAYS, (ids, offsets), strict=True):
            path = write_bytes_atomic(staging / name, _array_bytes(array))
            files[name] = {"bytes": path.stat().st_size, "sha256": sha256(path)}
        write_json_atomic(staging / KEY, {"key": self.key, "rows": len(values), "files": files})
        shutil.rmtree(self.folder, ignore_errors=True)
        os.replace(staging, self.folder)
        shutil.rmtree(self.partial, ignore_errors=True)
        return TokenIds(*(np.load(self.folder / name, mmap_mode="r", allow_pickle=False) for name in ARRAYS))


def _joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' ``(ids, lengths)`` as one flat ids array and its offsets."""
    ids = np.concatenate([part[0] for part in parts]) if parts else np.zeros(0, dtype=np.int32)
    lengths = np.concatenate([part[1] for part in parts]) if parts else np.zeros(0, dtype=np.int64)
    return ids, offsets_of(lengths)


def _readable(chunk: Path) -> bool:
    """Whether a chunk a build wrote can be read back whole (written atomically, so it is whole or absent)."""
    if not chunk.is_file():
        return False
    try:
        with np.load(chunk, allow_pickle=False) as archive:
            return {"ids", "lengths"} <= set(archive.files)
    except (OSError, ValueError):
        chunk.unlink(missing_ok=True)
        return False


def column_ids(root: Path, key: dict[str, Any], what: str, tokenize: Callable[[list[str]], list[list[int]]],
               values: Sequence[Any]) -> TokenIds:
    """The ids of ``values`` under ``key``: read from ``root`` when there and whole, else built there (one builder
    at a time: a lock); in memory when ``root`` cannot be written (a warning)."""
    folder = IdsFolder(root, key, what)
    try:
        with FolderLock(folder.folder.with_name(folder.folder.name + ".lock"), DataError,
                        "remove the lock if no build is running"):
            return folder.read() or folder.build(tokenize, values)
    except OSError as err:
        logger.warning("%s: token ids of %s cannot be kept there (%s); tokenised in memory for this run", root,
                       what, err.strerror or err)
        return TokenIds(*_joined([_tokenised(tokenize, values, start, what)
                                  for start in range(0, len(values), CHUNK_ROWS)]))


def run_ids(encoder, keys: Sequence[tuple[str, str | None]], texts: dict[str, Callable[[str], str]],
            specs: dict[str, Any], rows, root: Path) -> dict[tuple[str, str | None], TokenIds]:
    """The ids of every ``(column, prompt)`` of ``keys`` over ``rows`` (a training table's), each column after its
    text plug-in in ``texts`` (built from ``specs``, the method's ``texts``), tokenised by ``encoder``'s view of the
    prompt, kept under ``root``."""
    tokenizer_digest = tokenizer_sha256(encoder.tokenizer)
    columns = {column: list(rows[column]) for column in dict.fromkeys(column for column, _ in keys)}
    digests = {column: values_sha256(values) for column, values in columns.items()}
    out = {}
    for column, prompt in keys:
        view, text = encoder.text_view(prompt), texts.get(column)
        key = ids_key(view, digests[column], tokenizer_digest, text, specs.get(column))

        def tokenize(values: list[str], view=view, text=text) -> list[list[int]]:
            return view.tokenize([text(value) for value in values] if text is not None else values, warn=False)

        what = column if prompt is None else f"{column} in the prompt {prompt!r}"
        out[column, prompt] = column_ids(root, key, what, tokenize, columns[column])
    return out
