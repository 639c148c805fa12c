"""Two builds of one recipe (same platform) at once: the second refuses in one line naming the first's
pid, before it writes anything, and the first's context, log and result are its own.

Two real `invoke build` processes of the toy fixture project. The first's docker *client* is a
stand-in whose `build` waits a few seconds and fails (nothing is built or tagged); every other call
(version, info, image inspect) reaches the real engine, read only. A stand-in, because the point is
to hold a build open for a known time, which a real BuildKit build cannot be asked to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT, fixture_recipe, make_project, make_upstream

SLOW_DOCKER = """#!/bin/sh
if [ "$1" = build ] && [ "$2" != --help ]; then
  echo "#1 [internal] stand-in build: holding the build open"
  sleep {seconds}
  echo "ERROR: stand-in build ends here"
  exit 1
fi
exec {real} "$@"
"""


@pytest.fixture
def project(tmp_path):
    if shutil.which("docker") is None:
        pytest.skip("no docker client")
    up = make_upstream(tmp_path)
    root = make_project(tmp_path, up, fixture_recipe(up, platforms=["linux/amd64"]))
    shutil.copyfile(REPO_ROOT / "tasks.py", root / "tasks.py")
    return root


def start(project: Path, docker: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "SERVEBUILD_CACHE": str(project.parent / "cache"),
        "SERVEBUILD_DOCKER": str(docker),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "-r", str(project), "build", "--recipe", "toy"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_build_of_one_recipe_refuses_while_the_first_runs(project, tmp_path):
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    real = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")  # as servebuild picks
    docker.write_text(SLOW_DOCKER.format(seconds=8, real=real))
    docker.chmod(0o755)
    build_dir = project / "build" / "toy" / "linux-amd64"
    first = start(project, docker)
    progress = first.stderr.readline()  # the build's live progress: the first is inside its build step
    assert "stand-in build: holding the build open" in progress, (progress, first.communicate())
    before = (build_dir / "Dockerfile").read_bytes()
    second = start(project, docker)
    out, err = second.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert second.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (
        f"error: {build_dir}: another build of toy is using this build directory "
        f"(pid {first.pid}); wait for it to end, or stop it"
    ), lines[0]
    assert first.poll() is None, "the first build ended before the second was refused: the test proves nothing"
    assert (build_dir / "Dockerfile").read_bytes() == before
    _, err = first.communicate(timeout=120)
    assert first.returncode == 2 and "stand-in build ends here" in err, err
    log = (build_dir / "build.log").read_text()  # the first's whole log, never truncated by the second
    assert log.startswith("$ ") and "holding the build open" in log and "stand-in build ends here" in log, log
    third = start(project, docker)  # the lock went with the first process
    _, err = third.communicate(timeout=120)
    assert third.returncode == 2 and "stand-in build ends here" in err and "another build" not in err, err
