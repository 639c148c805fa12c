"""Isolated A/B images: each variant is a subset of the patch stack; they share every layer they can."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from integration.conftest import build_fixture
from support import fixture_recipe, make_project, make_upstream, own_cache_keys

DOCKER = "/usr/bin/docker"
VARIANTS = {
    "release": {"description": "the release, no patches", "patches": []},
    "pr1": {"patches": ["pr-1"]},
    "prs": {"patches": ["pr-1", "pr-2"]},
    "banner-only": {"patches": ["local-version-banner"]},
}
EXPECTED = {
    "release": "hello 5",
    "pr1": "hello 5",
    "prs": "hello, hopper 5",
    "banner-only": "hello 5 version 1.0.0 patched",
}


@pytest.fixture(scope="module")
def variant_images(engine, base_images, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("variants")
    up = make_upstream(tmp)
    root = make_project(
        tmp, up, fixture_recipe(up, platforms=["linux/amd64"], variants=VARIANTS, **own_cache_keys("bsdutils"))
    )
    out = {}
    for name in VARIANTS:
        result, seconds = build_fixture(
            root, engine, "linux/amd64", f"servebuild-test/toy:{name}-amd64", tmp / "cache", variant=name
        )
        out[name] = (result, seconds)
    print("\nvariant build times:", {n: f"{s:.1f}s" for n, (_, s) in out.items()})
    return out


def layers(tag: str) -> list[str]:
    return json.loads(
        subprocess.run(
            [DOCKER, "image", "inspect", "--format", "{{json .RootFS.Layers}}", tag],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_carries_exactly_its_patches(variant_images, name):
    result, _ = variant_images[name]
    out = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", result.tag, "toy-serve", "--port", "5"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert out == EXPECTED[name]
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest["recipe"]["variant"] == name
    assert [p["id"] for p in manifest["engine"]["source"]["patches"]] == VARIANTS[name]["patches"]
    assert manifest["outputs"]["labels"]["io.servebuild.variant"] == name
    assert result.tag == f"servebuild-test/toy:{name}-amd64"


def test_variants_share_every_layer_but_the_engine(variant_images):
    stacks = {name: layers(result.tag) for name, (result, _) in variant_images.items()}
    first = stacks["release"]
    for name, stack in stacks.items():
        assert len(stack) == len(first)
        # base + apt layers are the same blobs; the venv (engine) layer and what follows differ
        assert stack[:2] == first[:2], name
    differing = {name: sum(a != b for a, b in zip(first, stack)) for name, stack in stacks.items()}
    assert differing["release"] == 0
    assert all(0 < d <= 3 for n, d in differing.items() if n != "release"), differing


SIZE = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def context_sent(log: str) -> tuple[str, float]:
    """The context folder a build named (the last word of its command line) and the bytes BuildKit
    says it was sent of it."""
    folder = log.splitlines()[0].split()[-1]
    sent = re.findall(r"transferring context: ([0-9.]+)(B|kB|MB|GB)", log)
    assert sent, log[:2000]
    number, unit = sent[-1]
    return folder, float(number) * SIZE[unit]


def test_variants_built_one_after_another_send_only_what_they_change(variant_images):
    """One context folder per recipe and platform: BuildKit diffs it against what it was sent before
    under that path, so the first variant sends the whole context and each later one less."""
    sent = {name: context_sent(result.log_path.read_text()) for name, (result, _) in variant_images.items()}
    folders = {folder for folder, _ in sent.values()}
    assert len(folders) == 1 and folders.pop().endswith("/build/toy/_context/linux-amd64/0"), sent
    first, *later = [size for _, size in sent.values()]
    assert all(size < first for size in later), sent
