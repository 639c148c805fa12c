"""Planning a build without an engine: platforms, tags, mirror maps, dry runs, build resources."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from servebuild.plan.config import load_mirror_map
from servebuild.errors import InputError, RecipeError
from servebuild.plan.make import BuildOptions, make_plan
from servebuild.recipe.load import load_recipe
from servebuild.recipe.schema import BuildResources
from servebuild.plan.resources import derive
from support import REPO_ROOT
from unit.minimal_recipe import BASE, merge


def test_mirror_map_rewrites_base_references(tmp_path):
    mirror = tmp_path / "mirrors.yaml"
    mirror.write_text('images:\n  "nvidia/cuda:13.0.2-base-ubuntu24.04": "127.0.0.1:5000/cuda:13.0.2-base"\n')
    plan = make_plan(REPO_ROOT, "torch-cu130", BuildOptions(platform="linux/arm64", mirror_map=mirror))
    assert plan.bases == {"build": "127.0.0.1:5000/cuda:13.0.2-base", "runtime": "127.0.0.1:5000/cuda:13.0.2-base"}


def test_mirror_map_from_environment(monkeypatch):
    monkeypatch.setenv("SERVEBUILD_IMAGE_MIRRORS", "nvidia/cuda:13.0.2-base-ubuntu24.04=local/rt:1")
    plan = make_plan(REPO_ROOT, "torch-cu130", BuildOptions(platform="linux/amd64"))
    assert plan.bases["runtime"] == "local/rt:1"


def test_bad_mirror_map_is_one_line(tmp_path):
    mirror = tmp_path / "mirrors.yaml"
    mirror.write_text("nvidia/cuda: x\n")
    with pytest.raises(RecipeError, match="mirrors.yaml: images: a mirror map needs an `images:` mapping"):
        make_plan(REPO_ROOT, "torch-cu130", BuildOptions(mirror_map=mirror))


def test_arch_placeholder_and_default_tag():
    plan = make_plan(REPO_ROOT, "torch-cu130-bookworm", BuildOptions(platform="linux/arm64"))
    assert plan.bases["build"] == "servebuild/debian:bookworm-arm64"
    assert plan.tag == "servebuild/torch-cu130-bookworm:arm64"
    assert plan.build_dir == REPO_ROOT / "build/torch-cu130-bookworm/linux-arm64"


def test_build_resources_derived_unless_pinned():
    """A 72-core / 480 GB GH200 gets upstream vLLM's guidance (66 jobs); one arch needs one nvcc thread."""
    gib = 1 << 30
    assert derive(72, 480 * gib, BuildResources()) == {"MAX_JOBS": "66", "NVCC_THREADS": "1"}
    assert derive(72, 480 * gib, BuildResources(), "9.0;9.0a") == {"MAX_JOBS": "66", "NVCC_THREADS": "2"}
    assert derive(72, 64 * gib, BuildResources()) == {"MAX_JOBS": "16", "NVCC_THREADS": "1"}  # memory-bound
    assert derive(2, 24 * gib, BuildResources()) == {"MAX_JOBS": "2", "NVCC_THREADS": "1"}
    assert derive(72, 480 * gib, BuildResources(max_jobs=3, nvcc_threads=2)) == {"MAX_JOBS": "3", "NVCC_THREADS": "2"}


