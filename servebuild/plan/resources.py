"""Build resources: MAX_JOBS and NVCC_THREADS from the engine's cores and memory unless the recipe sets them.

Upstream vLLM's GH200 guidance (72 cores, 480 GB) is max_jobs=66, nvcc_threads=2; nvcc's threads
only help when several archs are compiled, so one arch gets one thread and every core a job.
"""

from __future__ import annotations

from servebuild.recipe.schema import BuildResources

GIB = 1 << 30
GIB_PER_COMPILE = 4  # a CUDA translation unit can take 3-4 GiB in nvcc+cicc


def derive(cpus: int, mem_bytes: int, pinned: BuildResources, cuda_arch_list: str = "9.0a") -> dict[str, str]:
    archs = len([a for a in cuda_arch_list.replace("+PTX", "").split(";") if a])
    nvcc_threads = pinned.nvcc_threads or (2 if archs > 1 else 1)
    jobs = max(1, min(cpus - cpus // 12, mem_bytes // (GIB_PER_COMPILE * GIB)))  # 72 cores -> 66
    max_jobs = pinned.max_jobs or jobs
    return {"MAX_JOBS": str(max_jobs), "NVCC_THREADS": str(nvcc_threads)}
