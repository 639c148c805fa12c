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
in recipes/*.ids.yaml say so). The Dockerfile's copy steps are made from the rows (runtime_step,
check_copies, folder_copy): images/stages/runtime.j2 names none of the table's paths, so a new in-image
file is one row.
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
PRESENT = (BIN, SITE_PACKAGES)  # image folders every runtime image has: the copy steps copy into them, never make them
CHECK_RECORD = f"{SERVEBUILD}/profiles-checked.json"  # the profile check's record: its stage writes it, not a row
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


# ---- the copy steps of the Dockerfile, made from the rows (images/stages/runtime.j2 prints them)


def _folders(chosen: list[Row]) -> dict[str, str]:
    """Top-level context folder -> the image folder it is copied to whole, for rows whose image path is that
    folder's image folder plus the rest of the context path (argcheck/site/x.py -> ARGCHECK/site/x.py)."""
    out: dict[str, str] = {}
    for r in chosen:
        folder, rest = r.context.split("/", 1)
        if not r.image.endswith("/" + rest):
            raise ValueError(f"payload row {r.context!r}: {r.image!r} does not end in its context path's {rest!r}")
        image_folder = r.image[: -len(rest) - 1]
        if out.setdefault(folder, image_folder) != image_folder:
            raise ValueError(f"payload row {r.context!r}: {folder}/ goes to {out[folder]}, not {image_folder}")
    return out


def folder_copy(stage: str) -> str:
    """`CONTEXT/ IMAGE/` of a stage whose rows are one context folder copied whole (the aot stage's COPY)."""
    ((folder, image_folder),) = _folders([r for r in PAYLOAD if r.stage == stage]).items()
    return f"{folder}/ {image_folder}/"


def check_copies() -> dict[str, list[str]]:
    """The profile-check stage's step: the launchers and the check's own rows where they would be copied,
    each context folder bound and copied whole (`mounts`, `commands`)."""
    folders = _folders([row("launchers/PROFILE"), *(r for r in PAYLOAD if r.stage == "profile-check")])
    return {
        "mounts": [f"--mount=type=bind,source={f},target=/mnt/{f}" for f in folders],
        "commands": [
            ("" if image in PRESENT else f"mkdir -p {image} && ") + f"cp -a --no-preserve=ownership /mnt/{f}/. {image}/"
            for f, image in folders.items()
        ],
    }


def _unit(r: Row) -> tuple[str, str, str]:
    """A runtime row as one cp: (its group: the context folder, or a top-level file itself; the source under
    /mnt; the destination). The files of a folder are copied by their suffix (`*.py`, `*` for launchers),
    so rows of one folder, suffix and image folder are one cp; a folder row (ending in /) copies its files."""
    if "/" not in r.context:
        return r.context, f"/mnt/{r.context}", r.image
    if r.context.endswith("/"):
        folder = r.context.rstrip("/")
        return folder.rpartition("/")[0], f"/mnt/{folder}/*", r.image
    folder, _, name = r.context.rpartition("/")
    if not r.image.endswith("/" + name):
        raise ValueError(f"payload row {r.context!r}: {r.image!r} is not a file of that name in a folder")
    return folder, f"/mnt/{folder}/*{Path(name).suffix}", r.image[: -len(name)]


def _deepest(folders: set[str]) -> list[str]:
    """The folders to make: those no other one is inside (mkdir -p makes the rest), none that every image has."""
    made = {f for f in folders if f not in PRESENT}
    return sorted(f for f in made if not any(o.startswith(f + "/") for o in made))


def runtime_step(recipe: Recipe, has_aot: bool, site: Optional[str]) -> str:
    """The runtime stage's step that puts the runtime rows an image carries in it (`site`: the venv's
    site-packages, where a row says SITE_PACKAGES). An image with launchers: one RUN that binds each top-level
    context entry and copies each folder's files by suffix, the groups in the order of their context paths,
    a group's folders made first. Without launchers: a COPY of each top-level file (the manifest); rows under a
    folder are not copied then, as before this step was made from the table (only an engine kind that compiles
    while serving, in a recipe with no launch profile, would carry such rows: no recipe does)."""
    runtime_rows = [r for r in rows(recipe, has_aot) if r.stage == "runtime"]
    if not carried(recipe, has_aot)["profiles"]:
        return "\n".join(f"COPY {r.context} {r.image}" for r in runtime_rows if "/" not in r.context)
    groups: dict[str, list[tuple[str, str]]] = {}
    for r in runtime_rows:
        group, source, dest = _unit(r)
        same = [d for s, d in groups.setdefault(group, []) if s == source]
        if same and same != [dest]:  # one glob, two places: each would get the other's files too
            raise ValueError(f"payload row {r.context!r}: {source} goes to {same[0]}, not also to {dest}")
        if not same:
            groups[group].append((source, dest))
    commands = []
    for group in sorted(groups):
        units = groups[group]
        made = _deepest({dest.rstrip("/") if dest.endswith("/") else dest.rpartition("/")[0] for _, dest in units})
        for i, (source, dest) in enumerate(units):
            mkdir = f"mkdir -p {' '.join(made)} && " if made and i == 0 else ""
            commands.append(f"{mkdir}cp --preserve=mode,timestamps {source} {dest}")
    text = " \\\n && ".join(commands)
    if SITE_PACKAGES in text:
        if not site:
            raise ValueError("a runtime row goes to the venv's site-packages, and none was given")
        text = text.replace(SITE_PACKAGES, site)
    mounts = [
        f"--mount=type=bind,source={e},target=/mnt/{e}" for e in sorted({r.context.split("/")[0] for r in runtime_rows})
    ]
    return "RUN " + " \\\n    ".join([*mounts, text])
