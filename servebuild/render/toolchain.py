"""Serve-time JIT toolchain of an engine image: the environment each engine kind needs to compile kernels
while serving (CUDA_HOME from the hashed set's nvcc wheel, links the wheels do not ship, the cache root).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from servebuild.errors import RecipeError
from servebuild.recipe.requirements import parse_pins
from servebuild.recipe.schema import Recipe


VENV = "/opt/venv"


# the NVIDIA container toolkit mounts the driver's compute libraries only when these are set
NVIDIA_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def cuda_home(recipe: Recipe, root: Path, platform: str) -> Optional[str]:
    """The CUDA toolkit the image's requirement set installs as wheels (nvcc under nvidia/cuNN)."""
    pins = parse_pins(root / recipe.constraints[platform])
    nvcc = pins.get("nvidia-cuda-nvcc")
    if nvcc is None:
        return None
    major = re.match(r"\d+", nvcc)
    if major is None:
        raise RecipeError(
            f"nvidia-cuda-nvcc=={nvcc} has no numeric major version",
            file=recipe.constraints[platform],
            field="nvidia-cuda-nvcc",
        )
    return f"{VENV}/lib/python{recipe.python}/site-packages/nvidia/cu{major.group(0)}"


def cuda_links(home: Optional[str]) -> Optional[str]:
    """The pip toolkit ships lib/libcudart.so.13 only; JIT builders link -L$CUDA_HOME/lib64 -lcudart."""
    if home is None:
        return None
    return f"ln -sfn lib {home}/lib64 && ln -sf libcudart.so.13 {home}/lib/libcudart.so"


def runtime_env(recipe: Recipe, root: Path, platform: str) -> dict[str, str]:
    env = {
        "VIRTUAL_ENV": VENV,
        "SERVEBUILD_MANIFEST": "/opt/servebuild/manifest.json",
        "TORCH_CUDA_ARCH_LIST": recipe.cuda_arch_list,
        **NVIDIA_ENV,
    }
    path = f"/opt/engine/site/bin:{VENV}/bin"
    if recipe.engine:
        kind = recipe.engine.kind
        env.update(kind.runtime_env())
        home = cuda_home(recipe, root, platform) if kind.serve_time_jit else None
        if home:
            env["CUDA_HOME"] = home
            path = f"{path}:{home}/bin"
            # Triton (and tokenspeed-triton) default to the ptxas in their wheels (12.8/12.9/13.3):
            # every Triton compile goes through the set's 13.0 ptxas instead
            env["TRITON_PTXAS_PATH"] = env["TRITON_PTXAS_BLACKWELL_PATH"] = f"{home}/bin/ptxas"
            env["LIBRARY_PATH"] = f"{home}/lib64/stubs"  # link-time libcuda (see stages/_libcuda_stub.j2)
    env["PATH"] = f"{path}:$PATH"
    return env
