"""`build --dry-run` through the real CLI with links and FIFOs planted in its build dir: nothing is
written through a link (the link's target, a temp file outside build/, is unchanged), a FIFO does not
hang the build, and each refusal is one line naming the path, exit 2, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT, assert_one_line, fixture_recipe, make_project, make_upstream

PRECIOUS = "root:x:0:0:root:/root:/bin/bash\n"
DRY_RUN = ("build", "--recipe", "toy", "--dry-run")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return make_upstream(tmp_path_factory.mktemp("links-upstream"))


@pytest.fixture
def project(tmp_path, upstream):
    root = make_project(tmp_path, upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    shutil.copyfile(REPO_ROOT / "tasks.py", root / "tasks.py")
    return root


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    return path


def dry_run_dir(project: Path) -> Path:
    path = project / "build" / "toy" / "linux-amd64" / "dry-run"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_cli(project: Path, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(project.parent / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(project), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_dry_run_does_not_write_its_lock_through_a_planted_link(project, victim):
    lock = dry_run_dir(project) / "build.lock"
    lock.symlink_to(victim)
    assert_one_line(run_cli(project, *DRY_RUN), str(lock), "the build lock", "symbolic link")
    assert victim.read_text() == PRECIOUS


def test_a_fifo_at_the_lock_fails_a_dry_run_in_one_line_without_hanging(project):
    lock = dry_run_dir(project) / "build.lock"
    os.mkfifo(lock)
    assert_one_line(run_cli(project, *DRY_RUN), str(lock), "the build lock", "FIFO")


def test_a_dry_run_does_not_write_its_source_placeholder_through_a_planted_link(project, victim):
    placeholder = dry_run_dir(project) / "dry-run-source.tar"
    placeholder.symlink_to(victim)
    proc = run_cli(project, *DRY_RUN)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert victim.read_text() == PRECIOUS
    assert not placeholder.is_symlink() or proc.returncode == 2
