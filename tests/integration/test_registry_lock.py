"""Base image digests resolved through a real registry's HTTP API, then pinned in FROM."""

from __future__ import annotations

import json
import subprocess

from integration.conftest import CREATED_TAGS, build_fixture
from servebuild.lock import lockfile
from servebuild.lock import basedigest, compute
from servebuild.recipe.load import load_recipe
from servebuild.sources.stack import SourceCache
from support import fixture_recipe, make_project, make_upstream

DOCKER = "/usr/bin/docker"


def push(local: str, remote: str) -> str:
    subprocess.run([DOCKER, "tag", local, remote], check=True)
    subprocess.run([DOCKER, "push", remote], check=True, capture_output=True)
    CREATED_TAGS.append(remote)
    digests = json.loads(
        subprocess.run(
            [DOCKER, "image", "inspect", "--format", "{{json .RepoDigests}}", remote],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    return next(d.split("@", 1)[1] for d in digests if d.startswith(remote.rsplit(":", 1)[0]))


def test_lock_resolves_base_digest_and_locked_build_pins_it(engine, base_images, registry, tmp_path):
    remote = f"{registry}/servebuild/debian:bookworm-amd64"
    pushed = push(base_images["amd64"], remote)
    assert basedigest.registry_digest(remote) == pushed

    up = make_upstream(tmp_path)
    recipe = fixture_recipe(up, platforms=["linux/amd64"], bases={"build": {"ref": remote}, "runtime": {"ref": remote}})
    root = make_project(tmp_path, up, recipe)
    loaded = load_recipe("toy", root)
    data = compute.compute_lock(loaded, SourceCache(tmp_path / "cache", recipe="toy"), {}, tmp_path / "w")
    assert data.unresolved == []
    assert data.bases.build.digest == pushed
    lockfile.write_lock(lockfile.lock_path(loaded), data)

    result, _ = build_fixture(
        root, engine, "linux/amd64", "servebuild-test/toy-digest:amd64", tmp_path / "cache", locked=True
    )
    dockerfile = (root / "build/toy/linux-amd64/Dockerfile").read_text()
    assert f"FROM {remote}@{pushed} AS deps" in dockerfile
    assert f"FROM {remote}@{pushed} AS runtime" in dockerfile
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest["bases"]["runtime"]["digest"] == pushed
    labels = manifest["outputs"]["labels"]
    assert labels["org.opencontainers.image.base.digest"] == pushed


def test_unreachable_registry_stays_unresolved(tmp_path):
    entry = compute.resolve_base("127.0.0.1:9/nothing/here:1", None)
    assert entry["resolved"] is False and "registry unreachable" in entry["reason"]
