"""The smoke suite against images built here: one good image and three broken on purpose.

No GPU exists in CI, so the GPU checks skip here (the suite is run with --require-gpu on a real
H200 separately); everything else is asserted from the suite's JUnit XML, not eyeballed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from integration.conftest import CREATED_TAGS, build_fixture
from servebuild.check import smoke
from servebuild.recipe.load import load_recipe
from support import (
    REPO_ROOT,
    compile_kernel,
    fixture_recipe,
    local_torch_cpu_wheel,
    make_project,
    make_upstream,
    requirement_blocks,
)

DOCKER = "/usr/bin/docker"


def junit(out_dir: Path) -> dict[str, tuple[str, str]]:
    """{test name without host param: (outcome, message)} from the suite's JUnit XML."""
    results = {}
    for case in ET.parse(out_dir / "smoke-junit.xml").getroot().iter("testcase"):
        name = re.sub(r"-?docker://[^\]]*", "", case.get("name")).replace("[]", "")
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome, message = kind, node.get("message", "")
        results[name] = (outcome, message)
    return results


def run_smoke(engine, tag, loaded, out_dir):
    code = smoke.test_image(engine, tag, loaded, out_dir)
    return code, junit(out_dir)


@pytest.fixture(scope="module")
def torch_image(engine, amd64_base, tmp_path_factory):
    """The real torch-cu130-bookworm recipe (the README's main job) for amd64."""
    tag = "servebuild-test/torch-cu130-bookworm:amd64"
    result, seconds = build_fixture(
        REPO_ROOT,
        engine,
        "linux/amd64",
        tag,
        tmp_path_factory.mktemp("c"),
        recipe="torch-cu130-bookworm",
        build_root=tmp_path_factory.mktemp("build"),
    )
    print(f"\ntorch-cu130-bookworm amd64 built in {seconds:.0f}s")
    return tag


def test_good_image_passes(engine, torch_image, tmp_path):
    code, results = run_smoke(engine, torch_image, load_recipe("torch-cu130-bookworm", REPO_ROOT), tmp_path)
    failed = {k: v for k, v in results.items() if v[0] in ("failure", "error")}
    assert code == 0 and not failed, failed
    for check in (
        "test_torch_torchvision_abi",
        "test_cuda_archs[torch]",
        "test_cuda_toolkit_is_13_0",
        "test_version[torch]",
        "test_version[torchvision]",
        "test_labels_agree_with_manifest",
        "test_manifest_matches_recipe",
    ):
        assert results[check][0] == "passed", (check, results.get(check))
    # no GPU in CI: these skip with the reason, never pass vacuously
    assert results["test_gpu_capability_matches_the_recipe_archs"][0] == "skipped"
    assert "no CUDA device visible" in results["test_gpu_capability_matches_the_recipe_archs"][1]


def test_require_gpu_turns_the_skip_into_a_failure(engine, torch_image, tmp_path):
    code = smoke.test_image(
        engine, torch_image, load_recipe("torch-cu130-bookworm", REPO_ROOT), tmp_path, require_gpu=True
    )
    results = junit(tmp_path)
    assert code != 0
    assert results["test_gpu_matmul"][0] in ("failure", "error")
    assert "--require-gpu" in results["test_gpu_matmul"][1]


