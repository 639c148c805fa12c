"""What an image compiles ahead of time (the aot stage) and the tools it carries for its cache root."""

from __future__ import annotations

from pathlib import Path

from servebuild import TOOLS_DIR as TOOLS
from servebuild.recipe.recordings import recorded_kernels
from servebuild.engines.base import CACHE_ROOT
from servebuild.recipe.schema import Recipe
from servebuild.render.toolchain import VENV

SEED = "/opt/servebuild/seed"  # the read-only seed: SEED/cache mirrors /cache, SEED/aot.json says what it holds
# in every image of a kind that compiles while serving: /opt/servebuild/tools/NAME
RUNTIME_TOOLS = {name: TOOLS / name for name in ("servebuild_cache.py", "jit_record.py", "servebuild_files.py")}
CACHE_TOOL = "/opt/servebuild/tools/servebuild_cache.py"
# in every engine image with launch profiles: the bench (tools/servebuild_bench.py and what it reads)
BENCH_TOOLS = {name: TOOLS / name for name in ("servebuild_bench.py", "bench_client.py", "bench_suites.py")}
BENCH_PROMPTS = TOOLS / "bench_prompts"
BENCH_COMMAND = "servebuild-bench"  # /usr/local/bin/servebuild-bench
# a directory no per-variant layer holds, so the launcher layer stays one blob for every variant
BENCH_DIR = "/usr/local/share/servebuild-bench"
# in the venv's site-packages: the JIT recorder, in every process, only when SERVEBUILD_JIT_RECORD is set
RECORD_PTH_NAME = "servebuild-jit-record.pth"
RECORD_PTH = ('import os, sys; os.environ.get("SERVEBUILD_JIT_RECORD") and '
              '(sys.path.append("/opt/servebuild/tools") or __import__("jit_record").install())\n')


def site_packages(recipe: Recipe) -> str:
    return f"{VENV}/lib/python{recipe.python}/site-packages"


def aot_kernels(recipe: Recipe, root: Path) -> list[dict]:
    """The kernels the aot stage builds, each with the recipe field (or recording line) it comes from:
    the recipe's own, then the replayable part of its recordings."""
    declared = [{"where": f"aot.kernels[{i}]", "jit": k.jit, "builder": k.builder, "args": list(k.args)}
                for i, k in enumerate(recipe.aot.kernels)]
    recorded = recorded_kernels(recipe, root)[0] if recipe.aot.recordings else []
    return declared + recorded


def aot_spec(recipe: Recipe, kernels: list[dict], owner: str) -> dict:
    """What aot_build.py reads. `owner`: the recipe whose file declares the aot section, not the one
    built: a recipe that extends it without touching aot shares its aot stage (render/reuse.py)."""
    return {"recipe": owner, "arch_list": recipe.cuda_arch_list, "max_bytes": recipe.aot.max_bytes,
            "kernels": kernels}


def aot_argv() -> list[str]:
    return ["env", "CUDA_VISIBLE_DEVICES=", f"{VENV}/bin/python", "/opt/servebuild/aot/aot_build.py",
            "--spec", "/opt/servebuild/aot/spec.json", "--cache", CACHE_ROOT, "--seed", SEED]


RELEASE_AOT = "/opt/servebuild/release"  # a variant's aot stage: the release's seed and aot-files.json


def aot_reuse_argv(changed) -> list[str]:
    """aot_build for a variant that changes kernel sources `changed` (site paths): only the kernels that
    read one are compiled, the others copied from the release's build (render/reuse.py)."""
    return aot_argv() + ["--reuse-from", RELEASE_AOT] + [a for path in changed for a in ("--changed", path)]
