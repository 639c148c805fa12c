"""Host tools (git, docker, uv, apt, mmdebstrap, dpkg-deb, credential helpers) run as subprocesses, with one rule:
a tool that cannot be started is a ToolError (a HostError) of one line that names it, never a traceback."""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import BinaryIO, Iterable, Iterator, Optional

from servebuild.errors import ToolError


def start_problem(cmd: list[str], exc: OSError, field: str) -> ToolError:
    return ToolError(
        f"cannot run {cmd[0]}: {exc.strerror or exc}",
        hint=f"is {cmd[0].rsplit('/', 1)[-1]} installed and on PATH?",
        field=field,
    )


def run(cmd: list[str], field: str, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, **kwargs); a missing or unrunnable program is one ToolError line (`field` places it)."""
    try:
        return subprocess.run(cmd, **kwargs)
    except OSError as exc:
        raise start_problem(cmd, exc, field) from None


def popen(cmd: list[str], field: str, **kwargs) -> subprocess.Popen:
    try:
        return subprocess.Popen(cmd, **kwargs)
    except OSError as exc:
        raise start_problem(cmd, exc, field) from None


def last_line(proc: subprocess.CompletedProcess) -> str:
    """The last non-empty line a failed tool wrote (stderr first), or its exit status."""
    for stream in (proc.stderr, proc.stdout):
        text = stream.decode(errors="replace") if isinstance(stream, bytes) else (stream or "")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return f"exit {proc.returncode}"


def chunks(pipe, deadline: Optional[float] = None, size: int = 1 << 16) -> Iterator[bytes]:
    """The bytes of `pipe` (a binary pipe from a child) as they come, at most `size` at a time, until it
    ends; past `deadline` (time.monotonic()) a TimeoutError, however the writer trickles or stalls."""
    fd = pipe.fileno()
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("past the deadline")
        chunk = os.read(fd, size)
        if not chunk:
            return
        yield chunk


def copy_tail(source: Iterable[bytes], out: Optional[BinaryIO], keep: int) -> tuple[bytes, int]:
    """Every chunk of `source` written to `out` (None: nowhere) as it comes; only the last `keep` bytes
    held in memory. Returns (those last bytes, the total count): a command's hour of output costs its
    log file, not memory."""
    tail, total = bytearray(), 0
    for chunk in source:
        total += len(chunk)
        if out is not None:
            out.write(chunk)
        tail += chunk[-keep:]
        if len(tail) > keep:
            del tail[:-keep]
    return bytes(tail), total


def last_words(tail: bytes, limit: int = 200) -> str:
    """The last non-empty line of a command's output, escaped and cut to `limit` characters (for a one-line error)."""
    lines = [ln.strip() for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in lines[-1])
    return line if len(line) <= limit else line[:limit] + "..."
