"""What servebuild itself puts into an image, in one table.

Each row: what the file is, where it comes from (a file of servebuild, or written by the renderer), its
path in the build context, its path in the image, the Dockerfile stage that puts it there, and when an
image has it. The renderer writes the context from this table (render/context.py), the profile check of
a built image copies its rows (check/engine_parser.py), and the layering rule is tested against it (every
servebuild module the table puts in an image is one `layers.in_image` holds to the in-image rules).

What a recipe names is not here: its requirement set, wheels, the engine's source and its install mode's
files (`InstallMode.context_files`), the pinned Debian packages. Those are inputs, hashed into the
manifest and the lock, and the recipe says which.

Changing a row's context path or content changes every image that carries it (the committed digests
in recipes/*.ids.yaml say so); the Dockerfile templates copy the context folders named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from servebuild import TOOLS_DIR as TOOLS
from servebuild.engines.base import EngineKind
from servebuild.recipe.schema import Recipe

# in-image places
SERVEBUILD = "/opt/servebuild"
SEED = f"{SERVEBUILD}/seed"  # the read-only seed: SEED/cache mirrors /cache, SEED/aot.json says what it holds
IMAGE_TOOLS = f"{SERVEBUILD}/tools"
CACHE_TOOL = f"{IMAGE_TOOLS}/servebuild_cache.py"
ARGCHECK = f"{SERVEBUILD}/argcheck"
AOT = f"{SERVEBUILD}/aot"
BIN = "/usr/local/bin"
BENCH_COMMAND = "servebuild-bench"  # /usr/local/bin/servebuild-bench
# a directory no per-variant layer holds, so the launcher layer stays one blob for every variant
BENCH_DIR = "/usr/local/share/servebuild-bench"
# in the venv's site-packages: the JIT recorder, in every process, only when SERVEBUILD_JIT_RECORD is set
RECORD_PTH_NAME = "servebuild-jit-record.pth"
RECORD_PTH = (
    'import os, sys; os.environ.get("SERVEBUILD_JIT_RECORD") and '
    '(sys.path.append("/opt/servebuild/tools") or __import__("jit_record").install())\n'
)
SITE_PACKAGES = "$SITE"  # in `image`: the venv's site-packages (render/aot.site_packages)
KIND_HOOK = Path("<the engine kind's argcheck hook>")  # in `source`: EngineKind.argcheck
WRITTEN = None  # in `source`: the renderer writes it


@dataclass(frozen=True)
class Row:
    what: str
    source: Optional[Path]  # a file (or a folder: its *.txt) of servebuild; KIND_HOOK; WRITTEN
    context: str  # its path in the build context
    image: str  # its path in the image
    stage: str  # the Dockerfile stage that puts it there
    when: str  # a key of CONDITIONS


def _kind(recipe: Recipe) -> Optional[EngineKind]:
    return recipe.engine.kind if recipe.engine else None


# when an image has a row: `has_aot` is whether the recipe's aot stage compiles anything (render/aot.aot_kernels)
CONDITIONS: dict[str, Callable[[Recipe, bool], bool]] = {
    "always": lambda recipe, has_aot: True,
    "profiles": lambda recipe, has_aot: bool(recipe.launch.profiles),  # launch profiles: their launchers
    "argcheck": lambda recipe, has_aot: bool(_kind(recipe) and _kind(recipe).argcheck and recipe.launch.profiles),
    "bench": lambda recipe, has_aot: bool(_kind(recipe) and recipe.launch.profiles),  # an engine image with profiles
    "serve-time-jit": lambda recipe, has_aot: bool(_kind(recipe) and _kind(recipe).serve_time_jit),
    "aot": lambda recipe, has_aot: has_aot,
}

PAYLOAD: tuple[Row, ...] = (
    Row("the build manifest", WRITTEN, "manifest.json", f"{SERVEBUILD}/manifest.json", "runtime", "always"),
    Row("a launcher per launch profile", WRITTEN, "launchers/PROFILE", f"{BIN}/PROFILE", "runtime", "profiles"),
    # the profile check: the engine's own parser reads every launcher's argv (only its record reaches the image)
    Row(
        "the profile check",
        TOOLS / "profile_check.py",
        "argcheck/profile_check.py",
        f"{ARGCHECK}/profile_check.py",
        "profile-check",
        "argcheck",
    ),
    Row(
        "its import hook",
        TOOLS / "argcheck_site.py",
        "argcheck/site/sitecustomize.py",
        f"{ARGCHECK}/site/sitecustomize.py",
        "profile-check",
        "argcheck",
    ),
    Row(
        "the engine kind's parser hook",
        KIND_HOOK,
        "argcheck/hook.py",
        f"{ARGCHECK}/hook.py",
        "profile-check",
        "argcheck",
    ),
    # the bench
    Row(
        "the bench",
        TOOLS / "servebuild_bench.py",
        "launchers/.bench/servebuild_bench.py",
        f"{BENCH_DIR}/servebuild_bench.py",
        "runtime",
        "bench",
    ),
    Row(
        "the bench's client",
        TOOLS / "bench_client.py",
        "launchers/.bench/bench_client.py",
        f"{BENCH_DIR}/bench_client.py",
        "runtime",
        "bench",
    ),
    Row(
        "the bench's suites",
        TOOLS / "bench_suites.py",
        "launchers/.bench/bench_suites.py",
        f"{BENCH_DIR}/bench_suites.py",
        "runtime",
        "bench",
    ),
    Row(
        "the bench's prompts",
        TOOLS / "bench_prompts",
        "launchers/.bench/bench_prompts/",
        f"{BENCH_DIR}/bench_prompts/",
        "runtime",
        "bench",
    ),
    Row("the bench command", WRITTEN, f"launchers/{BENCH_COMMAND}", f"{BIN}/{BENCH_COMMAND}", "runtime", "bench"),
    # the cache root's tools, in every image of a kind that compiles while serving
    Row(
        "the cache tool (seed, census, pack)",
        TOOLS / "servebuild_cache.py",
        "launchers/.tools/servebuild_cache.py",
        CACHE_TOOL,
        "runtime",
        "serve-time-jit",
    ),
    Row(
        "the JIT recorder",
        TOOLS / "jit_record.py",
        "launchers/.tools/jit_record.py",
        f"{IMAGE_TOOLS}/jit_record.py",
        "runtime",
        "serve-time-jit",
    ),
    Row(
        "the tools' file helpers",
        TOOLS / "servebuild_files.py",
        "launchers/.tools/servebuild_files.py",
        f"{IMAGE_TOOLS}/servebuild_files.py",
        "runtime",
        "serve-time-jit",
    ),
    Row(
        "what the image is (servebuild_info.py: recipe, variant, tree, patches, profiles, seed)",
        TOOLS / "servebuild_info.py",
        "launchers/.tools/servebuild_info.py",
        f"{IMAGE_TOOLS}/servebuild_info.py",
        "runtime",
        "serve-time-jit",
    ),
    Row(
        "the recorder's .pth",
        WRITTEN,
        f"launchers/.tools/{RECORD_PTH_NAME}",
        f"{SITE_PACKAGES}/{RECORD_PTH_NAME}",
        "runtime",
        "serve-time-jit",
    ),
    # the aot stage
    Row("the aot builder", TOOLS / "aot_build.py", "aot/aot_build.py", f"{AOT}/aot_build.py", "aot", "aot"),
    Row("the aot spec", WRITTEN, "aot/spec.json", f"{AOT}/spec.json", "aot", "aot"),
)


def carried(recipe: Recipe, has_aot: bool) -> dict[str, bool]:
    """Each condition of the table, asked of the recipe once: condition -> whether its rows go in."""
    return {when: test(recipe, has_aot) for when, test in CONDITIONS.items()}


def rows(recipe: Recipe, has_aot: bool, when: Optional[str] = None) -> list[Row]:
    """The rows an image of `recipe` carries (those of one condition, `when`)."""
    carries = carried(recipe, has_aot)
    return [r for r in PAYLOAD if (when is None or r.when == when) and carries[r.when]]


def row(context: str) -> Row:
    return next(r for r in PAYLOAD if r.context == context)


def copied(recipe: Recipe, has_aot: bool) -> dict[str, Path]:
    """Context path -> servebuild's file, for every copied (not written) row the image carries; a
    folder row gives each of its *.txt files."""
    out: dict[str, Path] = {}
    kind = _kind(recipe)
    for r in rows(recipe, has_aot):
        if r.source is WRITTEN:
            continue
        source = kind.argcheck if r.source == KIND_HOOK else r.source
        if source.is_dir():
            out.update({f"{r.context}{p.name}": p for p in sorted(source.glob("*.txt"))})
        else:
            out[r.context] = source
    return out


def argcheck_files(kind: EngineKind) -> dict[str, Path]:
    """The profile check's files by their place under its folder (what check/engine_parser.py mounts)."""
    return {
        r.context.removeprefix("argcheck/"): kind.argcheck if r.source == KIND_HOOK else r.source
        for r in PAYLOAD
        if r.when == "argcheck"
    }


def in_image_sources(kinds) -> set[Path]:
    """Every Python file of servebuild the table puts in an image (the parser hooks of `kinds` included)."""
    found = {r.source for r in PAYLOAD if r.source not in (WRITTEN, KIND_HOOK) and r.source.suffix == ".py"}
    return found | {k.argcheck for k in kinds if k.argcheck is not None}