@pytest.mark.disk_heavy
def test_the_torch_pair_is_one_image_on_two_engines(engine, torch_image, tmp_path):
    """Bit for bit across machines on a real recipe (issues 20 and 29): a second dockerd (its own data
    root, exec root, bridge, and an empty build cache) bootstraps its own base from the lock's Debian
    packages with an empty artifact cache (every .deb downloaded again, mmdebstrap run again), minutes
    after node 1's and with this process's umask at 077, then builds the torch pair with --no-cache
    (every wheel downloaded and installed again): the same base id, the same image id, every layer the
    same, and both are the id committed in recipes/torch-cu130-bookworm.ids.yaml."""
    from integration.conftest import HOST_CA, main_pins
    from integration.test_farm import SecondEngine
    from servebuild.build import bases, committed, run
    from servebuild.lock.lockfile import lock_display
    from servebuild.build.docker import DockerClient, Endpoint
    from servebuild.plan import make

    want = engine.image_id(torch_image)
    loaded, pins = main_pins("amd64")
    base_ref = bases.default_tag("bookworm", "amd64")
    node = SecondEngine()
    try:
        node.start()
        node2 = DockerClient(endpoint=Endpoint(f"unix://{node.sock}", network="host"))
        assert node2.image_id(torch_image) is None and node2.image_id(base_ref) is None  # node 2 has nothing
        old = os.umask(0o077)
        try:
            base_id = bases.bootstrap_base(
                node2, pins, "amd64", base_ref, tmp_path / "cache", loaded.recipe.name, lock_display(loaded)
            )
            options = make.BuildOptions(
                platform="linux/amd64",
                tag=torch_image,
                cache_dir=tmp_path / "cache",
                echo=False,
                no_cache=True,
                build_root=tmp_path / "build",
                ca_bundle=HOST_CA if HOST_CA.exists() else None,
            )
            result = run.build(make.make_plan(REPO_ROOT, "torch-cu130-bookworm", options), node2)
        finally:
            os.umask(old)
        assert base_id == engine.image_id(base_ref), (base_id, engine.image_id(base_ref))
        assert node2.image_inspect(torch_image)["RootFS"] == engine.image_inspect(torch_image)["RootFS"]
        assert result.image_id == want, (result.image_id, want)
        recorded = committed.load_committed(loaded)["linux/amd64"]
        assert (recorded.image, recorded.base) == (want, base_id), (recorded, want, base_id)
    finally:
        node.remove()


@pytest.fixture(scope="module")
def mismatch_project(tmp_path_factory):
    """CPU torch 2.13.0 with torchvision 0.26.0 (built for torch 2.11): a real mismatched pair."""
    tmp = tmp_path_factory.mktemp("mismatch")
    upstream = make_upstream(tmp)
    root = make_project(tmp, upstream)
    wheel = local_torch_cpu_wheel()
    (root / "wheels").mkdir()
    shutil.copyfile(wheel, root / "wheels" / wheel.name)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    deps = requirement_blocks(
        REPO_ROOT / "constraints/torch-cu130/py3.11-linux-amd64.txt",
        {
            "filelock",
            "typing-extensions",
            "setuptools",
            "sympy",
            "mpmath",
            "networkx",
            "jinja2",
            "markupsafe",
            "fsspec",
            "numpy",
            "pillow",
            "torchvision",
        },
    )
    (root / "constraints" / "mismatch.txt").write_text(f"torch==2.13.0+cpu --hash=sha256:{digest}\n" + deps)
    recipe = {
        "name": "mismatch",
        "description": "torch 2.13.0+cpu with torchvision 0.26.0",
        "platforms": ["linux/amd64"],
        "python": "3.11",
        "bases": {
            "build": {"ref": "servebuild/debian:bookworm-{arch}"},
            "runtime": {"ref": "servebuild/debian:bookworm-{arch}"},
        },
        "constraints": {"linux/amd64": "constraints/mismatch.txt"},
        "wheels": [f"wheels/{wheel.name}"],
        "expect": {"imports": ["torch"], "versions": {"torch": "2.13.0"}, "torchvision_pair": True},
    }
    (root / "recipes" / "mismatch.yaml").write_text(yaml.safe_dump(recipe))
    return root


def test_mismatched_pair_fails_the_abi_check(engine, base_images, mismatch_project, tmp_path):
    tag = "servebuild-test/mismatch:amd64"
    build_fixture(mismatch_project, engine, "linux/amd64", tag, tmp_path / "cache", recipe="mismatch")
    code, results = run_smoke(engine, tag, load_recipe("mismatch", mismatch_project), tmp_path / "smoke")
    assert code != 0
    outcome, message = results["test_torch_torchvision_abi"]
    assert outcome == "failure"
    assert "ABI mismatch: torchvision 0.26.0" in message and "torch 2.13.0+cpu" in message
    assert "operator torchvision::nms does not exist" in message
    assert "torchvision==0.28.*" in message  # the fix names the matching release
    assert results["test_import[torch]"][0] == "passed"


