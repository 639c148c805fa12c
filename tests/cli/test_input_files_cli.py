"""Hostile input files through the real CLI in a project of its own (issue 19, part 2): a patch over
its limit, a set that pins a package twice, a lock of another version, a recipe linked out of the
project. Each is one line on stderr naming the file, exit 2, no traceback, no build context."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import REPO_ROOT, assert_one_line, copy_real

INVOKE = str(Path(sys.executable).parent / "invoke")


@pytest.fixture
def project(tmp_path):
    """tasks.py and the torch-cu130 and sglang-native-fp8 recipes with what they name, in tmp_path
    (ROOT is the folder of tasks.py, so every file named is this project's)."""
    root = tmp_path / "project"
    copy_real(
        root,
        "tasks.py",
        "recipes/torch-cu130.yaml",
        "recipes/torch-cu130.lock.yaml",
        "recipes/sglang-native-fp8.yaml",
        "recipes/sglang-native-fp8.lock.yaml",
        "constraints/torch-cu130",
        "constraints/sglang",
        "patches",
        "recordings",
    )
    return root


def cli(project, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(project / "cache")}
    return subprocess.run([INVOKE, *args], cwd=project, capture_output=True, text=True, timeout=120, env=env)


def test_the_copied_project_builds_a_dry_run(project):
    proc = cli(project, "render", "--recipe", "torch-cu130", "--platform", "linux/amd64")
    assert proc.returncode == 0 and "FROM " in proc.stdout, proc.stderr


def test_a_patch_over_its_limit_is_one_line_and_leaves_no_build_context(project):
    data = (b"+" + b"x" * 1023 + b"\n") * (9 << 10)
    (project / "patches" / "big.patch").write_bytes(data)
    path = project / "recipes" / "sglang-native-fp8.yaml"
    recipe = yaml.safe_load(path.read_text())
    recipe["engine"]["source"]["patches"].append(
        {"id": "big", "file": "patches/big.patch", "sha256": hashlib.sha256(data).hexdigest()}
    )
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    proc = cli(project, "build", "--dry-run", "--recipe", "sglang-native-fp8", "--platform", "linux/amd64")
    assert_one_line(proc, "patches/big.patch", str(len(data)), str(8 << 20))
    assert not (project / "build").exists() and not (project / "cache" / "tarballs").exists()


def test_a_set_pinning_a_package_twice_is_one_line(project):
    path = project / "constraints" / "torch-cu130" / "py3.12-linux-amd64.txt"
    text = path.read_text()
    path.write_text(text + f"Cuda_Bindings==13.2.1 \\\n    --hash=sha256:{'ab' * 32}\n")
    proc = cli(project, "validate", "--recipe", "torch-cu130")
    assert_one_line(proc, "py3.12-linux-amd64.txt", f"line {text.count(chr(10)) + 1}", "cuda-bindings", "twice")


@pytest.mark.parametrize("value", [2, "1"])
def test_a_lock_of_another_version_is_one_line(project, value):
    path = project / "recipes" / "torch-cu130.lock.yaml"
    lock = yaml.safe_load(path.read_text())
    lock["lock_version"] = value
    path.write_text(yaml.safe_dump(lock))
    proc = cli(project, "build", "--dry-run", "--locked", "--recipe", "torch-cu130", "--platform", "linux/amd64")
    assert_one_line(proc, "recipes/torch-cu130.lock.yaml", "lock_version")
    assert not (project / "build").exists()


def test_a_recipe_linked_out_of_the_project_is_one_line(project, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(project / "recipes" / "torch-cu130.yaml", outside / "torch-cu130.yaml")
    (project / "recipes" / "torch-cu130.yaml").symlink_to(outside / "torch-cu130.yaml")
    assert_one_line(
        cli(project, "validate", "--recipe", "torch-cu130"), "recipes/torch-cu130.yaml", "outside the project"
    )
