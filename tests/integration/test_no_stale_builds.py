"""A same-size edit must reach the image (constraints file, local patch, launcher, Dockerfile via
`launch.workdir`, the in-image manifest). BuildKit skips context files whose size and mtime did
not change (moby/buildkit#2592); context files now carry content-derived mtimes, so a rebuild
after `/workspace` -> `/workspacX` and a same-size requirement edit carries both into the image."""

from __future__ import annotations

import hashlib
import json
import subprocess

import yaml

from integration.conftest import build_fixture
from support import fixture_recipe, make_project


def inspect(tag: str, fmt: str) -> str:
    return subprocess.run(
        ["/usr/bin/docker", "image", "inspect", "--format", fmt, tag], capture_output=True, text=True, check=True
    ).stdout.strip()


def cat(tag: str, path: str) -> str:
    return subprocess.run(
        ["/usr/bin/docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", tag, path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_same_size_edits_rebuild_into_the_image(engine, base_images, upstream, tmp_path):
    root = make_project(tmp_path, upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    tag = "servebuild-test/stale:amd64"
    build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    assert inspect(tag, "{{.Config.WorkingDir}}") == "/workspace"
    requirements = (root / "constraints" / "toy.txt").read_text()
    recipe_path = root / "recipes" / "toy.yaml"
    data = yaml.safe_load(recipe_path.read_text())
    data["launch"]["workdir"] = "/workspacX"  # same length
    data["launch"]["profiles"]["toy-serve"]["args"] = ["--port", "30001"]  # same-size launcher edit
    patch = root / "patches" / "toy-version-banner.patch"
    patch_text = patch.read_text()
    edited_patch = patch_text.replace('"patched")', '"pAtched")')  # same size, other installed code
    assert len(edited_patch) == len(patch_text) and edited_patch != patch_text
    patch.write_text(edited_patch)
    data["engine"]["source"]["patches"][2]["sha256"] = hashlib.sha256(edited_patch.encode()).hexdigest()
    recipe_path.write_text(yaml.safe_dump(data, sort_keys=False))
    edited = requirements.replace("# ", "#-", 1)  # a same-size edit of a comment in the hashed set
    assert len(edited) == len(requirements) and edited != requirements
    (root / "constraints" / "toy.txt").write_text(edited)
    result, _ = build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    assert inspect(tag, "{{.Config.WorkingDir}}") == "/workspacX"
    assert cat(tag, "/opt/servebuild/requirements.txt") == edited
    assert "30001" in cat(tag, "/usr/local/bin/toy-serve") and "30000" not in cat(tag, "/usr/local/bin/toy-serve")
    banner = subprocess.run(
        ["/usr/bin/docker", "run", "--rm", "--network", "none", tag], capture_output=True, text=True, check=True
    ).stdout
    assert "pAtched" in banner and "30001" in banner, banner  # the edited patch and launcher run
    inside = json.loads(cat(tag, "/opt/servebuild/manifest.json"))
    assert inside["launch"]["workdir"] == "/workspacX"
    assert inside == {k: v for k, v in json.loads(result.manifest_path.read_text()).items() if k != "outputs"}
