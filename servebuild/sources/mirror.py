"""Bounded reads from a Debian mirror, as the registry's are bounded (docs/reference/registry-limits.md, Debian mirrors):
a wall-clock deadline per request (connect to last byte) and one per command (every mirror read of one
`bootstrap-base`, `build` or `main` together), a silence bound, a line on stderr while a request waits,
retries only after a refused or reset connection or a 5xx answer (a request that went silent or ran
past its deadline is not asked again), and a server that does not answer HTTP named in one line.

The deadlines are registry/deadline.py's (SIGALRM in the main thread: a trickle cannot hold them).
"""

from __future__ import annotations

import http.client
import io
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import BinaryIO, Optional

from servebuild.errors import HostError
from servebuild.registry import limits
from servebuild.registry.bounded import CHUNK, collect
from servebuild.registry.deadline import Expired, deadline

REQUEST_S = 600.0  # one .deb, connect to last byte (SERVEBUILD_MIRROR_TIMEOUT)
COMMAND_S = 3600.0  # every mirror read of one command together (SERVEBUILD_MIRROR_DEADLINE)
IDLE_S = 30.0  # no byte for this long (connect included) ends a request, and it is not asked again
RETRIES = 4  # further tries after a refused or reset connection or a 5xx answer, within the command
BACKOFF_S = 0.5  # the first pause between tries, doubling
WAITING_EVERY_S = 10.0  # a request still running after this long (at most half its deadline) says so on stderr


def request_seconds() -> float:
    return limits.seconds_from_env("SERVEBUILD_MIRROR_TIMEOUT", REQUEST_S)


def command_seconds() -> float:
    return limits.seconds_from_env("SERVEBUILD_MIRROR_DEADLINE", COMMAND_S)


_spent = [0.0]  # seconds the mirror reads of this process took together (one command per process)


def reset() -> None:
    """A new command's budget (tests run several in one process)."""
    _spent[0] = 0.0


class _Waiting:
    """A line on `out` every `every` seconds while a request runs (a daemon thread: the request itself
    stays in the main thread, where the deadlines can interrupt it)."""

    def __init__(self, url: str, out, every: float):
        self.url, self.out, self.every = url, out, every
        self.received = 0
        self.start = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mirror wait", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.every):
            try:
                self.out.write(
                    f"  waiting for {self.url}: {self.received} bytes in {time.monotonic() - self.start:.0f} s\n"
                )
                self.out.flush()
            except (OSError, ValueError):  # stderr closed: nothing to say it on
                return

    def __enter__(self) -> "_Waiting":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()


class _Counting:
    """A sink that counts what passes (for the waiting line)."""

    def __init__(self, sink: Optional[BinaryIO], waiting: _Waiting):
        self.sink, self.waiting = sink, waiting

    def write(self, chunk: bytes) -> None:
        self.waiting.received += len(chunk)
        if self.sink is not None:
            self.sink.write(chunk)


def _chunks(resp, ends: float, seconds: float, url: str):
    """The body as the socket gives it (read1: a trickle is seen byte by byte, never held for a whole chunk),
    past `ends` an Expired: the main thread's deadline alarm already bounds it, a build thread's (no alarm
    there) is bounded here at each byte that arrives, and by the silence bound between them."""
    while True:
        chunk = resp.read1(CHUNK)
        if not chunk:
            return
        if time.monotonic() > ends:
            raise Expired(f"GET {url}", seconds)
        yield chunk


def get(url: str, limit: int, sink: Optional[BinaryIO] = None, out=None, backoff: float = BACKOFF_S) -> bytes:
    """The body of `url` from a mirror (into `sink` if given, emptied before each try, then b"").
    HTTPError (4xx, or 5xx after the retries) passes to the caller; silence, a deadline (the request's
    or what is left of the command's), a refused connection after the retries and an answer that is
    not HTTP are one HostError line each."""
    start = time.monotonic()
    try:
        return _get(url, limit, sink, sys.stderr if out is None else out, backoff)
    finally:
        _spent[0] += time.monotonic() - start


def _get(url: str, limit: int, sink: Optional[BinaryIO], out, backoff: float) -> bytes:
    request_s, command_s = request_seconds(), command_seconds()
    request = urllib.request.Request(url, headers={"Accept": "*/*"})
    t0, delay = time.monotonic(), backoff

    def left() -> float:  # of the command's budget, this call's time so far counted
        return command_s - _spent[0] - (time.monotonic() - t0)

    for attempt in range(RETRIES + 1):
        if sink is not None:
            sink.seek(0)
            sink.truncate()
        if left() <= 0:
            raise _over_command(url, command_s)
        seconds = min(request_s, left())
        last = attempt == RETRIES
        buffer = io.BytesIO() if sink is None else None
        try:
            with _Waiting(url, out, min(WAITING_EVERY_S, seconds / 2)) as waiting, deadline(seconds, f"GET {url}"):
                with urllib.request.urlopen(request, timeout=min(IDLE_S, seconds)) as resp:
                    chunks = _chunks(resp, time.monotonic() + seconds, seconds, url)
                    sunk = _Counting(sink if sink is not None else buffer, waiting)
                    collect(chunks, resp.headers.get("Content-Length"), limit, url, sunk)
                    return b"" if buffer is None else buffer.getvalue()
        except Expired as exc:
            if exc.what != f"GET {url}":  # an outer deadline: its owner says what it bounded
                raise
            if seconds < request_s:
                raise _over_command(url, command_s) from None
            raise HostError(
                f"{url} did not finish within {exc.seconds:g} s (not asked again)",
                hint="the mirror is stalled or trickling; raise SERVEBUILD_MIRROR_TIMEOUT or use another mirror",
                field="mirror",
            ) from None
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or last:
                raise
        except TimeoutError:  # silence while reading the body: not asked again
            raise _silent(url) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):  # silence while connecting or waiting for the answer
                raise _silent(url) from None
            if isinstance(exc.reason, http.client.HTTPException) and not isinstance(exc.reason, ConnectionError):
                raise _not_http(url, exc.reason) from None
            if last:
                raise HostError(f"cannot reach the mirror for {url} ({exc.reason})", field="mirror") from None
        except ConnectionError as exc:  # reset or closed while the body was read
            if last:
                raise HostError(f"cannot read {url} from the mirror ({exc})", field="mirror") from None
        except http.client.HTTPException as exc:  # a status line that is not HTTP, a body cut short
            raise _not_http(url, exc) from None
        time.sleep(min(delay, max(0.0, left())))
        delay *= 2
    raise AssertionError("unreachable")


def _over_command(url: str, command_s: float) -> HostError:
    return HostError(
        f"the mirror reads of this command took {command_s:g} s together; stopped at {url}",
        hint="the mirror is slow; raise SERVEBUILD_MIRROR_DEADLINE or use another mirror",
        field="mirror",
    )


def _silent(url: str) -> HostError:
    return HostError(
        f"{url} sent nothing for {min(IDLE_S, request_seconds()):g} s (not asked again)",
        hint="the mirror is stalled; use another mirror",
        field="mirror",
    )


def _not_http(url: str, exc: Exception) -> HostError:
    what = type(exc).__name__
    detail = " ".join(str(exc).split())[:80]
    return HostError(
        f"{url} did not answer HTTP ({what}{': ' + repr(detail) if detail else ''})",
        hint="is the lock's mirror a Debian mirror's http(s) URL?",
        field="mirror",
    )
