"""What an image compiles ahead of time (the aot stage); its files are rows of render/payload.py."""

from __future__ import annotations

from pathlib import Path

from servebuild.recipe.recordings import recorded_kernels
from servebuild.engines.base import CACHE_ROOT
from servebuild.recipe.schema import Recipe
from servebuild.render.payload import SEED, SERVEBUILD, row
from servebuild.render.toolchain import VENV


def site_packages(recipe: Recipe) -> str:
    return f"{VENV}/lib/python{recipe.python}/site-packages"


def aot_kernels(recipe: Recipe, root: Path) -> list[dict]:
    """The kernels the aot stage builds, each with the recipe field (or recording line) it comes from:
    the recipe's own, then the replayable part of its recordings."""
    declared = [
        {"where": f"aot.kernels[{i}]", "jit": k.jit, "builder": k.builder, "args": list(k.args)}
        for i, k in enumerate(recipe.aot.kernels)
    ]
    recorded = recorded_kernels(recipe, root)[0] if recipe.aot.recordings else []
    return declared + recorded


def aot_spec(recipe: Recipe, kernels: list[dict], owner: str) -> dict:
    """What aot_build.py reads. `owner`: the recipe whose file declares the aot section, not the one
    built: a recipe that extends it without touching aot shares its aot stage (render/reuse.py)."""
    return {"recipe": owner, "arch_list": recipe.cuda_arch_list, "max_bytes": recipe.aot.max_bytes, "kernels": kernels}


def aot_argv() -> list[str]:
    return [
        "env",
        "CUDA_VISIBLE_DEVICES=",
        f"{VENV}/bin/python",
        row("aot/aot_build.py").image,
        "--spec",
        row("aot/spec.json").image,
        "--cache",
        CACHE_ROOT,
        "--seed",
        SEED,
    ]


RELEASE_AOT = f"{SERVEBUILD}/release"  # a variant's aot stage: the release's seed and aot-files.json


def aot_reuse_argv(changed) -> list[str]:
    """aot_build for a variant that changes kernel sources `changed` (site paths): only the kernels that
    read one are compiled, the others copied from the release's build (render/reuse.py)."""
    return aot_argv() + ["--reuse-from", RELEASE_AOT] + [a for path in changed for a in ("--changed", path)]
