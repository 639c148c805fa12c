"""Bad input: one line naming file, field and problem; exit code 2; no image tagged.

Each case runs the real CLI (`invoke build`) against the real engine with a tag of its own,
then asserts that tag does not exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import REPO_ROOT
from unit.test_recipe_fields import CASES, write_bad_recipe

# the field cases run at unit level (tests/unit/test_recipe_fields.py); a few go end to end here
CLI_CASES = [c for c in CASES if c[0] in ("unknown-field", "patch-sha256-mismatch", "dspark-below-block-size")]


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(REPO_ROOT), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def tag_exists(tag: str, env: dict | None = None) -> bool:
    """Whether the engine holds `tag`; an engine that does not answer fails the test (its silence
    must not pass for "no image tagged")."""
    proc = subprocess.run(
        ["/usr/bin/docker", "image", "inspect", tag],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    if proc.returncode == 0:
        return True
    if "no such image" in proc.stderr.lower():
        return False
    pytest.fail(f"cannot tell whether {tag} exists: the engine did not answer ({proc.stderr.strip()[:200]})")


def test_the_no_image_check_fails_if_the_engine_does_not_answer():
    with pytest.raises(pytest.fail.Exception, match="the engine did not answer"):
        tag_exists("servebuild-test/never-built:1", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})


def assert_one_line_error(proc, fragments, tag):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not tag_exists(tag)


@pytest.mark.parametrize("case_id,edits,fragments", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_recipe_field_through_the_cli(tmp_path, case_id, edits, fragments):
    recipe = write_bad_recipe(tmp_path, edits)
    tag = f"servebuild-test/bad-{case_id}:latest"
    proc = run_cli("build", "--recipe", str(recipe), "--platform", "linux/arm64", "--tag", tag)
    assert_one_line_error(proc, ["bad.yaml", *fragments], tag)


def write_recipe(dir: Path, name: str, **fields) -> Path:
    path = dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **fields}))
    return path


def test_cyclic_extends(tmp_path):
    write_recipe(tmp_path, "a", extends="b")
    write_recipe(tmp_path, "b", extends="a")
    proc = run_cli("build", "--recipe", str(tmp_path / "a.yaml"), "--tag", "servebuild-test/cyclic:1")
    assert_one_line_error(proc, ["extends", "cyclic extends: a -> b -> a"], "servebuild-test/cyclic:1")


def test_extends_unknown_recipe(tmp_path):
    write_recipe(tmp_path, "a", extends="no-such-parent")
    proc = run_cli("build", "--recipe", str(tmp_path / "a.yaml"), "--tag", "servebuild-test/ext:1")
    assert_one_line_error(proc, ["a.yaml", "extends", "unknown recipe 'no-such-parent'"], "servebuild-test/ext:1")


def test_unknown_recipe_name():
    proc = run_cli("build", "--recipe", "no-such-recipe", "--tag", "servebuild-test/unknown:1")
    assert_one_line_error(
        proc, ["recipes", "unknown recipe 'no-such-recipe'", "sglang-native-fp8"], "servebuild-test/unknown:1"
    )


def test_invalid_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nplatforms: [linux/arm64\n")
    proc = run_cli("build", "--recipe", str(path), "--tag", "servebuild-test/yaml:1")
    assert_one_line_error(proc, ["broken.yaml:", "invalid YAML"], "servebuild-test/yaml:1")


def test_recipe_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    proc = run_cli("build", "--recipe", str(path), "--tag", "servebuild-test/list:1")
    assert_one_line_error(proc, ["list.yaml", "YAML mapping"], "servebuild-test/list:1")


def test_platform_not_in_recipe():
    proc = run_cli("build", "--recipe", "torch-cu130", "--platform", "linux/s390x", "--tag", "servebuild-test/p:1")
    assert_one_line_error(proc, ["--platform", "unknown platform 'linux/s390x'"], "servebuild-test/p:1")


def test_missing_ca_bundle():
    proc = run_cli(
        "build",
        "--recipe",
        "torch-cu130-bookworm",
        "--ca-bundle",
        "/nonexistent/ca.pem",
        "--tag",
        "servebuild-test/ca:1",
    )
    assert_one_line_error(proc, ["--ca-bundle", "/nonexistent/ca.pem"], "servebuild-test/ca:1")


def test_bad_tag():
    proc = run_cli("build", "--recipe", "torch-cu130-bookworm", "--tag", "Bad Tag!")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--tag" in proc.stderr


def test_no_engine_running():
    tag = "servebuild-test/no-engine:1"
    proc = run_cli(
        "build",
        "--recipe",
        "torch-cu130-bookworm",
        "--platform",
        "linux/amd64",
        "--tag",
        tag,
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert_one_line_error(proc, ["engine", "Docker engine not reachable", "start dockerd"], tag)


def test_client_without_buildkit(tmp_path):
    """A docker client whose `build` lacks --secret (no BuildKit) is refused by name."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho 'Usage: docker build [OPTIONS] PATH'\n")
    fake.chmod(0o755)
    tag = "servebuild-test/no-buildkit:1"
    proc = run_cli(
        "build",
        "--recipe",
        "torch-cu130-bookworm",
        "--platform",
        "linux/amd64",
        "--tag",
        tag,
        env={"SERVEBUILD_DOCKER": str(fake)},
    )
    assert_one_line_error(proc, ["no docker client with BuildKit", str(fake)], tag)