def test_dry_run_needs_no_engine(tmp_path):
    """--dry-run renders the context and prints the command; a dead DOCKER_HOST does not matter."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "-r",
            str(REPO_ROOT),
            "build",
            "--recipe",
            "torch-cu130",
            "--platform",
            "linux/arm64",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "would build torch-cu130 for linux/arm64 as servebuild/torch-cu130:arm64" in proc.stdout
    assert "--build-arg MAX_JOBS=" not in proc.stdout  # nothing compiles in a torch-only image
    context = REPO_ROOT / "build/torch-cu130/linux-arm64/dry-run/context"  # never a real build's context
    assert (context / "Dockerfile").read_text() == (
        REPO_ROOT / "tests/golden/torch-cu130.linux-arm64.Dockerfile"
    ).read_text()
    assert (context / "requirements.txt").read_bytes() == (
        REPO_ROOT / "constraints/torch-cu130/py3.12-linux-arm64.txt"
    ).read_bytes()


def test_render_cli_prints_the_golden_dockerfile():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "-r",
            str(REPO_ROOT),
            "render",
            "--recipe",
            "sglang-fused-fp4",
            "--platform",
            "linux/amd64",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (REPO_ROOT / "tests/golden/sglang-fused-fp4.linux-amd64.Dockerfile").read_text()


@pytest.mark.parametrize(
    "text,message",
    [
        (b'images:\n  nvidia/cuda:13.0.2-devel-ubuntu24.04: "x\\nRUN touch /pwned"\n', "is not an image reference"),
        (b"images: {a: [b\n", "invalid YAML"),
        (b"images:\n  a: \xff\n", "not UTF-8"),
    ],
)
def test_hostile_mirror_map_is_one_line(tmp_path, text, message):
    path = tmp_path / "map.yaml"
    path.write_bytes(text)
    with pytest.raises(RecipeError, match=message) as info:
        load_mirror_map(path)
    assert "\n" not in str(info.value)


def test_bootstrap_suite_must_be_a_suite_name(tmp_path):
    from servebuild.build.bases import rootfs_tarball
    from servebuild.lock.lockfile import load_lock_file

    pins = load_lock_file(load_recipe("torch-cu130-bookworm", REPO_ROOT)).debian["linux/amd64"]
    with pytest.raises(InputError, match=r"--suite: '../../x' is not a Debian suite name"):
        rootfs_tarball(pins.model_copy(update={"suite": "../../x"}), "amd64", tmp_path, "r", "r.lock.yaml")
    assert not (tmp_path / "rootfs").exists()


def test_base_digest_is_taken_only_from_the_referenced_repository():
    """A RepoDigest left behind by pushing the base to another registry (as a test does) is not the
    digest of `servebuild/debian:bookworm-amd64`; the label then carries the image id instead."""
    from servebuild.build.run import digest_for_ref

    other = ["127.0.0.1:55653/servebuild/debian@sha256:" + "3" * 64]
    assert digest_for_ref("servebuild/debian:bookworm-amd64", other) is None
    assert digest_for_ref("127.0.0.1:55653/servebuild/debian:x", other) == "sha256:" + "3" * 64
    assert digest_for_ref("docker.io/library/debian:bookworm", ["debian@sha256:" + "a" * 64]) == "sha256:" + "a" * 64
    assert digest_for_ref("debian:bookworm@sha256:" + "b" * 64, other) == "sha256:" + "b" * 64
    assert digest_for_ref("reg:5000/debian:bookworm", ["debian@sha256:" + "a" * 64]) is None


@pytest.mark.parametrize("tag", ["x:1:2", "a:", "a//b", "a..b", "a:--x", "a/b:c/d", "A/b", "a:" + "x" * 200, "-x"])
def test_tags_follow_the_docker_reference_grammar(tag):
    from servebuild.plan.make import BuildOptions, make_plan

    with pytest.raises(InputError, match="not a valid image tag"):
        make_plan(REPO_ROOT, "torch-cu130", BuildOptions(platform="linux/amd64", tag=tag, dry_run=True))


@pytest.mark.parametrize("tag", ["servebuild/x:amd64", "127.0.0.1:5000/a/b:v1.0", "a__b/c-d:x_y"])
def test_good_tags_pass(tag):
    from servebuild.plan.make import BuildOptions, make_plan

    assert make_plan(REPO_ROOT, "torch-cu130", BuildOptions(platform="linux/amd64", tag=tag, dry_run=True)).tag == tag


# -- the default platform, as documented ---------------------------------------------------------------------------


def test_a_recipe_without_platforms_is_for_linux_arm64_as_documented(project, monkeypatch):
    from servebuild.plan import make

    recipe = {
        k: v
        for k, v in merge(BASE, {"constraints": {"linux/arm64": BASE["constraints"]["linux/amd64"]}}).items()
        if k != "platforms"
    }
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(recipe))
    assert load_recipe("hostile", project).recipe.platforms == ["linux/arm64"]
    assert "| `platforms` | `list[str]` | `['linux/arm64']` |" in (REPO_ROOT / "docs/recipe-reference.md").read_text()
    # and a build without --platform on an amd64 host builds the only platform the recipe has
    monkeypatch.setattr(make, "host_platform", lambda: "linux/amd64")
    plan = make.make_plan(project, "hostile", make.BuildOptions(dry_run=True, fetching=False))
    assert plan.platform == "linux/arm64"


@pytest.mark.parametrize(
    "host,expected", [("linux/amd64", "linux/amd64"), ("linux/arm64", "linux/arm64"), ("linux/s390x", "linux/arm64")]
)
def test_without_platform_a_build_is_for_the_host_if_listed_else_the_first_listed(monkeypatch, host, expected):
    from servebuild.plan import make

    monkeypatch.setattr(make, "host_platform", lambda: host)
    plan = make.make_plan(REPO_ROOT, "torch-cu130", make.BuildOptions(dry_run=True, fetching=False))
    assert plan.platform == expected
