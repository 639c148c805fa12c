"""Promises the README makes that an earlier suite did not defend (each was removed in a scratch
copy of the code and the matching test here failed; the closing note of issue 10 says which).

Real parts throughout: the real engine, real git upstreams, real lock files.
"""

from __future__ import annotations

import json

import pytest
import yaml

from integration.conftest import build_fixture
from servebuild.lock import lockfile
from servebuild.lock import compute
from servebuild.sources.stack import SourceCache
from servebuild.build.docker import DockerClient
from servebuild.errors import RecipeError, ServebuildError
from servebuild.recipe.load import load_recipe
from support import fixture_recipe, make_project


class TagSpy(DockerClient):
    """The real client; `tag` first checks that the manifest on disk already names this image."""

    def __init__(self, manifest_path):
        super().__init__()
        self.manifest_path = manifest_path
        self.seen: list[str] = []

    def tag(self, image_id: str, tag: str) -> None:
        manifest = json.loads(self.manifest_path.read_text()) if self.manifest_path.exists() else {}
        self.seen.append(manifest.get("outputs", {}).get("image_id"))
        assert self.seen[-1] == image_id, "tagged before the manifest of this image was written"
        super().tag(image_id, tag)


def test_image_is_tagged_only_after_its_manifest_is_written(base_images, upstream, tmp_path):
    root = make_project(tmp_path, upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    spy = TagSpy(root / "build" / "toy" / "linux-amd64" / "manifest.json")
    tag = "servebuild-test/promise-order:amd64"
    result, _ = build_fixture(root, spy, "linux/amd64", tag, tmp_path / "cache")
    assert spy.seen == [result.image_id] and spy.image_id(tag) == result.image_id


def test_base_of_the_wrong_architecture_is_refused(engine, base_images, upstream, tmp_path):
    recipe = fixture_recipe(upstream, platforms=["linux/amd64"])
    recipe["bases"]["runtime"] = {"ref": base_images["arm64"]}  # an arm64 image for an amd64 build
    root = make_project(tmp_path, upstream, recipe)
    tag = "servebuild-test/promise-arch:amd64"
    with pytest.raises(RecipeError) as info:
        build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    line = str(info.value)
    assert "\n" not in line and "bases.runtime" in line and "is arm64, the build is for linux/amd64" in line
    assert engine.image_id(tag) is None
    assert not (root / "build" / "toy" / "linux-amd64" / "manifest.json").exists()


def _locked_project(upstream, tmp_path):
    recipe = fixture_recipe(upstream, platforms=["linux/amd64"])
    recipe["wheels"] = ["wheels/extra-1.0-py3-none-any.whl"]
    root = make_project(tmp_path, upstream, recipe)
    (root / "wheels").mkdir()
    (root / "wheels" / "extra-1.0-py3-none-any.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    loaded = load_recipe("toy", root)
    lockfile.write_lock(lockfile.lock_path(loaded),
                       compute.compute_lock(loaded, SourceCache(tmp_path / "cache", recipe="toy"), {},
                                            tmp_path / "lockwork"))
    return root


@pytest.mark.parametrize("rel", ["constraints/toy.txt", "wheels/extra-1.0-py3-none-any.whl",
                                 "patches/toy-version-banner.patch"])
def test_locked_refuses_a_changed_named_file(upstream, tmp_path, rel):
    root = _locked_project(upstream, tmp_path)
    lockfile.read_lock(load_recipe("toy", root))  # current: accepted
    path = root / rel
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit, same size
    with pytest.raises((ServebuildError, RecipeError)) as info:
        lockfile.read_lock(load_recipe("toy", root))
    line = str(info.value)
    assert "\n" not in line and rel in line
    if rel.startswith("patches/"):  # a local patch's hash is in the recipe too: refused on loading
        assert "sha256" in line and "engine.source.patches.2" in line
    else:
        assert f"lock is stale: {rel} hashes to" in line and f"files.{rel}" in line


@pytest.mark.parametrize("commit", ["a" * 39, "a" * 41, "A" * 40, "a" * 40 + "\n", " " + "a" * 39])
def test_commit_must_be_exactly_40_lowercase_hex(upstream, tmp_path, commit):
    recipe = fixture_recipe(upstream, platforms=["linux/amd64"])
    recipe["engine"]["source"]["commit"] = commit
    root = make_project(tmp_path, upstream, recipe)
    with pytest.raises(RecipeError) as info:
        load_recipe("toy", root)
    assert "\n" not in str(info.value) and "engine.source.commit" in str(info.value)


def test_the_lock_file_shape_is_checked_before_use(upstream, tmp_path):
    root = _locked_project(upstream, tmp_path)
    loaded = load_recipe("toy", root)
    path = lockfile.lock_path(loaded)
    data = yaml.safe_load(path.read_text())
    data["files"] = ["not", "a", "mapping"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ServebuildError) as info:
        lockfile.read_lock(load_recipe("toy", root))
    assert "\n" not in str(info.value) and "toy.lock.yaml" in str(info.value)


def test_a_failed_step_names_its_real_cause(engine, base_images, upstream, tmp_path):
    """A hash mismatch in the hashed set: the one line carries pip's own words, not BuildKit's
    "executor failed running [...]", and nothing is tagged."""
    root = make_project(tmp_path, upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    req = root / "constraints" / "toy.txt"
    text = req.read_text()
    digest = text.split("--hash=sha256:")[1][:64]
    req.write_text(text.replace(digest, "0" * 64, 1))
    tag = "servebuild-test/promise-cause:amd64"
    from servebuild.errors import DockerError
    with pytest.raises(DockerError) as info:
        build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    line = str(info.value)
    assert "\n" not in line and "DO NOT MATCH THE HASHES" in line and "full log:" in line, line
    assert engine.image_id(tag) is None


def test_failure_cause_prefers_the_tools_own_words():
    from servebuild.build.docker import failure_cause
    tail = ["#10 [deps 3/4] RUN pip install -r /opt/servebuild/requirements.txt",
            "#10 1.2 Looking in indexes: https://pypi.org/simple",
            "#10 5.6 ERROR: Could not find a version that satisfies the requirement torch==2.11.0",
            "#10 5.7 ERROR: No matching distribution found for torch==2.11.0",
            "#10 ERROR: executor failed running [/bin/bash -o pipefail -c pip install -r x]: exit code: 1",
            "------", " > [deps 3/4] RUN pip install -r x:", "------",
            "executor failed running [/bin/bash -o pipefail -c pip install -r x]: exit code: 1"]
    cause = failure_cause(tail)
    assert cause.startswith("ERROR: No matching distribution found for torch==2.11.0"), cause
    assert "in step: /bin/bash -o pipefail -c pip install" in cause
    assert failure_cause(["#5 ERROR: executor failed running [x]: exit code: 2"]).startswith("ERROR: executor")
    # seen on an arm64 build: a concurrent step's header (it quotes our Python check's message) and
    # its CANCELED line come after the failed step; the cause is still the failed step's own words
    tail = ["#10 [deps 4/4] RUN pip install --require-hashes -r /opt/servebuild/requirements.txt",
            "#10 48.96 Could not fetch URL https://pypi.org/simple/aiohappyeyeballs/: There was a problem",
            "#10 48.99 ERROR: Could not find a version that satisfies the requirement aiohappyeyeballs==2.7.1",
            "#10 49.00 ERROR: No matching distribution found for aiohappyeyeballs==2.7.1",
            "#10 ERROR: executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 1",
            "#5 [runtime 2/11] RUN apt-get install -y python3 && python3 -c \"sys.exit('base image has Python ' + v)\"",
            "#5 sha256:d5a4cdb8e118f4d2e9ace106ab9eddd4e031f6d59f0a6f71c351a1cf8467f086",
            "#5 CANCELED", "------", " > [deps 4/4] RUN pip install:", "------",
            "executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 1"]
    cause = failure_cause(tail)
    assert cause.startswith("ERROR: No matching distribution found for aiohappyeyeballs==2.7.1"), cause


def test_publish_refuses_a_manifest_whose_config_is_not_the_built_image(engine, base_images, registry, tmp_path):
    """The push is real (a real registry on 127.0.0.1); the lie is a stand-in: a registry cannot be
    made to serve other bytes under a digest, so a client subclass returns the served manifest with
    another config digest, as a compromised or broken registry or proxy would."""
    import json as _json
    from servebuild.release.publish import PlatformBuild, PublishError, push_platform
    from servebuild.registry.client import RegistryClient

    class Lying(RegistryClient):
        def get_manifest(self, repo, reference):
            body, digest, media = super().get_manifest(repo, reference)
            doc = _json.loads(body)
            doc["config"]["digest"] = "sha256:" + "f" * 64
            return _json.dumps(doc).encode(), digest, media

    image = engine.image_id(base_images["amd64"])
    build = PlatformBuild(platform="linux/amd64", build_dir=tmp_path, manifest={}, image_id=image)
    with pytest.raises(PublishError) as info:
        push_platform(engine, Lying(registry), "servebuild-test/promise-config", "v1", build, None, 0.1)
    line = str(info.value)
    assert "\n" not in line and f"the pushed manifest's config is sha256:{'f' * 64}, the built image is {image}" in line
    assert build.digest is None  # nothing recorded as published
