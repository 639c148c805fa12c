"""Host tools (git, docker, uv, apt, mmdebstrap, dpkg-deb, credential helpers) run as subprocesses, with one rule:
a tool that cannot be started is a ToolError (a HostError) of one line that names it, never a traceback."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from typing import BinaryIO, Iterable, Iterator, Optional

from servebuild.errors import ToolError


def start_problem(cmd: list[str], exc: OSError, field: str) -> ToolError:
    return ToolError(
        f"cannot run {cmd[0]}: {exc.strerror or exc}",
        hint=f"is {cmd[0].rsplit('/', 1)[-1]} installed and on PATH?",
        field=field,
    )


_stopping = threading.Event()  # set once an interrupted command ends its children: no new one starts


def _check_not_stopping(cmd: list[str], field: str) -> None:
    if _stopping.is_set():  # a build thread still running after ^C: it ends here instead of starting more
        raise ToolError(f"{cmd[0]} not started: the command was interrupted", field=field)


def run(cmd: list[str], field: str, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, **kwargs); a missing or unrunnable program is one ToolError line (`field` places it)."""
    _check_not_stopping(cmd, field)
    try:
        return subprocess.run(cmd, **kwargs)
    except OSError as exc:
        raise start_problem(cmd, exc, field) from None


def popen(cmd: list[str], field: str, **kwargs) -> subprocess.Popen:
    _check_not_stopping(cmd, field)
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


def descendants(pid: Optional[int] = None) -> list[int]:
    """Every live process below `pid` (default: this one), children first, found by parent in /proc: those
    started in a session or group of their own (docker clients, servers) included."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces
        if fields and fields[0] != b"Z":
            parent_of[int(entry)] = int(fields[1])
    out, todo = [], [os.getpid() if pid is None else pid]
    while todo:
        kids = sorted(p for p, parent in parent_of.items() if parent == todo[0])
        out += kids
        todo = todo[1:] + kids
    return out


def stop_descendants(grace: float = 5.0) -> list[int]:
    """End every process this one started, and theirs (an interrupted command leaves none running on):
    SIGTERM, then SIGKILL to those still there after `grace` seconds. Returns the pids signalled."""
    _stopping.set()
    pids = descendants()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    end = time.monotonic() + grace
    while time.monotonic() < end and any(p in pids for p in descendants()):
        time.sleep(0.05)
    for pid in descendants():  # what was started meanwhile goes too
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids
