"""cselab.background.ahead: work done in a thread ahead of its reader, in order, bounded, errors raised by the read."""

import threading
import time

import pytest

from cselab.background import ahead


def threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name == "cselab-ahead"]


def test_results_come_in_order_however_long_each_takes():
    with ahead(range(20), lambda i: time.sleep(0.002 * (i % 3)) or i * i, depth=3) as results:
        assert list(results) == [i * i for i in range(20)]
    assert threads() == []


def test_the_thread_runs_at_most_depth_items_ahead():
    done = []
    with ahead(range(50), lambda i: done.append(i) or i, depth=2) as results:
        for i, value in enumerate(results):
            time.sleep(0.01)  # the thread has long been free to run further
            assert value == i and len(done) <= i + 4  # depth queued, one being put, one being worked


@pytest.mark.parametrize("where", ["work", "items"])
def test_an_error_is_raised_by_the_read_of_its_item(where):
    def items():
        yield from range(3)
        if where == "items":
            raise ValueError("no item 3")
        yield 3

    def work(i):
        if i == 3:
            raise ValueError("no item 3")
        return i

    got = []
    with pytest.raises(ValueError, match="no item 3"), ahead(items(), work, depth=2) as results:
        got.extend(results)
    assert got == [0, 1, 2] and threads() == []


def test_leaving_early_stops_the_thread():
    started = []
    with pytest.raises(RuntimeError, match="reader failed"), \
            ahead(iter(range(10**6)), lambda i: started.append(i) or i, depth=2) as results:
        next(results)
        raise RuntimeError("reader failed")
    assert threads() == [] and len(started) < 10
