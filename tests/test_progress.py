import io
import time

import pytest

from cselab import progress
from cselab.encoders import load_encoder
from cselab.errors import ConfigError
from cselab.progress import Progress, duration


class Piped(io.StringIO):
    """A stream that is not a terminal, as a pipe, a log file or nohup's output."""

    def isatty(self):
        return False


def wait_for(stream, text, seconds=10.0):
    deadline = time.monotonic() + seconds
    while text not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    return stream.getvalue()


def test_off_a_terminal_lines_come_at_the_interval_with_rate_and_eta_even_without_updates():
    stream = Piped()
    with Progress("probe sts", 100, "sentence", stream=stream, every=0.05) as bar:
        bar.update(25)
        time.sleep(0.02)
        text = wait_for(stream, "ETA")  # no update since: the timer still writes
        bar.set_postfix(loss="0.31")
        bar.update(75)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "probe sts: started, 0/100 sentences (0%)"
    periodic = [line for line in text.splitlines() if "ETA" in line][0]
    assert periodic.startswith("probe sts: 25/100 sentences (25%), ") and "/s, ETA " in periodic
    assert lines[-1].startswith("probe sts: done, 100/100 sentences (100%) in ") and lines[-1].endswith("loss=0.31")


def test_a_failure_says_stopped_and_disabled_writes_nothing():
    stream = Piped()
    with pytest.raises(RuntimeError), Progress("train simcse", 10, "step", initial=4, stream=stream, every=60):
        raise RuntimeError
    assert stream.getvalue().splitlines() == ["train simcse: started, 4/10 steps (40%)",
                                              "train simcse: stopped, 4/10 steps (40%) in 0s"]
    quiet = Piped()
    with Progress("x", 10, stream=quiet, enabled=False) as bar:
        bar.update(3)
    assert quiet.getvalue() == ""


def test_a_phase_counts_other_work_of_the_same_stage():
    stream = Piped()
    with Progress("probe transfer", unit="sentence", stream=stream, every=60) as bar:
        bar.expect(10)
        bar.update(10)
        bar.phase("classifiers", 7, "task")
        bar.update(2)
        assert bar.line().startswith("probe transfer (classifiers): 2/7 tasks (29%), ")
    assert stream.getvalue().splitlines()[-1].startswith("probe transfer (classifiers): done, 2/7 tasks (29%)")


def test_a_plan_sets_the_total_before_the_encode_calls_that_announce_it_again():
    bar = Progress("probe sts", unit="sentence", stream=Piped(), enabled=False)
    bar.plan(10)
    bar.expect(4)
    bar.expect(6)
    assert bar.total == 10
    bar.expect(3)  # beyond the plan: added
    assert bar.total == 13


def test_encoders_count_the_distinct_sentences_they_are_asked_for_once_even_when_wrapped():
    encoder = load_encoder("bow")
    bar = Progress("probe x", unit="sentence", stream=Piped(), enabled=False)
    with progress.current(bar):
        assert progress.active()
        encoder.encode(["a cat", "a dog", "a cat"])
        with progress.encoding(5):  # a wrapper's encoding around the encoder's own
            encoder.encode(["one", "two", "three", "four", "five"])
    assert not progress.active()
    assert (bar.done, bar.total) == (7, 7)
    encoder.encode(["not counted"])
    assert bar.done == 7


@pytest.mark.parametrize("seconds, shown", [(9.6, "10s"), (165, "2m45s"), (3720, "1h02m")])
def test_durations_read_as_people_write_them(seconds, shown):
    assert duration(seconds) == shown


def test_a_bad_interval_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(progress.EVERY_ENV, "soon")
    with pytest.raises(ConfigError, match="CSELAB_PROGRESS_EVERY='soon'"):
        Progress("x", stream=Piped())
