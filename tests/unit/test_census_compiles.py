"""The cache tool's census counts compiles, not every file a start touched (issue 32, point 1).

The cases are what the engines were seen to write: tests/fixtures/census_h200.json is what
torch.compile (Inductor) and Triton wrote under one cache root on a real H200 at a warm second and
third start (scripts/census_h200.py); FlashInfer's log and Inductor's in-place rewrites on load are
what a real vLLM second start wrote there (issue 32's table: the old census reported 13 files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servebuild import TOOLS_DIR

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "census_h200.json"
TOOL = str(TOOLS_DIR / "servebuild_cache.py")


def census(cache: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, TOOL, "census", "--cache", str(cache), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SERVEBUILD_MANIFEST": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def put(cache: Path, rel: str, size: int, mtime_ns: int) -> None:
    path = cache / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def since(cache: Path, tmp_path: Path, change) -> dict:
    listing = tmp_path / "listing.json"
    census(cache, "--listing", str(listing))
    change()
    return census(cache, "--since", str(listing))


def test_a_warm_start_on_the_h200_counts_the_kernels_it_compiled_and_not_the_config_inductor_rewrote(tmp_path):
    """Start 2 compiled 7 Triton kernels (56 files) and rewrote one .best_config on load: 56 compiled
    triton files, the rewrite reported apart (the old census counted inductor: 1 as a compile)."""
    start2 = json.loads(FIXTURE.read_text())["starts"][1]
    cache = tmp_path / "cache"
    for rel, (old, _new) in start2["rewritten"].items():
        put(cache, rel, *old)

    def second_start():
        for rel, stamp in start2["new"].items():
            put(cache, rel, *stamp)
        for rel, (_old, new) in start2["rewritten"].items():
            put(cache, rel, *new)

    out = since(cache, tmp_path, second_start)
    assert out["changed"] == {"triton": 56}
    assert sum(rel.endswith(".cubin") for rel in start2["new"]) == 7
    assert out["rewritten"] == {"inductor": 1} and out["logs"] == {}


def test_a_start_that_wrote_nothing_counts_nothing(tmp_path):
    start3 = json.loads(FIXTURE.read_text())["starts"][2]
    assert start3["new"] == {} and start3["rewritten"] == {}
    cache = tmp_path / "cache"
    put(cache, "triton/K/k.cubin", 10, 10**18)
    out = since(cache, tmp_path, lambda: None)
    assert (out["changed"], out["rewritten"], out["logs"]) == ({}, {}, {})


def test_flashinfers_log_and_inductors_entries_rewritten_on_load_are_no_compile(tmp_path):
    """vLLM's warm second start: flashinfer_jit.log grows, Inductor rewrites cache entries in place
    (same size or a byte off, new mtime): 0 compiles."""
    cache = tmp_path / "cache"
    put(cache, "flashinfer/flashinfer_jit.log", 300, 10**18)
    put(cache, "inductor/fxgraph/ab/fabcdef", 4000, 10**18)
    put(cache, "inductor/7j/key.best_config", 207, 10**18)
    put(cache, "vllm/torch_compile_cache/0a1b/rank_0_0/backbone/cache_key_factors.json", 900, 10**18)

    def load():
        put(cache, "flashinfer/flashinfer_jit.log", 420, 2 * 10**18)
        put(cache, "inductor/fxgraph/ab/fabcdef", 4000, 2 * 10**18)
        put(cache, "inductor/7j/key.best_config", 208, 2 * 10**18)
        put(cache, "vllm/torch_compile_cache/0a1b/rank_0_0/backbone/cache_key_factors.json", 900, 2 * 10**18)

    out = since(cache, tmp_path, load)
    assert out["changed"] == {}
    assert out["rewritten"] == {"inductor": 2, "vllm": 1} and out["logs"] == {"flashinfer": 1}


@pytest.mark.parametrize(
    "rel",
    [
        "tvm-ffi/mod/mod.so",
        "flashinfer/cached_ops/sampling/sampling.cuda.o",
        "triton/K/k.cubin",
        "flashinfer/x/k.ptx",
        "x/k.fatbin",
    ],
)
def test_a_module_rebuilt_in_place_is_a_compile(tmp_path, rel):
    """A JIT that rebuilds a module under its old name (tvm-ffi, FlashInfer via ninja) leaves no new
    path: the binary product rewritten is the compile."""
    cache = tmp_path / "cache"
    put(cache, rel, 100, 10**18)
    out = since(cache, tmp_path, lambda: put(cache, rel, 100, 2 * 10**18))
    assert out["changed"] == {rel.split("/")[0]: 1} and out["rewritten"] == {}


def test_new_products_are_counted_per_file_and_kind_and_locks_are_not(tmp_path):
    cache = tmp_path / "cache"
    put(cache, "tvm-ffi/mod/build.ninja", 50, 10**18)

    def run():
        put(cache, "triton/A/k.cubin", 10, 2 * 10**18)
        put(cache, "triton/A/k.json", 10, 2 * 10**18)
        put(cache, "triton/B/k.cubin", 10, 2 * 10**18)
        put(cache, "vllm/torch_compile_cache/h/rank_0_0/backbone/computation_graph.py", 10, 2 * 10**18)
        put(cache, "tvm-ffi/mod/mod.so", 10, 2 * 10**18)
        put(cache, "tvm-ffi/mod/.lock", 0, 2 * 10**18)  # an empty lock file
        put(cache, "flashinfer/sampling.lock", 6, 2 * 10**18)  # a lock holding a pid
        put(cache, "flashinfer/flashinfer_jit.log", 9, 2 * 10**18)

    out = since(cache, tmp_path, run)
    assert out["changed"] == {"triton": 3, "vllm": 1, "tvm-ffi": 1}  # files, per kind
    assert out["logs"] == {"flashinfer": 1} and out["rewritten"] == {}


def test_census_without_since_reports_no_changes(tmp_path):
    cache = tmp_path / "cache"
    put(cache, "triton/A/k.cubin", 10, 10**18)
    out = census(cache)
    assert "changed" not in out and out["kinds"] == {"triton": 1}


def test_a_rotated_log_is_a_log_not_a_compile(tmp_path):
    """A log a logging handler rotated (flashinfer_jit.log.1, new or rewritten) is counted under logs, never
    as a compile or a rewrite."""
    cache = tmp_path / "cache"
    put(cache, "flashinfer/flashinfer_jit.log.1", 300, 10**18)

    def rotate():
        put(cache, "flashinfer/flashinfer_jit.log.1", 420, 2 * 10**18)
        put(cache, "flashinfer/flashinfer_jit.log.2", 300, 2 * 10**18)

    out = since(cache, tmp_path, rotate)
    assert out["changed"] == {} and out["rewritten"] == {} and out["logs"] == {"flashinfer": 2}
