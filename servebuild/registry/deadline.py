"""Wall-clock deadlines for blocking network calls, nested (a request inside an operation).

A socket timeout only bounds the wait for the *next* byte: a server that trickles one byte a minute
holds the caller for ever. A deadline bounds the whole call. It is an interval timer (SIGALRM) armed
for the nearest deadline on the stack; when it fires it raises `Expired` in the main thread, which
interrupts any blocking read, connect or TLS handshake. `Expired` derives from BaseException so that
no library's `except Exception` retry loop swallows it; the caller turns it into its one-line error.
Outside the main thread (signals cannot be delivered there) a deadline is recorded but not armed, and
only the socket timeouts bound the call.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass


class Expired(BaseException):
    """A deadline passed; `what` names the call it bounded and `seconds` its length."""

    def __init__(self, what: str, seconds: float):
        super().__init__(what)
        self.what, self.seconds = what, seconds


@dataclass(frozen=True)
class _Entry:
    ends: float
    what: str
    seconds: float


_stack: list[_Entry] = []
_previous_handler = None


def _armed() -> bool:
    return threading.current_thread() is threading.main_thread()


def _arm() -> None:
    if not _stack:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    nearest = min(e.ends for e in _stack)
    signal.setitimer(signal.ITIMER_REAL, max(nearest - time.monotonic(), 0.001))


def _fire(signum, frame) -> None:
    now = time.monotonic()
    due = [e for e in _stack if e.ends <= now + 0.005]
    if not due:  # fired early (clock granularity): arm again for what is left
        _arm()
        return
    first = min(due, key=lambda e: e.ends)
    raise Expired(first.what, first.seconds)


def remaining() -> float:
    """Seconds left before the nearest deadline (inf when none is set)."""
    return min((e.ends for e in _stack), default=float("inf")) - time.monotonic()


@contextmanager
def deadline(seconds: float, what: str):
    """Raise `Expired(what, seconds)` if the block is still running `seconds` from now."""
    global _previous_handler
    if not _armed():
        yield
        return
    if not _stack:
        _previous_handler = signal.signal(signal.SIGALRM, _fire)
    _stack.append(_Entry(time.monotonic() + seconds, what, seconds))
    try:
        _arm()
        yield
    finally:
        _stack.pop()
        _arm()
        if not _stack:
            signal.signal(signal.SIGALRM, _previous_handler or signal.SIG_DFL)
