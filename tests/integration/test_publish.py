"""Publishing by digest to a real registry (Debian's docker-registry on 127.0.0.1)."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request

import pytest

from integration.conftest import build_fixture
from servebuild import smoke
from servebuild.errors import DockerError, SmokeError
from servebuild.publish import publish, verify_smoke
from servebuild.loading import load_recipe
from support import start_registry

DOCKER = "/usr/bin/docker"


@pytest.fixture(scope="module")
def toy_build(engine, base_images, project, tmp_path_factory):
    result, _ = build_fixture(project, engine, "linux/amd64", "servebuild-test/toy-publish:amd64",
                              tmp_path_factory.mktemp("cache"), build_root=tmp_path_factory.mktemp("builds"))
    return result


def test_publish_needs_a_passing_smoke_verdict_for_this_image(engine, toy_build, project):
    build_dir = toy_build.manifest_path.parent
    with pytest.raises(SmokeError, match="no smoke verdict for this build"):
        verify_smoke(build_dir, toy_build.image_id)
    assert smoke.test_image(engine, toy_build.tag, load_recipe("toy", project), build_dir / "smoke") == 0
    verify_smoke(build_dir, toy_build.image_id)
    with pytest.raises(SmokeError, match="the smoke verdict is for image"):
        verify_smoke(build_dir, "sha256:" + "0" * 64)


def test_publish_by_digest_and_pull_back(engine, toy_build, registry):
    remote = f"{registry}/servebuild/toy:amd64"
    record = publish(engine, toy_build.manifest_path.parent, remote)
    assert record["pinned"] == f"{registry}/servebuild/toy@{record['digest']}"
    manifest = json.loads(toy_build.manifest_path.read_text())
    assert manifest["outputs"]["published"] == [record]
    # the local alias is gone; pulling by digest gives back the very image that was built and tested
    assert engine.image_id(remote) is None
    subprocess.run([DOCKER, "pull", record["pinned"]], check=True, capture_output=True)
    try:
        assert engine.image_id(record["pinned"]) == toy_build.image_id
    finally:
        subprocess.run([DOCKER, "image", "rm", record["pinned"]], capture_output=True)


@pytest.fixture()
def auth_registry(tmp_path):
    subprocess.run(["htpasswd", "-Bbc", str(tmp_path / "htpasswd"), "alice", "s3cret"], check=True, capture_output=True)
    address, proc = start_registry(tmp_path, htpasswd=tmp_path / "htpasswd")
    yield address
    proc.kill()
    proc.wait()


def test_refused_push_publishes_nothing(engine, toy_build, auth_registry):
    remote = f"{auth_registry}/servebuild/toy:amd64"
    with pytest.raises(DockerError) as info:
        publish(engine, toy_build.manifest_path.parent, remote)
    line = str(info.value)
    assert "\n" not in line and "push of" in line and "refused" in line and "no basic auth credentials" in line
    assert engine.image_id(remote) is None  # no local alias left behind
    req = urllib.request.Request(f"http://{auth_registry}/v2/servebuild/toy/tags/list",
                                 headers={"Authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 404  # the repository does not exist: no partial push
    manifest = json.loads(toy_build.manifest_path.read_text())
    assert all(p["ref"] != remote for p in manifest["outputs"].get("published", []))
