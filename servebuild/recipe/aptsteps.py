"""The Debian packages each apt step of an image installs: one table, read by the renderer (what the
Dockerfile installs) and by the lock (what it pins for each step)."""

from __future__ import annotations

from servebuild.recipe.schema import Recipe

BUILD_APT = ["python3", "python3-venv"]
RUNTIME_APT = ["python3"]
# what a GPU host expects of a server image: an init as PID 1 (signals, zombies) and numactl/libnuma
# (vLLM's NUMA binding runs numactl; both engines' upstream images install it)
SERVER_APT = ["numactl", "tini"]
TOOLCHAIN_APT = ["build-essential", "python3-dev"]  # JIT at serve time: C/C++ compiler and Python.h


def apt_steps(recipe: Recipe) -> dict[str, list[str]]:
    """stage -> the sorted package names its apt step installs."""
    kind = recipe.engine.kind if recipe.engine else None
    jit = bool(kind and kind.serve_time_jit)
    return {
        "build": sorted(set(BUILD_APT + recipe.apt.build)),
        "runtime": sorted(
            set(RUNTIME_APT + recipe.apt.runtime + (TOOLCHAIN_APT if jit else []) + (SERVER_APT if kind else []))
        ),
    }
