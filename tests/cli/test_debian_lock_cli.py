"""A lock's Debian side through the real CLI (issue 45, item 1): an arch holding a line break wrote its own
instruction into the rendered Dockerfile and `render` and `build --dry-run` exited 0; an epoch of -5 or of
31 digits passed. Each is one line on stderr naming the lock file and field, exit 2, no Dockerfile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import REPO_ROOT, assert_one_line, copy_real

INVOKE = str(Path(sys.executable).parent / "invoke")
LOCK = "recipes/torch-cu130-bookworm.lock.yaml"


def _arch(data):
    data["debian"]["linux/amd64"]["apt"]["build"]["packages"][1]["arch"] = "amd64\nRUN touch /pwned"


def _epoch(value):
    def edit(data):
        data["debian"]["linux/amd64"]["release"]["epoch"] = value

    return edit


@pytest.mark.parametrize(
    "edit,field",
    [
        (_arch, "debian.linux/amd64.apt.build.packages.1.arch"),
        (_epoch(-5), "debian.linux/amd64.release.epoch"),
        (_epoch(10**30), "debian.linux/amd64.release.epoch"),
    ],
    ids=["arch-newline", "epoch-negative", "epoch-31-digits"],
)
@pytest.mark.parametrize("command", [["render"], ["build", "--dry-run"]], ids=["render", "dry-run"])
def test_a_bad_debian_field_stops_render_and_dry_run_in_one_line(tmp_path, edit, field, command):
    root = tmp_path / "project"
    copy_real(
        root,
        "tasks.py",
        "recipes/torch-cu130.yaml",
        "recipes/torch-cu130-bookworm.yaml",
        LOCK,
        "constraints/torch-cu130",
    )
    data = yaml.safe_load((root / LOCK).read_text())
    edit(data)
    (root / LOCK).write_text(yaml.safe_dump(data, sort_keys=True, width=120))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [INVOKE, *command, "--recipe", "torch-cu130-bookworm", "--platform", "linux/amd64"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert_one_line(proc, LOCK, field)
    assert "RUN touch /pwned" not in proc.stdout
