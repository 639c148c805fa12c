"""The engine client's two ways to one engine, on the real engine: the Docker SDK (info, inspect, tag,
remove, throwaway containers) and the CLI (builds, pushes, ssh endpoints) see the same engine, and an
engine that breaks mid-session is one DockerError line on the SDK path too. A build step that fails is
one line in the failed tool's own words, and nothing is tagged."""

from __future__ import annotations

import json

import docker
import pytest

from servebuild.build.docker import DockerClient
from servebuild.errors import DockerError
from integration.conftest import build_fixture
from support import fixture_recipe, make_project


def test_the_sdk_and_the_cli_see_the_same_engine(engine, base_images):
    cli_info = json.loads(engine.run("info", "--format", "{{json .}}").stdout)
    api_info = engine.info()
    assert engine._api is not None  # the local socket goes through the SDK
    assert (api_info["ID"], api_info["NCPU"], api_info["Architecture"]) == (
        cli_info["ID"],
        cli_info["NCPU"],
        cli_info["Architecture"],
    )
    ref = base_images["amd64"]
    assert engine.image_id(ref) == engine.run("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
    assert engine.image_id("servebuild-test/never-built:none") is None
    # a per-arch base as a recipe writes it is no reference the engine takes: no id (as the CLI said), no error
    assert engine.image_id("servebuild/debian:bookworm-{arch}") is None


def test_tag_untag_and_a_throwaway_container_through_the_sdk(engine, base_images):
    image = engine.image_id(base_images["amd64"])
    engine.tag(image, "servebuild-test/sdk-tag:one")
    try:
        assert engine.image_id("servebuild-test/sdk-tag:one") == image
        out = engine.run_in_image("servebuild-test/sdk-tag:one", "-c", "echo out; echo err >&2", entrypoint="/bin/sh")
        assert out == "out\n"  # stdout only, as `docker run` gives it
        with pytest.raises(DockerError, match="docker run failed: no such thing") as info:
            engine.run_in_image(image, "-c", "echo 'no such thing' >&2; exit 3", entrypoint="/bin/sh")
        assert "\n" not in str(info.value)
    finally:
        engine.remove_image("servebuild-test/sdk-tag:one", force=False)  # the name only
    assert engine.image_id("servebuild-test/sdk-tag:one") is None and engine.image_id(image) == image
    leftover = engine.run("ps", "-a", "--filter", f"ancestor={image}", "--format", "{{.ID}}").stdout.split()
    assert leftover == [], "a throwaway container was left behind"


def test_an_engine_that_goes_away_is_one_line_on_the_sdk_path(tmp_path):
    client = DockerClient()
    client._api = docker.APIClient(base_url=f"unix://{tmp_path / 'gone.sock'}", version="1.41", timeout=5)
    for call in (
        client.info,
        lambda: client.image_inspect("x:1"),
        lambda: client.tag("sha256:" + "0" * 64, "a/b:c"),
        lambda: client.run_in_image("x:1", "true"),
    ):
        with pytest.raises(DockerError) as info:
            call()
        line = str(info.value)
        assert "\n" not in line and "engine" in line and "Traceback" not in line, line
    client.remove_image("x:1")  # absent or unreachable: no error, as `image rm -f` without check


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
