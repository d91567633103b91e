"""Work done in a background thread ahead of its consumer, in order: while the caller computes on one item, the thread
prepares the next ones (numpy and torch release the GIL in their copies, so the two overlap)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")
_DONE = object()


@contextlib.contextmanager
def ahead(items: Iterable[Item], work: Callable[[Item], Result], depth: int) -> Iterator[Iterator[Result]]:
    """``work(item)`` of each item, in their order, computed in a thread of its own up to ``depth`` items before the
    consumer reads them. An error in ``items`` or ``work`` is raised by the read that would have returned that item;
    leaving the block (an error in the consumer too) stops the thread and waits for it."""
    results: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(depth)
    stopped = threading.Event()

    def put(entry: tuple[Any, BaseException | None]) -> bool:
        while not stopped.is_set():
            with contextlib.suppress(queue.Full):
                results.put(entry, timeout=0.05)
                return True
        return False

    def fill() -> None:
        try:
            for item in items:
                if not put((work(item), None)):
                    return
        except BaseException as err:  # noqa: BLE001  (handed to the consumer, raised there)
            put((None, err))
            return
        put((_DONE, None))

    def read() -> Iterator[Result]:
        while True:
            value, error = results.get()
            if error is not None:
                raise error
            if value is _DONE:
                return
            yield value

    thread = threading.Thread(target=fill, name="cselab-ahead", daemon=True)
    thread.start()
    try:
        yield read()
    finally:
        stopped.set()
        thread.join()