def sm_project(tmp: Path, arch: str) -> Path:
    kernel = compile_kernel(tmp / f"kern_{arch}.so", arch)
    upstream = make_upstream(tmp, extra={"toyserve/_kern.so": kernel.read_bytes()})
    recipe = fixture_recipe(
        upstream, platforms=["linux/amd64"], expect={"archs": ["sm_90a", "sm_90"], "arch_modules": ["toyserve"]}
    )
    return make_project(tmp, upstream, recipe)


@pytest.mark.parametrize("arch,passes", [("sm_80", False), ("sm_90a", True)])
def test_extension_arch_check(engine, base_images, tmp_path, arch, passes):
    root = sm_project(tmp_path, arch)
    tag = f"servebuild-test/toy-{arch.replace('_', '')}:amd64"
    build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    code, results = run_smoke(engine, tag, load_recipe("toy", root), tmp_path / "smoke")
    outcome, message = results["test_cuda_archs[toyserve]"]
    if passes:
        assert outcome == "passed" and code == 0, results
    else:
        assert outcome == "failure" and code != 0
        assert "no sm_90a or sm_90 SASS in: _kern.so has sm_80" in message
        assert "TORCH_CUDA_ARCH_LIST=9.0a" in message


def test_tampered_manifest_fails(engine, fixture_images, project, upstream, tmp_path):
    good = fixture_images["linux/amd64"].tag
    name = "servebuild-test-tamper"
    subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
    subprocess.run(
        [
            DOCKER,
            "run",
            "--name",
            name,
            "--entrypoint",
            "sed",
            good,
            "-i",
            f"s/{upstream.base}/{'0' * 40}/",
            "/opt/servebuild/manifest.json",
        ],
        check=True,
    )
    tag = "servebuild-test/toy-tampered:amd64"
    subprocess.run([DOCKER, "commit", name, tag], check=True, capture_output=True)
    subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
    CREATED_TAGS.append(tag)
    code, results = run_smoke(engine, tag, load_recipe("toy", project), tmp_path)
    assert code != 0
    assert results["test_manifest_matches_recipe"][0] == "failure"
    assert f"!= recipe's {upstream.base}" in results["test_manifest_matches_recipe"][1]
    assert results["test_labels_agree_with_manifest"][0] == "failure"
    assert "changed after build" in results["test_labels_agree_with_manifest"][1]
    # the untouched image still passes the same checks
    code, results = run_smoke(engine, good, load_recipe("toy", project), tmp_path / "good")
    assert results["test_manifest_matches_recipe"][0] == "passed"
    assert results["test_labels_agree_with_manifest"][0] == "passed"


@pytest.mark.parametrize(
    "release, words",
    [
        ("13.1", "CUDA 13.1-13.3 miscompile DSV4 top-k"),  # a release the issue names
        ("13.4", "the recipe wants 13.0.x"),  # any other 13.x is not 13.0 either
    ],
)
def test_cuda_toolkit_check_fails_on_an_image_whose_nvcc_is_not_13_0(engine, torch_image, tmp_path, release, words):
    """The torch image with an nvcc that reports another release put first on PATH (a shell script: a real
    13.x toolkit beside the image's 13.0 wheels would be gigabytes): test_cuda_toolkit_is_13_0 must fail."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "nvcc").write_text(f'#!/bin/sh\necho "Cuda compilation tools, release {release}, V{release}.88"\n')
    (context / "nvcc").chmod(0o755)
    (context / "Dockerfile").write_text(f"FROM {torch_image}\nCOPY nvcc /usr/local/bin/nvcc\n")
    tag = f"servebuild-test/torch-nvcc-{release}:amd64"
    subprocess.run([DOCKER, "build", "-q", "-t", tag, str(context)], check=True, capture_output=True)
    CREATED_TAGS.append(tag)
    code, results = run_smoke(engine, tag, load_recipe("torch-cu130-bookworm", REPO_ROOT), tmp_path / "smoke")
    outcome, message = results["test_cuda_toolkit_is_13_0"]
    assert code != 0 and outcome == "failure", (outcome, message)
    assert f"nvcc is {release}" in message and words in message, message
