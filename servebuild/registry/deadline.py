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


@dataclass(eq=False)
class _Entry:
    ends: float
    what: str
    seconds: float
    fired: bool = False  # raised once; it stays on the stack, inert, until its block is left


_stack: list[_Entry] = []
_previous_handler = None
# Signals whose handlers raise (our SIGALRM; Python's SIGINT raises KeyboardInterrupt): held back while
# the stack, the timer and the handler are changed, so an exception never lands half-way through.
_HELD = {signal.SIGALRM, signal.SIGINT}


def _armed() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _held():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _arm() -> None:
    nearest = min((e.ends for e in _stack if not e.fired), default=None)
    signal.setitimer(signal.ITIMER_REAL, 0 if nearest is None else max(nearest - time.monotonic(), 0.001))


def _push(entry: _Entry) -> None:
    global _previous_handler
    with _held():
        if all(e.fired for e in _stack):  # inert leftovers (an alarm landed on a block's exit): gone
            _stack.clear()
        if not _stack:
            current = signal.getsignal(signal.SIGALRM)
            if current is not _fire:
                _previous_handler = current
            signal.signal(signal.SIGALRM, _fire)
        _stack.append(entry)
        _arm()


def _remove(entry: _Entry) -> None:
    """Take `entry` off the stack with every entry pushed after it (deadlines nest: one pushed later
    whose own exit was cut short belongs to a block already left), and the entries that already fired
    when nothing else is left; re-arm for what is left, and give SIGALRM back to its previous handler
    when nothing is."""
    with _held():
        for i, e in enumerate(_stack):
            if e is entry:
                del _stack[i:]
                break
        if all(e.fired for e in _stack):
            _stack.clear()
        _arm()
        if not _stack:
            signal.signal(signal.SIGALRM, _previous_handler or signal.SIG_DFL)


def _fire(signum, frame) -> None:
    now = time.monotonic()
    due = [e for e in _stack if not e.fired and e.ends <= now + 0.005]
    if not due:  # fired early (clock granularity), or for an entry already gone: arm for what is left
        _arm()
        return
    first = min(due, key=lambda e: e.ends)
    first.fired = True  # it fires once; the deadlines still running keep theirs
    _arm()
    raise Expired(first.what, first.seconds)


def remaining() -> float:
    """Seconds left before the nearest deadline (inf when none is set)."""
    return min((e.ends for e in _stack if not e.fired), default=float("inf")) - time.monotonic()


@contextmanager
def deadline(seconds: float, what: str):
    """Raise `Expired(what, seconds)` if the block is still running `seconds` from now."""
    if not _armed():
        yield
        return
    entry = _Entry(time.monotonic() + seconds, what, seconds)
    try:
        _push(entry)
        yield
    finally:
        _remove(entry)
