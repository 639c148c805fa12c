"""Render a resolved recipe into a build context: Dockerfile, requirement sets, source, launchers.

Every value the templates print is prepared here; templates only compose fragments and loop.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Optional, Sequence

import jinja2

from servebuild.sources.archives import TAR_MTIME
from servebuild import PACKAGE_DIR
from servebuild.engines.base import CACHE_ROOT
from servebuild.fsutil import sha256_file, write_json
from servebuild.recipe.load import LoadedRecipe
from servebuild.platforms import arch_of
from servebuild.recipe.aptsteps import apt_steps
from servebuild.recipe.schema import Recipe
from servebuild.render.aot import (BENCH_COMMAND, BENCH_DIR, BENCH_PROMPTS, BENCH_TOOLS, RECORD_PTH,
                                   RECORD_PTH_NAME,
                                   RELEASE_AOT, RUNTIME_TOOLS, TOOLS, aot_argv, aot_kernels, aot_reuse_argv,
                                   aot_spec, site_packages)
from servebuild.errors import InputError
from servebuild.render.reuse import stage_bases
from servebuild.render.settle import SettleError, settle
from servebuild.render.launchers import argcheck_argv, argcheck_files, healthcheck, write_launchers
from servebuild.render.toolchain import VENV, cuda_home, cuda_links, runtime_env

# Dockerfile.j2, stages/, macros/ here; a mode's fragment `modes/NAME.j2` beside its module (servebuild/modes/)
TEMPLATES = PACKAGE_DIR / "render" / "templates"
INIT = "/usr/bin/tini"


def _environment() -> jinja2.Environment:
    """Values are validated before they get here (the first wall); the templates still quote
    what lands in a shell word (`| sh`) and write CMD and ENV values as JSON (the second wall)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(TEMPLATES), str(PACKAGE_DIR)]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    env.policies["json.dumps_kwargs"] = {"sort_keys": True}
    return env


def mode_fragment(engine, platform: str, env: jinja2.Environment, runtime: bool = False,
                  release: bool = False) -> str:
    """The engine's install mode's fragment for the engine stage (or, `runtime`, the runtime stage;
    `release`, the release engine's stage)."""
    mode = engine.mode
    frag = (mode.release_fragment(engine, platform) if release else
            mode.runtime_fragment(engine, platform) if runtime else mode.fragment(engine, platform))
    if frag is None:
        return ""
    template = env.from_string(frag.template) if "\n" in frag.template else env.get_template(frag.template)
    return template.render(engine=engine, platform=platform, **frag.data).strip("\n")


def dockerfile_data(recipe: Recipe, root: Path, platform: str, bases: dict[str, str],
                    pinned_apt: Optional[dict[str, list[str]]] = None,
                    overlay_files: Optional[Sequence[str]] = None) -> dict:
    """Every value the templates print. `pinned_apt`: stage -> the lock's `name:arch=version` of each
    package its apt step installs (the step then installs those .debs from the context, debs/STAGE/).
    `overlay_files`: the files the patch stack changes (render/reuse.py; None: not known)."""
    engine = recipe.engine
    kind = engine.kind if engine else None
    jit = bool(kind and kind.serve_time_jit)
    env = runtime_env(recipe, root, platform)
    cache_dirs = sorted(set(recipe.launch.cache_dirs) | {v for k, v in env.items() if v.startswith("/cache")})
    ports = sorted({kind.profile_port(p) for p in recipe.launch.profiles.values()} - {None}) if kind else []
    default = recipe.launch.default_profile()
    shared = [d for d in cache_dirs if d == CACHE_ROOT or d.startswith(CACHE_ROOT + "/")]
    return {
        "recipe": recipe, "platform": platform, "arch": arch_of(platform), "bases": bases, "engine": engine,
        "build_apt": apt_steps(recipe)["build"],
        "runtime_apt": apt_steps(recipe)["runtime"],
        "pinned_apt": pinned_apt or {},
        "cuda_links": cuda_links(cuda_home(recipe, root, platform)),
        "jit_cuda_home": env.get("CUDA_HOME"),  # set only for kinds that compile while serving
        "python_check": (f"python3 -c \"import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == "
                         f"'{recipe.python}' else 'base image has Python ' + v + ', the recipe wants "
                         f"{recipe.python}')\""),
        "engine_fragment": mode_fragment(engine, platform, _environment()) if engine else "",
        "runtime_fragment": mode_fragment(engine, platform, _environment(), runtime=True) if engine else "",
        "release_fragment": mode_fragment(engine, platform, _environment(), release=True) if engine else "",
        "stage_bases": stage_bases(engine, overlay_files, platform) if engine else {},
        "runtime_env": [f"{k}={json.dumps(v)}" for k, v in sorted(env.items())],
        "make_dirs": " ".join(shlex.quote(d) for d in [recipe.launch.workdir] + cache_dirs),
        "launchers": bool(recipe.launch.profiles),
        # /cache and what is under it: writable by any --user (sticky, as /tmp), so volumes made from it are too
        "shared_dirs": " ".join(shlex.quote(d) for d in ([CACHE_ROOT] if shared and CACHE_ROOT not in shared else [])
                                + shared),
        "profile_check": (argcheck_argv(recipe, "/opt/servebuild/argcheck", "/usr/local/bin",
                                        "/opt/servebuild/profiles-checked.json")
                          if kind and kind.argcheck and recipe.launch.profiles else []),
        "aot": aot_argv() if aot_kernels(recipe, root) else [],
        "aot_reuse": aot_reuse_argv, "release_aot": RELEASE_AOT,
        "runtime_tools": site_packages(recipe) if jit else None,  # where the recorder's .pth goes
        "bench_dir": BENCH_DIR if kind and recipe.launch.profiles else None,  # servebuild-bench and its prompts
        "healthcheck": healthcheck(kind, recipe.launch.profiles.get(default) if default else None),
        "init": INIT if kind else None,
        "ports": ports,
        "cmd": f"/usr/local/bin/{default}" if default else f"{VENV}/bin/python",
    }


