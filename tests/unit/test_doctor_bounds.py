"""`invoke doctor` against an engine that accepts a connection and never answers, and with an
nvidia-smi that prints what is not a version: each probe is bounded and each answer is one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

from support import REPO_ROOT

DOCTOR = """
from servebuild.check import host
host.PROBE_SECONDS = 1  # the bound under test, shorter than the doctor's 10 s so the test takes a second
for check in host.run_checks():
    print(check.line())
"""


def silent_engine(path):
    """A real unix socket that accepts every connection and never sends a byte."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server, held


def test_doctor_gives_a_fail_line_against_an_engine_that_never_answers(tmp_path):
    sock = tmp_path / "docker.sock"
    server, held = silent_engine(sock)
    try:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", DOCTOR],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "DOCKER_HOST": f"unix://{sock}"},
        )
        seconds = time.monotonic() - start
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("FAIL docker: ") and "did not answer" in lines[-1], lines
    assert seconds < 20, seconds  # the probe's bound (1 s here), not the test's 60 s
    assert held, "the doctor never reached the engine"


import re  # noqa: E402

import pytest  # noqa: E402

from servebuild.check import host  # noqa: E402


@pytest.mark.parametrize(
    "printed", [b"9" * 5000 + b".1\n", b"\xff\xfe\x00\x81 binary\n", b"580." + b"7" * 5000 + b"\n"]
)
def test_doctor_reads_an_nvidia_smi_that_prints_no_version_as_no_version(tmp_path, monkeypatch, printed):
    (tmp_path / "out").write_bytes(printed)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {tmp_path / 'out'}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    version = host.driver_version()
    assert version is None or re.fullmatch(r"\d{1,6}(\.\d{1,6}){1,3}", version), version[:100]
    assert host.driver_check(version, "warn").status in ("ok", "warn", "FAIL")


def test_doctor_still_reads_a_real_driver_version(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 580.95.05\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert host.driver_version() == "580.95.05"
    assert host.driver_check("580.95.05", "warn").line() == "ok   driver: NVIDIA driver 580.95.05"
    assert host.driver_check("570.1", "warn").status == "FAIL"
    assert host.driver_check(None, "warn").status == "warn"


@pytest.mark.parametrize(
    "printed, shown",
    [
        (b"9" * 5000 + b".1\n", "'99999999999999999999"),
        (b"\xff\xfe\x00\x81 binary\n", "'\\ufffd\\ufffd\\x00\\ufffd binary'"),
        (b"580." + b"7" * 5000 + b"\n", "'580.777777"),
        (b"", "nothing"),
    ],
)
@pytest.mark.parametrize("serve", [False, True])
def test_doctor_gives_a_fail_line_for_an_nvidia_smi_that_prints_no_version(
    tmp_path, monkeypatch, printed, shown, serve
):
    """Issue 31, point 7: an nvidia-smi that answers (exit 0) with a 5,000-digit "version" or binary bytes
    is a broken driver install, not a host without a GPU: one FAIL line naming nvidia-smi and what it
    printed (escaped, cut), whatever --serve says; never a traceback, never a 5,000-character line."""
    (tmp_path / "out").write_bytes(printed)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {tmp_path / 'out'}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(host, "PROC_VERSION", tmp_path / "no-such-file")  # no kernel module to fall back on
    check = host.driver_probe("FAIL" if serve else "warn")
    line = check.line()
    assert check.status == "FAIL" and line.startswith("FAIL driver: nvidia-smi printed "), line[:300]
    assert shown in line and "not a driver version" in line, line[:300]
    assert "\n" not in line and len(line) < 400, line[:300]


def test_doctor_driver_probe_without_nvidia_smi_or_with_a_failing_one(tmp_path, monkeypatch):
    """No nvidia-smi, or one that exits non-zero (no driver loaded): no driver, a warn line (FAIL with --serve)."""
    monkeypatch.setattr(host, "PROC_VERSION", tmp_path / "no-such-file")
    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    assert host.driver_probe("warn").status == "warn" and host.driver_probe("FAIL").status == "FAIL"
    assert "no NVIDIA driver found" in host.driver_probe("warn").detail
    monkeypatch.undo()
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver'\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(host, "PROC_VERSION", tmp_path / "no-such-file")
    assert host.driver_probe("warn").status == "warn"
    (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 4 2025\n")
    monkeypatch.setattr(host, "PROC_VERSION", tmp_path / "version")
    assert host.driver_probe("warn").line() == "ok   driver: NVIDIA driver 580.95.05"
