"""A same-size edit must reach the image. BuildKit skips context files whose size and mtime did
not change (moby/buildkit#2592); context files now carry content-derived mtimes, so a rebuild
after `/workspace` -> `/workspacX` and a same-size requirement edit carries both into the image."""

from __future__ import annotations

import json
import subprocess

import yaml

from integration.conftest import build_fixture
from support import fixture_recipe, make_project


def inspect(tag: str, fmt: str) -> str:
    return subprocess.run(["/usr/bin/docker", "image", "inspect", "--format", fmt, tag], capture_output=True,
                          text=True, check=True).stdout.strip()


def cat(tag: str, path: str) -> str:
    return subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", tag, path],
                          capture_output=True, text=True, check=True).stdout


def test_same_size_edits_rebuild_into_the_image(engine, base_images, upstream, tmp_path):
    root = make_project(tmp_path, upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    tag = "servebuild-test/stale:amd64"
    build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    assert inspect(tag, "{{.Config.WorkingDir}}") == "/workspace"
    requirements = (root / "constraints" / "toy.txt").read_text()
    recipe_path = root / "recipes" / "toy.yaml"
    data = yaml.safe_load(recipe_path.read_text())
    data["launch"]["workdir"] = "/workspacX"  # same length
    recipe_path.write_text(yaml.safe_dump(data, sort_keys=False))
    edited = requirements.replace("# ", "#-", 1)  # a same-size edit of a comment in the hashed set
    assert len(edited) == len(requirements) and edited != requirements
    (root / "constraints" / "toy.txt").write_text(edited)
    result, _ = build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    assert inspect(tag, "{{.Config.WorkingDir}}") == "/workspacX"
    assert cat(tag, "/opt/servebuild/requirements.txt") == edited
    inside = json.loads(cat(tag, "/opt/servebuild/manifest.json"))
    assert inside["launch"]["workdir"] == "/workspacX"
    assert inside == {k: v for k, v in json.loads(result.manifest_path.read_text()).items() if k != "outputs"}
