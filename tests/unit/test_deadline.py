"""The nested wall-clock deadlines of registry calls (servebuild/registry/deadline.py) when the alarm
arrives at an awkward moment.

CI once failed with an INTERNALERROR: a later test's failure report was interrupted by
`Expired: the registry reads of rebuild --check ...`, the total deadline of a rebuild test that had
finished long before. The outer deadline's alarm had arrived while an inner deadline was being set up
(after its entry was pushed, before the `try` that removes it), the outer's exit then popped the
inner's entry instead of its own, and the stale outer entry stayed on the stack, re-arming the timer
for every later deadline.

These tests deliver the alarm at every line the module runs while it is not masked (a line trace
calls the real handler there, as the kernel's signal would at that point), and require that nothing
is left behind: no entry, no armed timer, the previous SIGALRM handler back. The real interval timer
is replaced by a recorder so the only alarm is the one the test delivers.
"""

from __future__ import annotations

import signal
import sys

import pytest

from servebuild.registry import deadline as dl


class Delivered(Exception):
    """Marks that the simulated alarm was delivered (so the sweep knows when it has covered every line)."""


@pytest.fixture
def timer(monkeypatch):
    """The interval timer replaced by a recorder: its last setting (seconds) is `timer[-1]`."""
    settings: list[float] = [0.0]
    monkeypatch.setattr(dl.signal, "setitimer", lambda which, seconds, interval=0.0: settings.append(seconds))
    yield settings
    dl._stack.clear()


def _masked() -> bool:
    return signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _deliver_at(n: int, delivered: list[int]):
    """A trace that delivers SIGALRM (calls the module's handler) at the n-th line event of the deadline
    module that runs while SIGALRM is not blocked, as the kernel would deliver a pending signal there."""
    seen = [0]

    def local(frame, event, arg):
        if event == "line" and not _masked():
            seen[0] += 1
            if seen[0] == n:
                delivered.append(frame.f_lineno)
                dl._fire(signal.SIGALRM, frame)
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename == dl.__file__:
            return local
        return None

    return tracer


def _nested(outer_s: float, inner_s: float) -> None:
    with dl.deadline(outer_s, "outer"):
        with dl.deadline(inner_s, "inner"):
            pass
        with dl.deadline(inner_s, "inner again"):
            pass


@pytest.mark.parametrize("outer_s,inner_s", [(1e-9, 30.0), (30.0, 1e-9)], ids=["outer-due", "inner-due"])
def test_an_alarm_at_any_line_leaves_no_deadline_behind(timer, outer_s, inner_s):
    """Whichever line the alarm interrupts, once the outermost deadline is left: no live entry on the
    stack, the timer disarmed, and the next deadline neither fired by a stale entry nor leaving anything
    behind (the SIGALRM handler the caller had back). The sweep stops when a run no longer reaches
    the n-th line (every line of the module that runs has been tried)."""
    before = signal.getsignal(signal.SIGALRM)
    tried = 0
    for n in range(1, 500):
        delivered: list[int] = []
        sys.settrace(_deliver_at(n, delivered))
        try:
            _nested(outer_s, inner_s)
        except dl.Expired:
            pass
        finally:
            sys.settrace(None)
        where = f"alarm delivered at deadline.py line {delivered[0] if delivered else None} (line event {n})"
        assert [e for e in dl._stack if not e.fired] == [], (where, dl._stack)
        assert timer[-1] == 0, (where, timer[-8:])
        # an alarm on the outermost block's own exit may leave its (fired, inert) entry: the next
        # deadline starts clean, nothing stale fires in it, and its exit leaves nothing at all
        with dl.deadline(30, "the next call"):
            dl._fire(signal.SIGALRM, None)
        assert dl._stack == [] and timer[-1] == 0, (where, dl._stack)
        assert signal.getsignal(signal.SIGALRM) == before, (where, signal.getsignal(signal.SIGALRM))
        if not delivered:
            break
        tried += 1
    else:
        pytest.fail("the sweep never ran out of lines")
    assert tried >= 10, tried  # the sweep did cover the module's lines


def test_an_expired_deadline_fires_once_and_the_others_keep_theirs(timer):
    """The due entry is raised once and leaves the stack; the deadline still running keeps its own."""
    with dl.deadline(30, "outer"):
        with pytest.raises(dl.Expired, match="inner"):
            with dl.deadline(1e-9, "inner"):
                dl._fire(signal.SIGALRM, None)
        assert [e.what for e in dl._stack] == ["outer"]
        dl._fire(signal.SIGALRM, None)  # nothing is due: no exception, the timer armed for what is left
        assert 29 < timer[-1] <= 30, timer[-3:]
    assert dl._stack == [] and timer[-1] == 0


def test_a_real_alarm_interrupts_a_blocking_call_and_nothing_is_left():
    """The real timer (not the recorder): a sleep inside a 0.2 s deadline ends with Expired."""
    import time

    before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    with pytest.raises(dl.Expired, match="sleeping"):
        with dl.deadline(30, "outer"):
            with dl.deadline(0.2, "sleeping"):
                time.sleep(5)
    assert time.monotonic() - start < 3
    assert dl._stack == [] and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) == before
