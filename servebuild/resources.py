"""Build resources: MAX_JOBS and NVCC_THREADS from the engine's cores and memory unless the recipe sets them."""

from __future__ import annotations

from .recipe import BuildResources

GIB = 1 << 30
GIB_PER_COMPILE = 4  # a CUDA translation unit with several archs can take 3-4 GiB in nvcc+cicc


def derive(cpus: int, mem_bytes: int, pinned: BuildResources) -> dict[str, str]:
    budget = max(1, min(cpus, mem_bytes // (GIB_PER_COMPILE * GIB)))
    nvcc_threads = pinned.nvcc_threads or max(1, min(4, budget // 2))
    max_jobs = pinned.max_jobs or max(1, budget // nvcc_threads)
    return {"MAX_JOBS": str(max_jobs), "NVCC_THREADS": str(nvcc_threads)}
