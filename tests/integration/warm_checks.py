"""The serve-time cache checks run on a real engine image (called by test_engine_images.py while the
image exists): the aot record, the smoke suite's cache checks failing where they must, and `invoke warm`
end to end with a command that compiles with no GPU (no GPU exists in a container here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import tracemalloc
import uuid

import pytest

from servebuild.build.docker import DockerClient
from servebuild.check import smoke
from servebuild.check.warm import WarmRequest, run_warm
from servebuild.errors import HostError, InputError, IntegrityError
from servebuild.render.payload import CACHE_TOOL
from support import REPO_ROOT, copy_recipe_chain

# a JIT path that needs no GPU: SGLang's own module builder under its arch override (what the aot stage does)
CPU_COMPILE = (
    "CUDA_VISIBLE_DEVICES= python -c 'from sglang.jit_kernel.utils.arch import override_jit_cuda_arch as o; "
    "from sglang.jit_kernel.add_constant import _jit_add_constant_module as m; "
    'c = o(9, 0, "a"); c.__enter__(); m(9); m(5)\''
)


def junit_results(out_dir):
    from integration.test_smoke_fixtures import junit

    return junit(out_dir)


def check_aot_record(manifest: dict) -> list[str]:
    """The build manifest lists what the aot stage compiled, with cache keys, for every declared kernel."""
    declared = manifest["aot"]["kernels"]
    built = (manifest["outputs"].get("aot") or {}).get("kernels") or []
    assert [(k["builder"], k["args"]) for k in built] == [(k["builder"], k["args"]) for k in declared], built
    for kernel in built:
        assert kernel["keys"] and kernel["files"] > 0 and kernel["bytes"] > 0, kernel
    return [
        f"{k['jit']} {k['builder']}{tuple(k['args'])}: {k['files']} files, {k['bytes']} B -> {k['keys'][0]}"
        for k in built
    ]


def cache_checks_fail_where_they_must(engine: DockerClient, tag: str, loaded, tmp_path_factory) -> None:
    """SGLANG_DG_CACHE_DIR at SGLang's own default (the image before this check existed: DG_JIT_CACHE_DIR
    set and ignored) and TILELANG_CACHE_DIR at TileLang's default: both fail, naming the variable and
    the paths written outside /cache; and a tvm-ffi cache the seed does not reach: the aot check sees
    the compiles."""
    out = tmp_path_factory.mktemp("smoke-bad-cache")
    code = smoke.test_image(
        engine,
        tag,
        loaded,
        out,
        extra=("-k", "test_cache_path or test_jit_writes or test_aot"),
        env={
            "SGLANG_DG_CACHE_DIR": "/root/.cache/deep_gemm",
            "TILELANG_CACHE_DIR": "/root/.tilelang/cache",
            # the seed lands in /cache/tvm-ffi; the builders now look elsewhere: they compile
            "TVM_FFI_CACHE_DIR": "/cache/tvm-ffi-elsewhere",
        },
    )
    results = junit_results(out)
    assert code != 0
    outcome, message = results["test_cache_path[sglang-deep_gemm]"]
    assert outcome == "failure", results
    assert "DG_JIT_CACHE_DIR after sglang's deep_gemm_wrapper is /root/.cache/deep_gemm" in message, message
    assert "DG_JIT_CACHE_DIR='/cache/deep_gemm'" in message and "SGLANG_DG_CACHE_DIR" in message, message
    outcome, message = results["test_cache_path[tilelang]"]
    assert outcome == "failure" and "/root/.tilelang/cache" in message, message
    outcome, message = results["test_jit_writes_nothing_outside_the_cache_root"]
    assert outcome == "failure" and "outside /cache: /root/.tilelang" in message, message
    assert results["test_cache_path[triton]"][0] == "passed"
    outcome, message = results["test_cache_path[tvm-ffi]"]
    assert outcome == "failure" and "is /cache/tvm-ffi-elsewhere" in message and "TVM_FFI_CACHE_DIR" in message, message
    outcome, message = results["test_aot_kernels_load_from_the_seed_with_no_compile"]
    assert outcome == "failure" and re.search(
        r"_jit_topk_v2_module\(\): [1-9][0-9]* new files \(it compiled\)", message
    ), message


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def warm_end_to_end(engine: DockerClient, tag: str, base_image: str, tmp_path_factory, tags: list) -> dict:
    work = tmp_path_factory.mktemp("warm")
    warm_tag = f"{tag}-warm-{uuid.uuid4().hex[:6]}"
    tags.append(warm_tag)
    # no GPU on this engine: asked for one, warm says so in one line and starts nothing
    if "nvidia" not in (engine.info().get("Runtimes") or {}):
        with pytest.raises(InputError, match="has no NVIDIA runtime: no GPU to warm the caches with; pass --gpus none"):
            run_warm(engine, WarmRequest(image=tag, command="true", tag=warm_tag), work / "gpu")
    first = run_warm(
        engine,
        WarmRequest(image=tag, command=CPU_COMPILE, gpus="none", profile="sglang-native-fp8", tag=warm_tag),
        work / "first",
        echo=lambda *_: None,
    )
    # add_constant<5> is in the image's aot seed: only <9> compiles (its build dir, lock file aside)
    assert list(first.new_files) == ["tvm-ffi"] and first.new_files["tvm-ffi"] >= 2, first.new_files
    labels = engine.image_inspect(warm_tag)["Config"]["Labels"]
    assert labels["io.servebuild.warm.base-image"] == engine.image_id(tag)
    assert labels["io.servebuild.warm.gpu"] == "none" and labels["io.servebuild.warm.profile"] == "sglang-native-fp8"
    assert labels["io.servebuild.manifest.sha256"]  # still the image's own
    layers = lambda ref: engine.image_inspect(ref)["RootFS"]["Layers"]  # noqa: E731
    assert layers(warm_tag)[:-1] == layers(tag) and len(layers(warm_tag)) == len(layers(tag)) + 1
    # the warm image's first start compiles nothing for the same command
    second = run_warm(
        engine,
        WarmRequest(image=warm_tag, command=CPU_COMPILE, gpus="none", check_only=True),
        work / "second",
        echo=lambda *_: None,
    )
    assert second.new_files == {}, second.new_files
    # a cache volume first seeded by one image is refused by another
    volume = f"servebuild-test-warm-{uuid.uuid4().hex[:8]}"
    try:
        run_warm(
            engine,
            WarmRequest(image=tag, command="true", gpus="none", volumes=(f"{volume}:/cache",), check_only=True),
            work / "vol1",
            echo=lambda *_: None,
        )
        with pytest.raises(IntegrityError, match="first seeded by another image"):
            run_warm(
                engine,
                WarmRequest(
                    image=warm_tag, command="true", gpus="none", volumes=(f"{volume}:/cache",), check_only=True
                ),
                work / "vol2",
                echo=lambda *_: None,
            )
    finally:
        subprocess.run(["/usr/bin/docker", "volume", "rm", "-f", volume], capture_output=True)
    # --timeout on this (local) engine: the command is stopped, one line, nothing tagged, the container gone
    late_tag = f"{tag}-warm-late-{uuid.uuid4().hex[:6]}"

    def containers():
        return subprocess.run(
            ["/usr/bin/docker", "ps", "-aq", "--filter", "name=servebuild-warm-"], capture_output=True, text=True
        ).stdout.split()

    before = containers()
    start = time.monotonic()
    with pytest.raises(HostError, match="the command ran past --timeout 2 s and was stopped; nothing was built"):
        run_warm(
            engine,
            WarmRequest(image=tag, command="sleep 40", gpus="none", timeout=2, tag=late_tag),
            work / "late",
            echo=lambda *_: None,
        )
    assert time.monotonic() - start < 30 and engine.image_id(late_tag) is None and containers() == before
    proc = cli("warm", "--image", tag, "--gpus", "none", "--timeout", "2", "--tag", late_tag, "--run", "sleep 40")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--timeout" in proc.stderr, proc.stderr
    assert engine.image_id(late_tag) is None and containers() == before
    # issue 31, point 4: 200 MB of output on the real engine goes to warm.log as it comes; the heap holds
    # a tail (the old run held it all, several times over); the one line carries the last output line
    loud_tag = f"{tag}-warm-loud-{uuid.uuid4().hex[:6]}"
    size = 200_000_000
    tracemalloc.start()
    try:
        with pytest.raises(HostError, match=r"the command exited 4 after \d+ s \(the-last-line\); nothing was built"):
            run_warm(
                engine,
                WarmRequest(
                    image=tag,
                    command=f"head -c {size} /dev/zero | tr '\\0' x; echo; echo the-last-line; exit 4",
                    gpus="none",
                    tag=loud_tag,
                ),
                work / "loud",
                echo=lambda *_: None,
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    assert (work / "loud" / "warm.log").stat().st_size > size and engine.image_id(loud_tag) is None
    # issue 31, point 7: the command replaces the image's cache tool; what it prints is one line, nothing tagged
    for printed in ("[1, 2]", 'json.dumps({"changed": [1]})', '"[" * 100000'):
        hostile_tag = f"{tag}-warm-hostile-{uuid.uuid4().hex[:6]}"
        with pytest.raises(HostError, match=r"the image's cache tool \(servebuild-cache census --since\) printed"):
            run_warm(
                engine,
                WarmRequest(
                    image=tag,
                    command=f"echo 'import json; print({printed})' > {CACHE_TOOL}",
                    gpus="none",
                    tag=hostile_tag,
                ),
                work / "hostile",
                echo=lambda *_: None,
            )
        assert engine.image_id(hostile_tag) is None and containers() == before
    # a layer above the limit: one line, nothing tagged
    small_tag = f"{tag}-warm-small-{uuid.uuid4().hex[:6]}"
    with pytest.raises(InputError, match="above the limit 1000; raise --max-bytes"):
        run_warm(
            engine,
            WarmRequest(image=tag, command=CPU_COMPILE, gpus="none", max_bytes=1000, tag=small_tag),
            work / "small",
            echo=lambda *_: None,
        )
    assert engine.image_id(small_tag) is None
    # through the CLI: an image servebuild did not build, a bad --gpus: one line, exit 2
    proc = cli("warm", "--image", base_image, "--gpus", "none", "--run", "true")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "was not built by servebuild" in proc.stderr
    proc = cli("warm", "--image", tag, "--gpus", "0;1", "--run", "true")
    assert proc.returncode == 2 and "is not all, none or a GPU list" in proc.stderr, proc.stderr
    # bisect's rows count the same: the files a run wrote under /cache
    from servebuild.check import bisect

    code, _, output = bisect.run_in_image(
        engine, tag, bisect.Probe(CPU_COMPILE, timeout_s=600), None, "none", work / "bisect-run.log"
    )
    assert code == 0 and bisect.parse_metrics(output).get("jit_compiled_files") == first.new_files["tvm-ffi"], output[
        -600:
    ]
    record = json.loads((work / "first" / "warm.json").read_text())
    return {
        "warm_new_files": first.new_files,
        "warm_bytes": first.bytes,
        "warm_second_run": second.new_files,
        "warm_layer_files": record["files"],
    }


def unknown_builder_stops_the_build(engine, recipe: str, variant: str, cache, tmp_path_factory, tags: list) -> str:
    """A recipe naming a builder SGLang does not have: the aot stage stops the build in one line naming
    the recipe, the field and what the module has, and nothing is tagged."""
    from integration.conftest import build_fixture
    from servebuild.errors import ServebuildError
    from servebuild.recipe.load import load_recipe

    dest = tmp_path_factory.mktemp("bad-aot")
    loaded = load_recipe(recipe, REPO_ROOT)
    copy_recipe_chain(loaded.chain, dest)
    path = dest / "bad-aot.yaml"
    path.write_text(
        f"name: bad-aot\nextends: {recipe}\naot:\n  kernels:\n"
        "    - {jit: tvm-ffi, builder: 'sglang.jit_kernel.add_constant:_jit_add_constnat_module', args: [5]}\n"
    )
    bad_tag = "servebuild-test/bad-aot:sglang"
    tags.append(bad_tag)
    with pytest.raises(ServebuildError) as err:
        build_fixture(REPO_ROOT, engine, "linux/amd64", bad_tag, cache, recipe=str(path), variant=variant)
    message = str(err.value)
    assert "\n" not in message and err.value.exit_code == 2, message
    assert (
        "recipe bad-aot, aot.kernels[0] (tvm-ffi sglang.jit_kernel.add_constant:_jit_add_constnat_module): "
        "sglang.jit_kernel.add_constant has no builder _jit_add_constnat_module (it has: _jit_add_constant_module)"
        in message
    ), message
    assert engine.image_id(bad_tag) is None
    return message
