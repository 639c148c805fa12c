"""`invoke bisect --farm FILE` builds where `invoke build --farm FILE` would: on the farm's engine for
the platform, chosen by the same preflight.

The farm names the local engine by a path of its own (a link to the engine's socket), so only the
farm can have sent a build there. The docker client is a stand-in for one call only: its `build`
records the DOCKER_HOST it was given and fails (nothing is built or tagged); every other call goes
to the real client and engine (the preflight's ping, info, base image checks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT, fixture_recipe, make_project, make_upstream

RECORDING_DOCKER = """#!/bin/sh
if [ "$1" = build ] && [ "$2" != --help ]; then
  echo "${{DOCKER_HOST:-unset}}" > {record}
  echo "ERROR: stand-in build ends here"
  exit 1
fi
exec {real} "$@"
"""


def test_bisect_builds_on_the_farm_engine(tmp_path):
    socket = Path(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://"))
    if not socket.exists():
        pytest.skip("no local engine socket")
    up = make_upstream(tmp_path)
    project = make_project(tmp_path, up, fixture_recipe(up, platforms=["linux/amd64"]))
    shutil.copyfile(REPO_ROOT / "tasks.py", project / "tasks.py")
    (tmp_path / "farm-engine.sock").symlink_to(socket)
    farm = tmp_path / "farm.yaml"
    farm.write_text(f"platforms:\n  linux/amd64:\n    - host: unix://{tmp_path}/farm-engine.sock\n")
    record = tmp_path / "docker-host.txt"
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    real = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")
    docker.write_text(RECORDING_DOCKER.format(record=record, real=real))
    docker.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "SERVEBUILD_CACHE": str(tmp_path / "cache"),
        "SERVEBUILD_DOCKER": str(docker),
    }
    env.pop("DOCKER_HOST", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "-r",
            str(project),
            "bisect",
            "--recipe",
            "toy",
            "--variants",
            "stackless=",
            "--farm",
            str(farm),
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "stand-in build ends here" in proc.stderr, proc.stderr[-3000:]
    assert f"[linux/amd64] on unix://{tmp_path}/farm-engine.sock" in proc.stderr, proc.stderr[-3000:]
    assert record.read_text().strip() == f"unix://{tmp_path}/farm-engine.sock"
