"""A link planted under build/ through the real CLI (issue 45, item 2): `invoke build --dry-run` with the
recipe's build folder a link to a folder outside refuses in one line naming the link, exit 2, and writes
nothing there (it made its build dir, lock and context in the linked folder before)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import REPO_ROOT, assert_one_line, copy_real

INVOKE = str(Path(sys.executable).parent / "invoke")


def test_a_dry_run_writes_nothing_through_a_link_planted_at_the_recipes_build_folder(tmp_path):
    root = tmp_path / "project"
    copy_real(root, "tasks.py", "recipes/torch-cu130.yaml", "recipes/torch-cu130.lock.yaml", "constraints/torch-cu130")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "build").mkdir()
    (root / "build" / "torch-cu130").symlink_to(outside, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [INVOKE, "build", "--dry-run", "--recipe", "torch-cu130", "--platform", "linux/amd64"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert_one_line(proc, "build/torch-cu130", "symbolic link")
    assert list(outside.iterdir()) == []
