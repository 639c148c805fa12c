"""Build the fixture recipe on the real engine for amd64 and arm64 and check what came out.

The fixture uses the same templates and stages as the real recipes: a bootstrapped base, a
local git upstream with a three-entry patch stack, hash-pinned PyPI wheels, a launch profile.
An image is tagged only after its manifest is written; a base of the wrong architecture is refused.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import uuid

import pytest

from servebuild.build.docker import DockerClient
from servebuild.build.manifest import manifest_sha256
from servebuild.errors import RecipeError
from integration.conftest import HOST_CA, build_fixture
from support import fixture_recipe, make_project

DOCKER = "/usr/bin/docker"
PLATFORMS = {"linux/amd64": ("x86_64", 0x3E), "linux/arm64": ("aarch64", 0xB7)}


def docker(*args: str) -> str:
    return subprocess.run([DOCKER, *args], check=True, capture_output=True, text=True).stdout


def run(tag: str, platform: str, *cmd: str) -> str:
    return docker("run", "--rm", "--network", "none", "--platform", platform, tag, *cmd)


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_manifest_records_inputs_and_outputs(fixture_images, upstream, platform):
    result = fixture_images[platform]
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest["platform"] == platform
    assert manifest["recipe"]["name"] == "toy" and len(manifest["recipe"]["sha256"]) == 64
    source = manifest["engine"]["source"]
    assert source["url"] == upstream.url and source["commit"] == upstream.base
    assert [p["id"] for p in source["patches"]] == ["pr-1", "pr-2", "local-version-banner"]
    assert all(len(p["sha256"]) == 64 and p["python_only"] for p in source["patches"])
    assert source["patches"][0]["files"] == ["toyserve/greeting.py"]
    assert len(source["tarball_sha256"]) == 64
    assert manifest["constraints"]["path"] == "constraints/toy.txt"
    # pip-source compiles: parallelism reaches that step; the version names the patch stack
    assert set(manifest["build_args"]) == {"ENGINE_VERSION", "MAX_JOBS", "NVCC_THREADS"}
    assert manifest["build_args"]["ENGINE_VERSION"] == manifest["engine"]["installed_version"]
    assert manifest["engine"]["installed_version"].startswith("1.0.0+sb3.")
    assert manifest["bases"]["runtime"]["resolved"] == f"servebuild/debian:bookworm-{platform.split('/')[1]}"
    outputs = manifest["outputs"]
    assert outputs["image_id"] == docker("image", "inspect", "--format", "{{.Id}}", result.tag).strip()
    installed = manifest["engine"]["installed_version"]
    assert {"six==1.17.0", "packaging==24.2", f"toyserve=={installed}"} <= set(outputs["packages"])
    # the copy inside the image is the inputs part, byte for byte what the labels summarize
    inside = json.loads(run(result.tag, platform, "cat", "/opt/servebuild/manifest.json"))
    assert inside == {k: v for k, v in manifest.items() if k != "outputs"}
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", result.tag))
    assert labels["io.servebuild.manifest.sha256"] == manifest_sha256(inside)
    assert labels["org.opencontainers.image.revision"] == upstream.base
    assert labels["org.opencontainers.image.source"] == upstream.url
    assert labels["org.opencontainers.image.version"] == installed  # names the patch stack
    runtime_base = manifest["bases"]["runtime"]
    # a local debootstrapped base has no digest in its own repository: the label names its id
    assert runtime_base["digest"] is None
    assert labels["org.opencontainers.image.base.digest"] == runtime_base["id"]
    assert labels["io.servebuild.patches"] == "pr-1,pr-2,local-version-banner"
    assert labels["org.opencontainers.image.created"] == outputs["created"]


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_launch_command_runs_the_patched_server(fixture_images, platform):
    tag = fixture_images[platform].tag
    assert run(tag, platform, "toy-serve", "--port", "8").strip() == "hello, hopper 8 version 1.0.0 patched"
    assert "usage: toyserve" in run(tag, platform, "toy-serve", "--help")
    # the launcher's environment lines, with its final exec swapped for `env`
    show_env = "sed 's/^exec .*/env/' /usr/local/bin/toy-serve | sh"
    assert "TOY_MODE=fast lane" in run(tag, platform, "sh", "-c", show_env).splitlines()
    assert "TOY_MODE=caller" in run(tag, platform, "sh", "-c", "TOY_MODE=caller; export TOY_MODE; " + show_env)
    # the default command is the launch profile
    assert run(tag, platform).strip() == "hello, hopper 30000 version 1.0.0 patched"


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_architecture(fixture_images, platform, tmp_path):
    tag = fixture_images[platform].tag
    machine, elf_machine = PLATFORMS[platform]
    assert run(tag, platform, "uname", "-m").strip() == machine
    assert docker("image", "inspect", "--format", "{{.Architecture}}", tag).strip() == platform.split("/")[1]
    binary = run(tag, platform, "readlink", "-f", "/opt/venv/bin/python").strip()
    container = docker("create", "--platform", platform, tag).strip()
    try:
        docker("cp", f"{container}:{binary}", str(tmp_path / "python"))
    finally:
        docker("rm", "-f", container)
    header = (tmp_path / "python").read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == elf_machine


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_runtime_stage_has_no_compilers_or_sources(fixture_images, platform):
    tag = fixture_images[platform].tag
    out = run(tag, platform, "sh", "-c", "for x in gcc cc git; do command -v $x; done; ls /tmp/src 2>&1; true")
    assert "/gcc" not in out and "/git" not in out and "No such file" in out


def test_ca_secret_is_in_no_layer_or_history(engine, base_images, project, tmp_path):
    """The CA bundle passed as a BuildKit secret must not appear in any layer or history entry."""
    marker = f"servebuild-secret-marker-{uuid.uuid4().hex}"
    bundle = tmp_path / "ca.pem"
    bundle.write_text((HOST_CA.read_text() if HOST_CA.exists() else "") + f"\n# {marker}\n")
    tag = "servebuild-test/toy-secret:amd64"
    result, _ = build_fixture(project, engine, "linux/amd64", tag, tmp_path / "cache", ca_bundle=bundle, no_cache=True)
    # the build did use the secret: pip ran in the step that mounts it
    log = result.log_path.read_text()
    assert "--secret id=ca,src=" in log and "Successfully installed" in log
    archive = tmp_path / "image.tar"
    docker("save", "-o", str(archive), tag)
    needle = marker.encode()
    checked = 0
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()
            assert needle not in data, f"secret found in {member.name}"
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=__import__("io").BytesIO(data)) as layer:
                    for entry in layer.getmembers():
                        if entry.isfile():
                            assert needle not in layer.extractfile(entry).read(), entry.name
                            checked += 1
    assert checked > 100  # the layers were really read
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", tag)
    assert marker not in history and "ca.pem" not in history
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() not in json.dumps(
        json.loads(result.manifest_path.read_text())
    )


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_no_layer_holds_a_directory_only_a_copy_up_put_there(engine, fixture_images, platform):
    """Such a directory (the image's /tmp after a step's scratch, dpkg's journal) is in the layer or not
    depending on how the engine takes the diff: the image would be another on another engine."""
    from servebuild.build.copyups import copy_up_only, image_layers

    layers = image_layers(engine, fixture_images[platform].image_id)
    assert len(layers) > 3 and all(layers[1:-1])
    assert copy_up_only(layers) == []


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