def render_dockerfile(recipe: Recipe, recipe_sha256: str, platform: str, bases: dict[str, str],
                      root: Path, pinned_apt: Optional[dict[str, list[str]]] = None,
                      overlay_files: Optional[Sequence[str]] = None) -> str:
    """Pure function of its inputs: the same recipe, platform, bases, pins and patched files give the same bytes."""
    text = _environment().get_template("Dockerfile.j2").render(
        recipe_sha256=recipe_sha256, **dockerfile_data(recipe, root, platform, bases, pinned_apt, overlay_files))
    try:
        return settle("\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n")
    except SettleError as exc:  # a mode's fragment (modes are code: a plugin's, or a test's) that cannot be settled
        mode = recipe.engine.install if recipe.engine else None
        raise InputError(f"the rendered Dockerfile cannot be settled: {exc}",
                         field=f"engine.install ({mode})" if mode else None) from None


def write_context(loaded: LoadedRecipe, platform: str, bases: dict[str, str], context: Path,
                  manifest_inputs: dict, source_tarball: Optional[Path],
                  debs: Optional[dict[str, list[tuple[str, Path]]]] = None,
                  overlay_files: Optional[Sequence[str]] = None) -> Path:
    """Write a fresh build context directory and return it.

    BuildKit skips files whose size and mtime did not change when it transfers a context, so a
    fixed mtime lets a same-size edit build a stale image (moby/buildkit#2592). Each file's mtime is
    derived from its content instead: the same bytes give the same layers, other bytes always transfer.
    """
    recipe = loaded.recipe
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    pinned = {stage: [spec for spec, _ in files] for stage, files in (debs or {}).items()}
    (context / "Dockerfile").write_text(render_dockerfile(recipe, loaded.sha256, platform, bases, loaded.root,
                                                          pinned, overlay_files))
    files = {"requirements.txt": loaded.root / recipe.constraints[platform]}
    files.update({f"wheels/{Path(rel).name}": loaded.root / rel for rel in recipe.wheels})
    if recipe.engine:
        files.update({name: loaded.root / rel
                      for name, rel in recipe.engine.mode.context_files(recipe.engine, platform).items()})
        assert source_tarball is not None, "an engine recipe needs its source tarball"
        files["source.tar"] = source_tarball
    kind = recipe.engine.kind if recipe.engine else None
    if kind is not None and kind.argcheck is not None and recipe.launch.profiles:
        files.update({f"argcheck/{k}": v for k, v in argcheck_files(kind).items()})
    if kind is not None and kind.serve_time_jit:
        files.update({f"launchers/.tools/{k}": v for k, v in RUNTIME_TOOLS.items()})
    if kind is not None and recipe.launch.profiles:
        files.update({f"launchers/.bench/{k}": v for k, v in BENCH_TOOLS.items()})
        files.update({f"launchers/.bench/bench_prompts/{p.name}": p for p in sorted(BENCH_PROMPTS.glob("*.txt"))})
    kernels = aot_kernels(recipe, loaded.root)
    if kernels:
        files["aot/aot_build.py"] = TOOLS / "aot_build.py"
    for stage, pinned_files in sorted((debs or {}).items()):  # checked against the lock's sha256 when fetched
        files.update({f"debs/{stage}/{path.name}": path for _, path in pinned_files if path is not None})
    for name, src in sorted(files.items()):
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, context / name)
    write_launchers(recipe, context / "launchers")
    if kind is not None and recipe.launch.profiles:
        bench = context / "launchers" / BENCH_COMMAND
        bench.write_text(f"#!/bin/sh\n# the seed's benchmarks: servebuild-bench --help\n"
                         f"exec {VENV}/bin/python {BENCH_DIR}/servebuild_bench.py \"$@\"\n")
        bench.chmod(0o755)
    if kind is not None and kind.serve_time_jit:
        (context / "launchers" / ".tools" / RECORD_PTH_NAME).write_text(RECORD_PTH)
    if kernels:
        write_json(context / "aot" / "spec.json", aot_spec(recipe, kernels, aot_owner(loaded)), strict=True)
    write_json(context / "manifest.json", manifest_inputs, strict=True)
    for path in sorted(context.rglob("*"), reverse=True):
        stamp = content_mtime(path) if path.is_file() else TAR_MTIME * 10**9
        # modes as a function of the content too: the builder's umask reaches no layer (0644, 0755 if executable)
        path.chmod(0o755 if path.is_dir() or path.stat().st_mode & 0o100 else 0o644)
        os.utime(path, ns=(stamp, stamp), follow_symlinks=False)
    return context


def aot_owner(loaded: LoadedRecipe) -> str:
    """The name of the recipe whose file declares the aot section (the nearest in the chain): what the
    aot stage's failures name, and all a recipe extending it shares with it (its aot stage is reused)."""
    for rf in loaded.chain:
        if "aot" in rf.data:
            return str(rf.data.get("name") or loaded.recipe.name)
    return loaded.recipe.name


def content_mtime(path: Path) -> int:
    """An mtime in nanoseconds taken from the content's sha256: 28 bits of seconds after 2000-01-01
    and 30 bits of nanoseconds (BuildKit compares both), so two contents of one size that share
    an mtime need a 58-bit hash collision, not a 28-bit one."""
    digest = int(sha256_file(path)[:16], 16)
    return (TAR_MTIME + (digest >> 36)) * 10**9 + (digest & (2**30 - 1)) % 10**9
