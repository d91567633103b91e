"""Progress of long work, on a terminal or not. On a terminal a :class:`Progress` is a tqdm bar; anywhere else (a pipe,
a log file, nohup, CI, SLURM) it writes one line when it starts, one every ``$CSELAB_PROGRESS_EVERY`` seconds
(default 30) from a timer, so that a long step without updates still shows the run is alive, and one when it ends::

    probe sts: 1,200/8,000 sentences (15%), 41.2/s, ETA 2m45s, 29s elapsed

Deep code reports to the progress that :func:`current` made current, with no progress object passed down: encoders
count the sentences they encode (so a probe suite's bar counts sentences without each suite counting them itself),
classifier loops and resampling count their steps."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import IO, Any

from cselab.errors import ConfigError

EVERY_ENV = "CSELAB_PROGRESS_EVERY"
DEFAULT_EVERY = 30.0
MAX_EVERY = 7 * 24 * 3600.0


def interval() -> float:
    """Seconds between two progress lines off a terminal: ``$CSELAB_PROGRESS_EVERY``, else 30."""
    value = os.environ.get(EVERY_ENV, "").strip()
    try:
        every = float(value) if value else DEFAULT_EVERY
    except ValueError:
        every = math.nan
    if not math.isfinite(every) or not 0 < every <= MAX_EVERY:  # a timer cannot wait past the platform's time_t
        raise ConfigError(f"{EVERY_ENV}={value!r}: expected a number of seconds above 0 and at most {MAX_EVERY:.0f} "
                          "(a week)")
    return every


def duration(seconds: float) -> str:
    """``seconds`` as ``1h02m``, ``2m45s`` or ``29s``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """The progress of one stage of work (``stage``: what the reader sees, e.g. ``train simcse``) counted in
    ``unit``s towards ``total`` (None: not known yet; :meth:`expect` adds to it). ``enabled=False`` shows nothing.
    Use it as a context manager, or call :meth:`close`."""

    def __init__(self, stage: str, total: int | None = None, unit: str = "item", initial: int = 0,
                 enabled: bool = True, stream: IO[str] | None = None, every: float | None = None):
        self.stage, self.total, self.unit, self.done = stage, total, unit, initial
        self.phase_name: str | None = None
        self.postfix: dict[str, Any] = {}
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self._started = self._phase_started = time.perf_counter()
        self._phase_initial, self._planned = initial, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = None
        if not enabled:
            return
        if _terminal(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=stage, unit=unit, file=self.stream)
        else:
            every = interval() if every is None else every
            self._write(f"{stage}: started" + (f", {self._count()}" if total else ""))
            threading.Thread(target=self._tick, args=(every,), name=f"progress {stage}", daemon=True).start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        self.close(failed=kind is not None)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        with self._lock:
            self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def plan(self, n: int) -> None:
        """``n`` more units to do, which the :meth:`expect` calls that follow announce again (and so do not add)."""
        with self._lock:
            self._planned += n
            self.total = (self.total or 0) + n
        self._show_total()

    def expect(self, n: int) -> None:
        """``n`` more units to do than the total said (beyond what was planned)."""
        with self._lock:
            absorbed = min(n, self._planned)
            self._planned -= absorbed
            if n > absorbed:
                self.total = (self.total or 0) + n - absorbed
        self._show_total()

    def _show_total(self) -> None:
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def phase(self, name: str, total: int | None, unit: str) -> None:
        """Start counting another kind of work of the same stage (``transfer``: sentences, then classifiers)."""
        with self._lock:
            self.phase_name, self.total, self.unit, self.done = name, total, unit, 0
            self._phase_started, self._phase_initial, self._planned = time.perf_counter(), 0, 0
        if self._bar is not None:
            self._bar.unit = unit
            self._bar.set_description(f"{self.stage} ({name})", refresh=False)
            self._bar.reset(total=total)
        elif self.enabled:
            self._write(f"{self._title()}: {self._count()}")

    def set_postfix(self, **values: Any) -> None:
        """Figures shown after the count (``loss=0.31``)."""
        with self._lock:
            self.postfix = dict(values)
        if self._bar is not None:
            self._bar.set_postfix(values)

    def note(self, text: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        elif self.enabled:
            self._write(text)

    def close(self, failed: bool = False) -> None:
        """Stop showing; off a terminal, a last line says how much was done and in how long."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            ended = "stopped" if failed else "done"
            self._write(f"{self._title()}: {ended}, {self._count()} in "
                        f"{duration(time.perf_counter() - self._started)}{self._figures()}")

    def line(self) -> str:
        """The progress line as it reads now."""
        with self._lock:
            done, total = self.done, self.total
            elapsed = time.perf_counter() - self._phase_started
        rate = (done - self._phase_initial) / elapsed if elapsed > 0 else 0.0
        parts = [self._count(), *([f"{rate:,.1f}/s" if rate < 100 else f"{rate:,.0f}/s"] if rate > 0 else [])]
        if total and rate > 0 and done <= total:
            parts.append(f"ETA {duration((total - done) / rate)}")
        parts.append(f"{duration(time.perf_counter() - self._started)} elapsed")
        return f"{self._title()}: {', '.join(parts)}{self._figures()}"

    def _title(self) -> str:
        return f"{self.stage} ({self.phase_name})" if self.phase_name else self.stage

    def _count(self) -> str:
        unit = self.unit if self.done == 1 and not self.total else f"{self.unit}s"
        if not self.total:
            return f"{self.done:,} {unit}"
        return f"{self.done:,}/{self.total:,} {unit} ({100 * self.done / self.total:.0f}%)"

    def _figures(self) -> str:
        return "".join(f", {key}={value}" for key, value in self.postfix.items())

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            self._write(self.line())

    def _write(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed or broken stream: progress is never worth failing the work for
            pass


_CURRENT: ContextVar[Progress | None] = ContextVar("cselab_progress", default=None)
_INSIDE: ContextVar[bool] = ContextVar("cselab_inside_encoding", default=False)


@contextlib.contextmanager
def current(progress: Progress) -> Iterator[Progress]:
    """Within the block, :func:`encoding`, :func:`plan`, :func:`phase` and :func:`advance` count on ``progress``."""
    token = _CURRENT.set(progress)
    try:
        yield progress
    finally:
        _CURRENT.reset(token)


def active() -> bool:
    """Whether a progress is current (an encoder then shows no bar of its own)."""
    return _CURRENT.get() is not None


@contextlib.contextmanager
def encoding(n: int) -> Iterator[None]:
    """Around the encoding of ``n`` sentences: they are expected at the start and all counted at the end, whether
    the encoder reported them batch by batch (:func:`advance`) or not. An encoder inside another's encoding (a
    wrapper's) adds nothing more."""
    progress = _CURRENT.get()
    if progress is None or _INSIDE.get():
        yield
        return
    progress.expect(n)
    start, token = progress.done, _INSIDE.set(True)
    try:
        yield
    finally:
        _INSIDE.reset(token)
    progress.update(max(0, start + n - progress.done))


def advance(n: int = 1) -> None:
    """``n`` more units done (sentences encoded, classifiers trained ...) on the current progress, if any."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.update(n)


def plan(n: int) -> None:
    """The current progress will count ``n`` sentences (encode calls to come; sets its total early)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.plan(n)


def phase(name: str, total: int, unit: str) -> None:
    """The current progress goes on to another kind of work (a suite's classifiers after its sentences)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.phase(name, total, unit)
