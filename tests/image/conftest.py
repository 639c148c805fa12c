"""The smoke suite's plumbing: expectations, the host under test, file access, the summary table.

Standalone on purpose: it needs only pytest, pytest-testinfra and the standard library, so the
same suite runs against an image (docker backend), a GPU host (local backend) or over ssh.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("servebuild smoke")
    group.addoption("--expect", help="expectations JSON written by `invoke test-image` (or smoke-expect)")
    group.addoption("--require-gpu", action="store_true", help="fail GPU checks instead of skipping them")
    group.addoption("--cuobjdump", default=None, help="local cuobjdump for arch checks (default: on PATH)")
    group.addoption("--python", default=None, help="python on the host under test (default from expectations)")


@pytest.fixture(scope="session")
def expect(request) -> dict:
    path = request.config.getoption("--expect")
    if not path:
        raise pytest.UsageError("--expect FILE is required (run through `invoke test-image`)")
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="session")
def python(request, expect) -> str:
    return request.config.getoption("--python") or expect.get("python") or "python3"


@pytest.fixture(scope="module")
def py(host, python):
    """Run a Python snippet on the host under test; returns testinfra's CommandResult."""

    def run(code: str):
        return host.run(f"{shlex.quote(python)} -c {shlex.quote(code)}")

    return run


@pytest.fixture(scope="module")
def copy_to_host(host, python):
    """Copy a file of this suite onto the host under test (a real file: triton.jit and TileLang read
    their kernels' source); returns its path there. The copies go at the end of the module."""
    made = []

    def copy(source: Path) -> str:
        payload = base64.b64encode(source.read_bytes()).decode()
        writer = (
            "import base64, os, tempfile\n"
            f"d = tempfile.mkdtemp(prefix='smoke-{source.stem}.', dir='/var/tmp' if os.path.isdir('/var/tmp') else None)\n"
            f"p = os.path.join(d, {source.name!r})\n"
            f"open(p, 'wb').write(base64.b64decode('{payload}'))\n"
            "print(p)"
        )
        result = host.run(f"{shlex.quote(python)} -c {shlex.quote(writer)}")
        assert result.rc == 0, (
            f"cannot write {source.name} on the host under test: {(result.stdout + result.stderr)[-300:]}"
        )
        path = result.stdout.strip().splitlines()[-1]
        made.append(path.rsplit("/", 1)[0])
        return path

    yield copy
    for d in made:
        host.run(f"rm -rf {shlex.quote(d)}")


@pytest.fixture(scope="session")
def require_gpu(request) -> bool:
    return request.config.getoption("--require-gpu")


@pytest.fixture(scope="module")
def cuobjdump(request, host):
    """A way to run `cuobjdump --list-elf` on a file of the host under test."""
    remote = host.run("command -v cuobjdump")
    if remote.rc == 0:

        def on_host(path: str) -> tuple[int, str]:
            out = host.run(f"cuobjdump --list-elf {shlex.quote(path)}")
            return out.rc, out.stdout + out.stderr

        return on_host
    local = request.config.getoption("--cuobjdump") or shutil.which("cuobjdump")
    if not local:
        pytest.fail("no cuobjdump on the host under test or here: pass --cuobjdump (pip install nvidia-cuda-cuobjdump)")
    scratch = Path(tempfile.mkdtemp(prefix="smoke-cuobjdump."))

    def copied(path: str) -> tuple[int, str]:
        target = scratch / "obj.so"
        fetch(host, path, target)
        proc = subprocess.run([local, "--list-elf", str(target)], capture_output=True, text=True)
        target.unlink(missing_ok=True)
        return proc.returncode, proc.stdout + proc.stderr

    return copied


def fetch(host, path: str, target: Path) -> None:
    backend = host.backend
    if backend.NAME == "local":
        shutil.copyfile(path, target)
    elif backend.NAME == "docker":
        subprocess.run(["docker", "cp", f"{backend.name}:{path}", str(target)], check=True, capture_output=True)
    else:
        target.write_bytes(host.file(path).content)


# ------------------------------------------------------------------ summary table

RESULTS: list[tuple[str, str, str]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        detail = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            detail = report.longrepr[2].removeprefix("Skipped: ")
        elif report.failed:
            text = getattr(report, "longreprtext", "") or ""
            errors = [line[2:].strip() for line in text.splitlines() if line.startswith("E ")]
            detail = errors[0] if errors else (text.strip().splitlines() or [""])[-1]
        check = re.sub(
            r"-?((docker|local|ssh|paramiko|podman)://[^\]]*|local)(?=\])", "", report.nodeid.split("::", 1)[-1]
        )
        RESULTS.append((check.replace("[]", ""), report.outcome, detail))


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    width = min(60, max(len(r[0]) for r in RESULTS))
    terminalreporter.section("smoke summary")
    terminalreporter.write_line(f"{'check':<{width}}  {'result':<7}  detail")
    for check, outcome, detail in RESULTS:
        terminalreporter.write_line(f"{check:<{width}}  {outcome:<7}  {detail[:160]}")
