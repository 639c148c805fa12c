"""The smoke suite's own JIT checks (tests/image/jit_probes.py) against tools that would fool them.

The fakes here are on purpose: a compiler that fails, a compiler that "succeeds" without building a
module, and nvcc scripts that report CUDA 13.1 or 13.4 (real ones cannot be installed side by side on
this machine). Each is a tiny shell script put first on PATH or named by CC; the probe runs as the
smoke suite runs it (`python3 jit_probes.py PROBE --nvcc-release 13.0`), and must fail where the
real tool would not do, and pass with the real compiler and a 13.0 nvcc.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

PROBES = Path(__file__).resolve().parents[1] / "image" / "jit_probes.py"


def fake(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def probe(name: str, env: dict, *args: str) -> tuple[int, dict]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CC", "CUDA_HOME", "CUDA_PATH")}
    with tempfile.TemporaryDirectory() as where:  # a fake compiler writes its last argument ('--version' too) here
        proc = subprocess.run(
            [sys.executable, str(PROBES), name, *args],
            env={**clean, **env},
            cwd=where,
            capture_output=True,
            text=True,
            timeout=300,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"probe"')]
    assert lines, (proc.stdout, proc.stderr)
    return proc.returncode, json.loads(lines[-1])


def nvcc_says(release: str) -> str:
    return f'echo "Cuda compilation tools, release {release}, V{release}.88"'


def test_cext_probe_passes_with_a_real_compiler():
    """The control: the host's gcc (scripts/setup.sh installs it) builds and imports the probe's module."""
    assert shutil.which("gcc"), "no gcc on this host: scripts/setup.sh installs it"
    code, out = probe("cext", {"CC": shutil.which("gcc")})
    assert (code, out["ok"], out.get("compiled")) == (0, True, True), out


@pytest.mark.parametrize(
    "body, words",
    [
        ("echo 'cc1: fatal error' >&2; exit 1", "failed"),  # cannot compile at all
        ('for a; do n=$a; done; : > "$n"; exit 0', "ImportError"),  # "succeeds", writes an empty .so
    ],
)
def test_cext_probe_fails_when_the_compiler_cannot_build(tmp_path, body, words):
    """A compile that fails, or a "compile" that leaves no loadable module, is a failed probe."""
    cc = fake(tmp_path / "bin", "cc", body)
    code, out = probe("cext", {"CC": str(cc)})
    assert code == 1 and out["ok"] is False, out
    assert words in out["detail"], out


@pytest.mark.parametrize("release", ["13.1", "13.3", "13.4", "12.9"])
def test_nvcc_probe_fails_on_any_release_but_13_0(tmp_path, release):
    fake(tmp_path / "bin", "nvcc", nvcc_says(release))
    code, out = probe("nvcc", {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, "--nvcc-release", "13.0")
    assert code == 1 and out["ok"] is False, out
    assert f"is {release}.88, want release 13.0" in out["detail"], out


def test_nvcc_probe_passes_on_13_0_and_fails_on_a_second_nvcc_that_differs(tmp_path):
    fake(tmp_path / "bin", "nvcc", nvcc_says("13.0"))
    path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    code, out = probe("nvcc", {"PATH": path}, "--nvcc-release", "13.0")
    if out["found"] and any(v != "13.0.88" for v in out["found"].values()):
        pytest.fail(f"this host has another nvcc on the probe's search path: {out['found']}")
    assert code == 0 and out["ok"] is True, out
    fake(tmp_path / "other", "nvcc", nvcc_says("13.1"))
    code, out = probe("nvcc", {"PATH": f"{path}:{tmp_path / 'other'}"}, "--nvcc-release", "13.0")
    assert code == 1 and "other nvcc differ" in out["detail"], out


def test_cext_probe_fails_when_the_built_module_computes_wrong(tmp_path):
    """A compiler that builds a module which loads but computes a + b + 1: compiled, loaded, still a failure
    (the probe checks what the kernel computes, not only that something was built)."""
    gcc = shutil.which("gcc")
    assert gcc, "no gcc on this host: scripts/setup.sh installs it"
    cc = fake(
        tmp_path / "bin",
        "cc",
        f'for a; do case "$a" in *.c) sed -i "s/a + b)/a + b + 1)/" "$a";; esac; done; exec {gcc} "$@"',
    )
    code, out = probe("cext", {"CC": str(cc)})
    assert code == 1 and out["ok"] is False and out.get("compiled") is True, out
    assert "add(40, 2) = 43" in out["detail"], out
