"""Render a resolved recipe into a build context: Dockerfile, requirement sets, source, launchers.

Every value the templates print is prepared here; templates only compose fragments and loop.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shlex
import shutil
import tarfile
from pathlib import Path
from typing import Optional, Sequence

import jinja2

from servebuild.sources.archives import TAR_MTIME
from servebuild import PACKAGE_DIR, PROJECT_DIR
from servebuild.engines.base import CACHE_ROOT
from servebuild.fsutil import fresh_dir, sha256_file, write_json
from servebuild.recipe.load import LoadedRecipe
from servebuild.platforms import arch_of
from servebuild.recipe.aptsteps import apt_steps
from servebuild.recipe.schema import Recipe
from servebuild.render import payload
from servebuild.render.aot import RELEASE_AOT, aot_argv, aot_kernels, aot_reuse_argv, aot_spec, site_packages
from servebuild.errors import InputError, IntegrityError
from servebuild.modes.base import ENGINE_SITE
from servebuild.render.reuse import KERNELS, PARSER, Overlay, kernel_files, parser_files, stage_bases
from servebuild.render import settle as wrapper
from servebuild.render.settle import SettleError, settle
from servebuild.render.launchers import argcheck_argv, healthcheck, write_launchers
from servebuild.render.toolchain import VENV, cuda_home, cuda_links, runtime_env

# the image definitions: images/Dockerfile.j2, images/stages/, images/macros/ at the top of the checkout;
# a mode's fragment `modes/NAME.j2` beside its module (servebuild/modes/)
TEMPLATES = PROJECT_DIR / "images"
INIT = "/usr/bin/tini"


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """Values are validated before they get here (the first wall); the templates still quote
    what lands in a shell word (`| sh`) and write CMD and ENV values as JSON (the second wall).
    One per process: it keeps each template compiled (three quarters of a render was compiling the same
    templates again), and reloads one whose file changed (jinja2's auto_reload)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(TEMPLATES), str(PACKAGE_DIR)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    env.policies["json.dumps_kwargs"] = {"sort_keys": True}
    return env


def mode_fragment(engine, platform: str, env: jinja2.Environment, runtime: bool = False, release: bool = False) -> str:
    """The engine's install mode's fragment for the engine stage (or, `runtime`, the runtime stage;
    `release`, the release engine's stage)."""
    mode = engine.mode
    frag = (
        mode.release_fragment(engine, platform)
        if release
        else mode.runtime_fragment(engine, platform)
        if runtime
        else mode.fragment(engine, platform)
    )
    if frag is None:
        return ""
    template = env.from_string(frag.template) if "\n" in frag.template else env.get_template(frag.template)
    return template.render(engine=engine, platform=platform, **frag.data).strip("\n")


def dockerfile_data(
    recipe: Recipe,
    root: Path,
    platform: str,
    bases: dict[str, str],
    pinned_apt: Optional[dict[str, list[str]]] = None,
    overlay_files: Optional[Sequence[str]] = None,
) -> dict:
    """Every value the templates print. `pinned_apt`: stage -> the lock's `name:arch=version` of each
    package its apt step installs (the step then installs those .debs from the context, debs/STAGE/).
    `overlay_files`: the files the patch stack changes (render/reuse.py; None: not known)."""
    engine = recipe.engine
    kind = engine.kind if engine else None
    has_aot = bool(aot_kernels(recipe, root))
    carries = payload.carried(recipe, has_aot)  # render/payload.py
    env = runtime_env(recipe, root, platform)
    cache_dirs = sorted(set(recipe.launch.cache_dirs) | {v for k, v in env.items() if v.startswith("/cache")})
    ports = sorted({kind.profile_port(p) for p in recipe.launch.profiles.values()} - {None}) if kind else []
    default = recipe.launch.default_profile()
    shared = [d for d in cache_dirs if d == CACHE_ROOT or d.startswith(CACHE_ROOT + "/")]
    return {
        "recipe": recipe,
        "platform": platform,
        "arch": arch_of(platform),
        "bases": bases,
        "engine": engine,
        "build_apt": apt_steps(recipe)["build"],
        "runtime_apt": apt_steps(recipe)["runtime"],
        "pinned_apt": pinned_apt or {},
        "cuda_links": cuda_links(cuda_home(recipe, root, platform)),
        "jit_cuda_home": env.get("CUDA_HOME"),  # set only for kinds that compile while serving
        "python_check": (
            f"python3 -c \"import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == "
            f"'{recipe.python}' else 'base image has Python ' + v + ', the recipe wants "
            f"{recipe.python}')\""
        ),
        "engine_fragment": mode_fragment(engine, platform, _environment()) if engine else "",
        "runtime_fragment": mode_fragment(engine, platform, _environment(), runtime=True) if engine else "",
        "release_fragment": mode_fragment(engine, platform, _environment(), release=True) if engine else "",
        "stage_bases": stage_bases(engine, overlay_files, platform) if engine else {},
        "parser_base": PARSER,
        "kernel_base": KERNELS,
        "engine_site": ENGINE_SITE,
        "runtime_env": [f"{k}={json.dumps(v)}" for k, v in sorted(env.items())],
        "make_dirs": " ".join(shlex.quote(d) for d in [recipe.launch.workdir] + cache_dirs),
        # /cache and what is under it: writable by any --user (sticky, as /tmp), so volumes made from it are too
        "shared_dirs": " ".join(
            shlex.quote(d) for d in ([CACHE_ROOT] if shared and CACHE_ROOT not in shared else []) + shared
        ),
        "profile_check": (
            argcheck_argv(recipe, payload.ARGCHECK, payload.BIN, payload.CHECK_RECORD) if carries["argcheck"] else []
        ),
        "aot": aot_argv() if carries["aot"] else [],
        "aot_reuse": aot_reuse_argv,
        "release_aot": RELEASE_AOT,
        # the copy steps of servebuild's own files, made from render/payload.py's rows
        "runtime_step": payload.runtime_step(
            recipe, has_aot, site_packages(recipe) if carries["serve-time-jit"] else None
        ),
        "check_copies": payload.check_copies(),
        "check_record": payload.CHECK_RECORD,
        "aot_copy": payload.folder_copy("aot"),
        "healthcheck": healthcheck(kind, recipe.launch.profiles.get(default) if default else None),
        "init": INIT if kind else None,
        "ports": ports,
        "cmd": f"/usr/local/bin/{default}" if default else f"{VENV}/bin/python",
    }


def render_dockerfile(
    recipe: Recipe,
    recipe_sha256: str,
    platform: str,
    bases: dict[str, str],
    root: Path,
    pinned_apt: Optional[dict[str, list[str]]] = None,
    overlay_files: Optional[Sequence[str]] = None,
) -> str:
    """Pure function of its inputs: the same recipe, platform, bases, pins and patched files give the same bytes."""
    text = (
        _environment()
        .get_template("Dockerfile.j2")
        .render(
            recipe_sha256=recipe_sha256, **dockerfile_data(recipe, root, platform, bases, pinned_apt, overlay_files)
        )
    )
    try:
        return settle("\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n")
    except SettleError as exc:  # a mode's fragment (modes are code: a plugin's, or a test's) that cannot be settled
        mode = recipe.engine.install if recipe.engine else None
        raise InputError(
            f"the rendered Dockerfile cannot be settled: {exc}", field=f"engine.install ({mode})" if mode else None
        ) from None


def _tree_members(tarball: Path, names: set[str]) -> dict[str, tuple[tarfile.TarInfo, Optional[bytes]]]:
    """The source tarball's entries `names` (src/TREE_PATH) with their bytes (None for a link), in one
    pass that ends when all are found; one that is missing is an IntegrityError (the sources station
    said the patched tree has it)."""
    found: dict[str, tuple[tarfile.TarInfo, Optional[bytes]]] = {}
    if names:
        with tarfile.open(tarball) as tar:
            for member in tar:
                if member.name in names:
                    found[member.name] = (member, tar.extractfile(member).read() if member.isfile() else None)
                    if len(found) == len(names):
                        break
    missing = sorted(names - set(found))
    if missing:
        raise IntegrityError(f"the prepared source {tarball.name} lacks {missing[0]}")
    return found


def _write_parser_files(
    context: Path, members: dict, wanted: dict[str, str], folder: str = "check-overlay", stage: str = "profile check"
) -> None:
    """FOLDER/SITE_PATH <- the patched tree's file (the tarball's src/TREE_PATH), for each wanted file (the
    check-base stage's check-overlay/, the aot-base stage's kernel-overlay/)."""
    for site, tree in sorted(wanted.items()):
        member, data = members[f"src/{tree}"]
        if data is None:  # a link the stage reads: git and the overlay carry it, the stage's base does not
            raise InputError(
                f"{tree} is not a regular file in the patched tree; the {stage} "
                f"of a variant cannot carry it (remove the link from the patch)"
            )
        target = context / folder / site
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(member.mode & 0o755)


def _overlay_names(overlay: Optional[Overlay]) -> set[str]:
    """The tarball entries of the files the stack changes or adds that the patched tree holds."""
    if overlay is None:
        return set()
    return {f"src/{f}" for f in overlay.changed + overlay.created} - {f"src/{f}" for f in overlay.deleted}


def _write_overlay(context: Path, members: dict, overlay: Optional[Overlay]) -> None:
    """overlay.tar <- the source tarball's entries of the files the stack changes or adds that the
    patched tree holds (their headers and bytes as they are there, sorted by name as there); overlay-deleted.txt
    <- the tree paths the stack deletes. No stack (or a dry run, which prepares none): both empty."""
    with tarfile.open(context / "overlay.tar", "w", format=tarfile.PAX_FORMAT) as out:
        for name in sorted(_overlay_names(overlay)):
            member, data = members[name]
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    (context / "overlay-deleted.txt").write_text("".join(f"{f}\n" for f in (overlay.deleted if overlay else ())))


def write_context(
    loaded: LoadedRecipe,
    platform: str,
    bases: dict[str, str],
    context: Path,
    manifest_inputs: dict,
    source_tarball: Optional[Path],
    debs: Optional[dict[str, list[tuple[str, Path]]]] = None,
    overlay_files: Optional[Sequence[str]] = None,
    digests: Optional[dict[str, str]] = None,
) -> Path:
    """Write a fresh build context directory and return it. `digests`: the sha256 of files already checked
    (the pinned .debs, against the lock, as they were fetched), by their name in the context: not hashed again.

    BuildKit skips files whose size and mtime did not change when it transfers a context, so a
    fixed mtime lets a same-size edit build a stale image (moby/buildkit#2592). Each file's mtime is
    derived from its content instead: the same bytes give the same layers, other bytes always transfer.
    """
    recipe = loaded.recipe
    fresh_dir(context, "the build context", context.parent)  # a link at the slot is refused, never emptied
    pinned = {stage: [spec for spec, _ in files] for stage, files in (debs or {}).items()}
    (context / "Dockerfile").write_text(
        render_dockerfile(recipe, loaded.sha256, platform, bases, loaded.root, pinned, overlay_files)
    )
    files = {"requirements.txt": loaded.root / recipe.constraints[platform]}
    files.update({f"wheels/{Path(rel).name}": loaded.root / rel for rel in recipe.wheels})
    if recipe.engine:
        files.update(
            {name: loaded.root / rel for name, rel in recipe.engine.mode.context_files(recipe.engine, platform).items()}
        )
        assert source_tarball is not None, "an engine recipe needs its source tarball"
        overlay = Overlay.of(overlay_files)
        # the files of the variant its parser reads, for the check-base stage (render/reuse.py)
        decided = stage_bases(recipe.engine, overlay, platform)
        parser = parser_files(recipe.engine, decided, overlay)
        # the kernel sources of the variant, for the aot-base stage (render/reuse.py)
        kernels = kernel_files(recipe.engine, decided, overlay)
        only = recipe.engine.mode.overlay_only
        members = _tree_members(
            source_tarball,
            {f"src/{tree}" for tree in [*parser.values(), *kernels.values()]}
            | (_overlay_names(overlay) if only else set()),
        )
        _write_parser_files(context, members, parser)
        _write_parser_files(context, members, kernels, "kernel-overlay", "aot")
        if only:
            _write_overlay(context, members, overlay)
        else:
            files["source.tar"] = source_tarball
    kernels = aot_kernels(recipe, loaded.root)
    files.update(payload.copied(recipe, bool(kernels)))  # servebuild's own files (render/payload.py)
    for stage, pinned_files in sorted((debs or {}).items()):  # checked against the lock's sha256 when fetched
        files.update({f"debs/{stage}/{path.name}": path for _, path in pinned_files if path is not None})
    for name, src in sorted(files.items()):
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, context / name)
    # the rows the renderer writes
    has = {r.context for r in payload.rows(recipe, bool(kernels))}
    if "launchers/PROFILE" in has:
        write_launchers(recipe, context / payload.row("launchers/PROFILE").context.rpartition("/")[0])
    bench_command = payload.row(f"launchers/{payload.BENCH_COMMAND}")
    if bench_command.context in has:
        bench = context / bench_command.context
        bench.write_text(
            f"#!/bin/sh\n# the seed's benchmarks: servebuild-bench --help\n"
            f'exec {VENV}/bin/python {payload.row("launchers/.bench/servebuild_bench.py").image} "$@"\n'
        )
        bench.chmod(0o755)
    pth = f"launchers/.tools/{payload.RECORD_PTH_NAME}"
    if pth in has:
        (context / pth).write_text(payload.RECORD_PTH)
    if "aot/spec.json" in has:
        write_json(context / "aot/spec.json", aot_spec(recipe, kernels, aot_owner(loaded)), strict=True)
    write_json(context / "manifest.json", manifest_inputs, strict=True)
    # the settle wrapper every step of the Dockerfile sources from a bind mount (render/settle.py)
    (context / wrapper.CONTEXT_DIR).mkdir()
    for name, text in sorted(wrapper.scripts().items()):
        (context / wrapper.CONTEXT_DIR / name).write_text(text)
    known = digests or {}
    for path in sorted(context.rglob("*"), reverse=True):
        rel = path.relative_to(context).as_posix()
        stamp = content_mtime(path, known.get(rel)) if path.is_file() else TAR_MTIME * 10**9
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


def content_mtime(path: Path, sha256: Optional[str] = None) -> int:
    """An mtime in nanoseconds taken from the content's sha256 (`sha256` when it is known already): 28 bits
    of seconds after 2000-01-01 and 30 bits of nanoseconds (BuildKit compares both), so two contents of one
    size that share an mtime need a 58-bit hash collision, not a 28-bit one."""
    digest = int((sha256 or sha256_file(path))[:16], 16)
    return (TAR_MTIME + (digest >> 36)) * 10**9 + (digest & (2**30 - 1)) % 10**9
