"""Integration fixtures: the real Docker engine (BuildKit), bootstrapped bases, fixture builds."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from servebuild.build import bases, run
from servebuild.plan import make
from servebuild.build.docker import DockerClient, Endpoint
from servebuild.sources.stack import default_cache_dir
from servebuild.cli.options import MAIN_RECIPE
from servebuild.lock.lockfile import load_lock_file, lock_display
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT, EngineSnapshot, make_project, make_upstream, start_registry

HOST_CA = Path(os.environ.get("SERVEBUILD_TEST_CA", "/etc/ssl/certs/ca-certificates.crt"))
CREATED_TAGS: list[str] = []
SNAPSHOT: "EngineSnapshot | None" = None  # taken when the run starts


@pytest.fixture(scope="session")
def engine() -> DockerClient:
    """The real engine; its absence is a failure here, never a skip. SERVEBUILD_TEST_BUILD_NETWORK names
    the network its builds' RUN steps use (scripts/run_tests.py: `host` on its second dockerd, which
    has no iptables rules of its own)."""
    network = os.environ.get("SERVEBUILD_TEST_BUILD_NETWORK")
    if network:
        return DockerClient(
            endpoint=Endpoint(host=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), network=network)
        )
    return DockerClient()


def main_pins(arch: str):
    """The Debian packages the main job's committed lock pins for `arch` (every bookworm base is made from them)."""
    loaded = load_recipe(MAIN_RECIPE, REPO_ROOT)
    return loaded, load_lock_file(loaded).debian[f"linux/{arch}"]


def _base_image(engine, arch: str) -> str:
    tag = bases.default_tag("bookworm", arch)
    loaded, pins = main_pins(arch)
    if engine.image_id(tag) is None or bases.base_key(engine.image_inspect(tag)) != pins.base_key():
        bases.bootstrap_base(engine, pins, arch, tag, default_cache_dir(), loaded.recipe.name, lock_display(loaded))
    return tag


@pytest.fixture(scope="session")
def base_images(engine) -> dict[str, str]:
    """Debian bookworm minbase images for both arches, bootstrapped from the main job's lock (no registry);
    a base made from other pins (or by an older servebuild) is made again."""
    return {arch: _base_image(engine, arch) for arch in ("amd64", "arm64")}


@pytest.fixture(scope="session")
def amd64_base(engine) -> str:
    """The amd64 base alone (the engine images are amd64: no arm64 bootstrap under QEMU for them)."""
    return _base_image(engine, "amd64")


@pytest.fixture(scope="session")
def arm64_base(engine) -> str:
    """The arm64 base alone, bootstrapped from the lock's arm64 packages (mmdebstrap's second stage under
    QEMU on an x86_64 host): the arm64 digest check's, on the engine-image run's engine."""
    return _base_image(engine, "arm64")


@pytest.fixture(scope="session")
def upstream(tmp_path_factory):
    return make_upstream(tmp_path_factory.mktemp("upstream"))


@pytest.fixture(scope="session")
def project(tmp_path_factory, upstream) -> Path:
    return make_project(tmp_path_factory.mktemp("fixture"), upstream)


def build_fixture(
    root: Path, engine: DockerClient, platform: str, tag: str, cache_dir: Path, recipe: str = "toy", **opts
):
    opts.setdefault("ca_bundle", HOST_CA if HOST_CA.exists() else None)
    options = make.BuildOptions(platform=platform, tag=tag, cache_dir=cache_dir, echo=False, **opts)
    plan = make.make_plan(root, recipe, options)
    start = time.monotonic()
    result = run.build(plan, engine)
    CREATED_TAGS.append(tag)
    if SNAPSHOT is not None:
        SNAPSHOT.remember(result.image_id)
    return result, time.monotonic() - start


def drop_now(tags: list[str]) -> None:
    """Remove these many-GB images and the layer records this run made now, not at the end of the run
    (only records made since the run started: the user's own cache stays; download caches stay for the
    next engine build, and the end of the run prunes them)."""
    for tag in tags:
        subprocess.run(["/usr/bin/docker", "image", "rm", "-f", tag], capture_output=True)
        if tag in CREATED_TAGS:
            CREATED_TAGS.remove(tag)
    if SNAPSHOT is not None:
        SNAPSHOT.prune_new_cache(layers_only=True)


@pytest.fixture(scope="session")
def fixture_images(engine, base_images, project, tmp_path_factory):
    """The fixture recipe built for amd64 and for arm64 (QEMU on x86_64 hosts), cold then warm."""
    cache = tmp_path_factory.mktemp("source-cache")
    images, timings = {}, {}
    for platform in ("linux/amd64", "linux/arm64"):
        arch = platform.split("/")[1]
        tag = f"servebuild-test/toy:{arch}"
        result, cold = build_fixture(project, engine, platform, tag, cache, no_cache=True)
        _, warm = build_fixture(project, engine, platform, tag, cache)
        images[platform] = result
        timings[platform] = (cold, warm)
    print("\nfixture build times (cold no-cache / warm):", {p: f"{c:.1f}s / {w:.1f}s" for p, (c, w) in timings.items()})
    return images


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """A real registry on 127.0.0.1, plain HTTP, no auth."""
    address, proc = start_registry(tmp_path_factory.mktemp("registry"))
    yield address
    proc.kill()
    proc.wait()


def pytest_sessionstart(session):
    global SNAPSHOT
    SNAPSHOT = EngineSnapshot()


def pytest_sessionfinish(session, exitstatus):
    for tag in CREATED_TAGS:
        subprocess.run(["/usr/bin/docker", "image", "rm", "-f", tag], capture_output=True)
    if SNAPSHOT is None:
        return
    # rebuilds under the same tag leave the older image dangling: remove those the run made
    SNAPSHOT.remove_new_dangling()
    if os.environ.get("SERVEBUILD_TEST_PRUNE") == "1":
        SNAPSHOT.prune_new_cache()
