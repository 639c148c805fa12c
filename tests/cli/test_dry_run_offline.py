"""`build --dry-run` of the engine recipes renders and reports with no network at all: the CLI runs
in a fresh network namespace (`unshare -n`, root), where only a down loopback exists, and with a
DOCKER_HOST that points nowhere, so neither PyPI, GitHub, a registry nor the engine can be asked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support import REPO_ROOT


@pytest.mark.parametrize("recipe", ["sglang-native-fp8", "vllm-dspark", "sglang-native-fp8-bookworm"])
def test_dry_run_of_an_engine_recipe_needs_no_network(recipe):
    probe = subprocess.run(
        [
            "unshare",
            "-n",
            sys.executable,
            "-c",
            "import socket; socket.create_connection(('pypi.org', 443), timeout=5)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "unshare" not in probe.stderr.split(":")[0], (
        f"cannot make a network namespace without network here: {probe.stderr[-300:]}"
    )
    proc = subprocess.run(
        [
            "unshare",
            "-n",
            sys.executable,
            "-m",
            "invoke",
            "-r",
            str(REPO_ROOT),
            "build",
            "--recipe",
            recipe,
            "--platform",
            "linux/arm64",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    if recipe.startswith("vllm"):
        # vLLM's stack has a PR the committed lock could not pin (#48993, a short SHA only: GitHub is
        # unreachable where it was made): the dry run says so and exits 2, and the context is still rendered
        assert proc.returncode == 2 and "  would stop: " in proc.stdout, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines() == ["error: the build would stop (see `would stop:` above)"]
    else:  # SGLang's one PR (#33276) is pinned to its full commit by the recipe: nothing stops the dry run
        assert proc.returncode == 0 and "would stop" not in proc.stdout, proc.stderr[-2000:]
    context = REPO_ROOT / "build" / recipe / "linux-arm64" / "dry-run" / "context"
    assert f"context: {context}" in proc.stdout
    golden = REPO_ROOT / "tests" / "golden" / f"{recipe}.linux-arm64.Dockerfile"
    assert (context / "Dockerfile").read_text() == golden.read_text()
    assert "docker build --platform linux/arm64" in proc.stdout
