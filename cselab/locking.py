"""A lock file that keeps a second writer out of a folder: a training run's ``OUT``, an augment cache being built.

The lock holds the writer's pid, host, process start time and wall-clock start. A second writer stops with one line
naming them; a lock whose process is gone (a killed writer, its pid not reused since) is taken over with a warning.
:func:`alive` tells, on this host, whether a pid is still running.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cselab.atomic import write_json_atomic
from cselab.errors import CselabError
from cselab.files import read_json

logger = logging.getLogger(__name__)


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a live pid from a reused one."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def alive(pid: Any, host: str | None = None, process_start: str | None = None) -> bool:
    """Whether process ``pid`` of ``host`` (this one by default) still runs; another host's cannot be checked from
    here and is taken to run."""
    if host not in (None, socket.gethostname()):
        return True
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError, OverflowError):
        return False
    except PermissionError:
        return True
    start = _process_start(int(pid))
    return start is None or process_start in (None, start)


class FolderLock:
    """The lock file ``path`` while a writer works in its folder (a context manager). ``error`` is the error class a
    refusal raises and ``elsewhere`` what else the user may do (``give another --out``)."""

    def __init__(self, path: Path, error: type[CselabError], elsewhere: str, wait: float = 0.0):
        """``wait``: seconds to wait for a live holder to finish before refusing (0: refuse at once)."""
        self.path, self.error, self.elsewhere, self.wait = Path(path), error, elsewhere, wait
        self.mine = {"pid": os.getpid(), "host": socket.gethostname(), "process_start": _process_start(os.getpid()),
                     "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}

    def __enter__(self) -> FolderLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.wait
        while not self._create():
            if self.path.is_dir() or self.path.is_symlink():
                raise self.error(f"{self.path}: a {'folder' if self.path.is_dir() else 'link'} where the run's lock "
                                 f"file goes; remove it, or {self.elsewhere}")
            try:
                holder = read_json(self.path, self.error)
            except CselabError:
                holder = {}  # not a lock cselab wrote whole (it writes one complete, then links it into place)
            if holder and alive(holder.get("pid"), holder.get("host"), holder.get("process_start")):
                if time.monotonic() < deadline:
                    time.sleep(min(1.0, self.wait))
                    continue
                raise self.error(f"{self.path.parent}: being written by pid {holder.get('pid')} on "
                                 f"{holder.get('host')}, started {holder.get('started')}; wait for it to end, or "
                                 f"{self.elsewhere} (delete {self.path} only if that run is gone)")
            logger.warning("%s: taking over the lock of pid %s (started %s), which is no longer running",
                           self.path, holder.get("pid"), holder.get("started"))
            self.path.unlink(missing_ok=True)
        return self

    def _create(self) -> bool:
        """Write the lock whole beside its place, then link it there: another writer sees no lock or a complete one
        (never an empty file it might take for a dead writer's)."""
        whole = write_json_atomic(self.path.with_name(f"{self.path.name}.{os.getpid()}"), self.mine)
        try:
            os.link(whole, self.path)
        except FileExistsError:
            return False
        finally:
            whole.unlink()
        return True

    def __exit__(self, *exc) -> None:
        try:
            if read_json(self.path, self.error).get("pid") == self.mine["pid"]:
                self.path.unlink()
        except CselabError:
            pass
