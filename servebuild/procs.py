"""Host tools (git, docker, uv, apt, mmdebstrap, dpkg-deb, credential helpers) run as subprocesses, with one rule:
a tool that cannot be started is a ToolError (a HostError) of one line that names it, never a traceback."""

from __future__ import annotations

import subprocess

from servebuild.errors import ToolError


def start_problem(cmd: list[str], exc: OSError, field: str) -> ToolError:
    return ToolError(f"cannot run {cmd[0]}: {exc.strerror or exc}", hint=f"is {cmd[0].rsplit('/', 1)[-1]} installed "
                     f"and on PATH?", field=field)


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
