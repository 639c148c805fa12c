"""`invoke rebuild --check REF` (issue 20): the fixture recipe, built on its own base image and published
to a real registry (Debian's docker-registry, plain HTTP on 127.0.0.1), is rebuilt from the project with
--no-cache and compared layer by layer. It passes as published, and fails (exit 1) naming the layer and
the paths inside it when a launch profile is edited after publishing (a same-size edit), when the base
image is rebuilt differently, and when the registry's blob is swapped on disk. Nothing is faked.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from integration.conftest import HOST_CA, build_fixture
from layer_registry import REPO as LAYER_REPO, LayerRegistry, gzip_bomb, labels, layer
from servebuild.cli import release as cli_release
from support import fixture_recipe, make_project, make_upstream, start_registry

DOCKER = "/usr/bin/docker"
BASE = "servebuild-test/rebuild-base:amd64"
TAG = "servebuild-test/rebuild-toy:amd64"
REPO = "servebuild-test/rebuild"


def make_base(marker: str) -> str:
    """The debian base plus one file, a base of the test's own (a rebuild of it can differ)."""
    proc = subprocess.run(
        [DOCKER, "build", "-q", "-t", BASE, "-"],
        check=True,
        capture_output=True,
        text=True,
        input=f"FROM servebuild/debian:bookworm-amd64\nRUN echo {marker} > /etc/servebuild-marker "
        f"&& touch -d @946684800 /etc/servebuild-marker /etc\n",
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def published(engine, base_images, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rebuild")
    first = make_base("first")
    up = make_upstream(tmp)
    recipe = fixture_recipe(up, platforms=["linux/amd64"])
    recipe["bases"] = {
        "build": {"ref": "servebuild-test/rebuild-base:{arch}"},
        "runtime": {"ref": "servebuild-test/rebuild-base:{arch}"},
    }
    root = make_project(tmp, up, recipe)
    build_fixture(root, engine, "linux/amd64", TAG, tmp / "cache")
    (tmp / "registry").mkdir()
    address, proc = start_registry(tmp / "registry")
    try:
        cli_release.publish(
            root,
            cli_release.PublishArgs(
                recipe="toy", registry=address, platform="linux/amd64", repository=REPO, tag="v1", no_verify=True
            ),
        )
        yield root, f"{address}/{REPO}:v1", tmp / "registry" / "data", first
    finally:
        proc.kill()
        proc.wait()
        for ref in (TAG, BASE, "servebuild-rebuild/toy:amd64"):
            subprocess.run([DOCKER, "image", "rm", "-f", ref], capture_output=True)


def check(root: Path, ref: str, capsys) -> tuple[int, str]:
    code = cli_release.rebuild_check(root, ref, "linux/amd64", ca_bundle=str(HOST_CA) if HOST_CA.exists() else None)
    return code, capsys.readouterr().out


def test_a_published_image_rebuilds_identical(published, capsys):
    root, ref, *_ = published
    code, out = check(root, ref, capsys)
    assert code == 0, out
    assert f"rebuilt {ref} linux/amd64: identical (" in out
    rebuilt = root / "build" / "rebuild" / "toy" / "linux-amd64"
    manifest = json.loads((rebuilt / "manifest.json").read_text())
    assert manifest["outputs"]["image_id"] in out  # the rebuild, beside the user's build dir, not over it
    assert (root / "build" / "toy" / "linux-amd64" / "manifest.json").exists()
    # the rebuild is real (--no-cache on the engine that built the published image): every step ran
    # again, only the FROM steps are CACHED; and it gave the same image id, config included
    log = (rebuilt / "build.log").read_text()
    cached = set(re.findall(r"^#(\d+) CACHED$", log, re.M))
    bases = set(re.findall(r"^#(\d+) \[[\w-]+ 1/\d+\] FROM ", log, re.M))
    assert "pip install --require-hashes" in log and cached <= bases, cached - bases
    # the config's times are a fact of the inputs, never the clock (the fixture has no dated input)
    assert json.loads(
        subprocess.run(
            [DOCKER, "image", "inspect", "--format", "{{json .Created}}", manifest["outputs"]["image_id"]],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    ).startswith("2000-01-01T00:00:00")
    assert manifest["outputs"]["created"] == "2000-01-01T00:00:00Z"
    assert manifest["outputs"]["created_from"] == "fixed (no dated input)"
    assert manifest["outputs"]["labels"]["org.opencontainers.image.created"] == "2000-01-01T00:00:00Z"


def test_a_same_size_edit_after_publishing_names_the_layer_and_the_path(published, capsys):
    root, ref, *_ = published
    path = root / "recipes" / "toy.yaml"
    before = path.read_text()
    data = yaml.safe_load(before)
    data["launch"]["profiles"]["toy-serve"]["args"] = ["--port", "30001"]  # was 30000: the same size
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        code, out = check(root, ref, capsys)
    finally:
        path.write_text(before)
    assert code == 1, out
    assert "DIFFERENT" in out and "(RUN cp --preserve=mode,timestamps /mnt/launchers/" in out
    assert re.search(r"usr/local/bin/toy-serve: (mtime \d+ -> \d+, )?content \w+ -> \w+", out), out


def test_a_base_rebuilt_differently_names_its_layer_and_path(published, capsys):
    root, ref, _, first = published
    make_base("other")  # the same size, other bytes
    try:
        code, out = check(root, ref, capsys)
    finally:
        subprocess.run([DOCKER, "tag", first, BASE], check=True)  # the published base again, by id
    assert code == 1, out
    assert "layer 1 (" in out and "etc/servebuild-marker: content " in out


def test_a_swapped_registry_blob_is_named(published, capsys):
    """The registry's copy of the launcher layer replaced on disk by a valid layer of other content:
    the registry serves it under the old digest, and the check names the layer and the path."""
    root, ref, data, _ = published
    blobs = data / "docker" / "registry" / "v2" / "blobs" / "sha256"
    layers = [p for p in blobs.glob("*/*/data") if p.read_bytes()[:2] == b"\x1f\x8b"]
    target = None
    for blob in layers:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob.read_bytes()))) as tar:
            if "usr/local/bin/toy-serve" in tar.getnames():
                target = blob
    assert target is not None, "no launcher layer among the registry's blobs"
    original = target.read_bytes()
    out_tar = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(gzip.decompress(original))) as src,
        tarfile.open(fileobj=out_tar, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src:
            body = src.extractfile(member).read() if member.isfile() else None
            if member.name == "usr/local/bin/toy-serve":
                body = body.replace(b"toyserve", b"evilserv")
            dst.addfile(member, io.BytesIO(body) if body is not None else None)
    target.write_bytes(gzip.compress(out_tar.getvalue()))
    try:
        code, out = check(root, ref, capsys)
    finally:
        target.write_bytes(original)
    assert code == 1, out
    assert "with content hashing to" in out, out
    assert re.search(r"usr/local/bin/toy-serve: (mtime \d+ -> \d+, )?content \w+ -> \w+", out), out


def test_a_tag_that_is_not_there_is_one_line(published, capsys):
    root, ref, *_ = published
    from servebuild.errors import InputError

    with pytest.raises(InputError, match="no such tag"):
        check(root, ref.replace(":v1", ":v2"), capsys)


# -- the CLI against a registry that misbehaves (tests/layer_registry.py); the engine is real (the
# command pings it first) and every case ends before the build, in one line, exit 2 ----------------------


def _bomb(reg_args: dict) -> None:
    reg_args["layers"] = [gzip_bomb(100 << 20)]  # ~100 KiB inflating to 100 MiB: past the 64 MiB floor


def _diff_id(reg_args: dict) -> None:
    reg_args["diff_ids"] = ["sha256:" + "0" * 64]


HOSTILE = {  # case -> (how the registry misbehaves, environment, words of the one line, seconds at most)
    "gzip-bomb": (_bomb, {}, "inflates past 67108864 bytes", 60),
    "trickled-layer": (
        lambda a: a.update(trickle=(0,), trickle_s=0.2),
        {"SERVEBUILD_REGISTRY_DEADLINE": "3"},
        "reading layer 0 (sha256:",
        20,
    ),
    "many-slow-layers": (
        lambda a: a.update(layers=[layer({f"etc/{i}": b"x"}) for i in range(4)], trickle=(0, 1, 2, 3), trickle_s=0.02),
        {"SERVEBUILD_REBUILD_DEADLINE": "3"},
        "SERVEBUILD_REBUILD_DEADLINE",
        20,
    ),
    "diff-id-lie": (_diff_id, {}, "hashes to its digest but uncompresses to", 30),
    "two-entries": (lambda a: a.update(entries=2), {}, "its index lists 2 images for linux/amd64", 30),
    "path-label": (lambda a: a.update(labels=labels("recipes/toy.yaml")), {}, "is not a recipe name", 30),
    "unknown-recipe": (lambda a: a.update(labels=labels("no-such-recipe")), {}, "unknown recipe 'no-such-recipe'", 30),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_misbehaving_registry_is_one_line_exit_2_before_any_build(engine, project, monkeypatch, case):
    from invoke import Exit
    from servebuild.cli.front import one_line_errors

    misbehave, env, words, seconds = HOSTILE[case]
    args = {"layers": [layer({"etc/x": b"x"})], "labels": labels("toy")}
    misbehave(args)
    reg = LayerRegistry(**args)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    start = time.monotonic()
    try:
        with pytest.raises(Exit) as exit_:
            one_line_errors(cli_release.rebuild_check)(project, f"{reg.address}/{LAYER_REPO}:v1", "linux/amd64")
    finally:
        reg.stop()
    took = time.monotonic() - start
    message = str(exit_.value.message)
    assert exit_.value.code == 2 and message.startswith("error: ") and "\n" not in message, message
    assert words in message and took < seconds, (took, message)
    if case in ("path-label", "unknown-recipe", "two-entries"):
        assert reg.layer_gets() == [], reg.gets
    assert not (project / "build" / "rebuild").exists()  # nothing was built
