"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it over ``path``; a write
    that fails (a full disk) removes its temporary file. The file gets the mode any new file gets (0666 less the
    umask), not the temporary file's private 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False) as handle:
        try:
            os.chmod(handle.name, 0o666 & ~umask())
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise
    os.replace(handle.name, path)
    return path


def umask() -> int:
    """The process's umask (read by setting it and back: no call reads it alone)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def with_umask(folder: str | os.PathLike) -> None:
    """Give every file under ``folder`` the mode a new file gets (0666 less the umask): libraries that write through
    a private temporary file (safetensors' save leaves 0600) would otherwise keep others from reading it."""
    mode = 0o666 & ~umask()
    for root, _, files in os.walk(os.fspath(folder)):
        for name in files:
            os.chmod(os.path.join(root, name), mode)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically, as :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically."""
    return write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


def disk_full(err: BaseException, folder: str | os.PathLike, needed: int = 0) -> bool:
    """Whether ``err``, raised while writing under ``folder``, means the disk is full: an OSError saying so, a
    library's error that quotes it (safetensors: "os error 28"), or any other OSError or RuntimeError (torch.save's
    zip writer names no errno) raised while less than ``needed`` bytes are free there."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return True
    if "No space left on device" in str(err) or "os error 28" in str(err):
        return True
    if not isinstance(err, (OSError, RuntimeError)):
        return False
    try:
        return shutil.disk_usage(folder).free < needed
    except OSError:
        return False
