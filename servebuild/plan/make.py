"""Options + recipe + lock + site config -> a BuildPlan, checked before any engine or network is asked.

Every input a build reads from its command line and its environment is checked here, so a bad one
stops the build before anything is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild.errors import InputError, RecipeError, Refused
from servebuild.fsutil import check_input
from servebuild.lock.depsets import header_lines
from servebuild.lock.debian import DEFAULT_MIRROR, LockedDebian, bootstrapped_suite, check_against
from servebuild.lock.lockfile import (
    Lock,
    apply_lock,
    debian_pins,
    lock_display,
    pin_for_build,
    read_lock,
    unpinned_problem,
)
from servebuild.recipe.aptsteps import apt_steps
from servebuild.plan.config import Config, load_config, load_mirror_map
from servebuild.platforms import PLATFORMS, arch_of, host_platform, slug
from servebuild.recipe.grammar import HOST, TAG
from servebuild.recipe.load import LoadedRecipe, load_recipe
from servebuild.sources.archives import TAR_MTIME
from servebuild.sources.stack import default_cache_dir


@dataclass(frozen=True)
class BuildOptions:
    platform: Optional[str] = None
    tag: Optional[str] = None
    no_cache: bool = False
    dry_run: bool = False
    ca_bundle: Optional[Path] = None
    netrc: Optional[Path] = None
    mirror_map: Optional[Path] = None
    offline: bool = False
    build_root: Optional[Path] = None
    cache_dir: Optional[Path] = None
    cache_from: tuple[str, ...] = ()
    echo: bool = True
    locked: bool = False
    variant: Optional[str] = None
    fetching: bool = True  # False for plans that only render or name a build (render, test-image, publish)
    stack: Optional[tuple[str, ...]] = None  # an ad-hoc variant (named by `variant`): these patch ids, in order
    cache_to: Optional[str] = None  # REGISTRY/REPO:TAG: push the image with inline BuildKit cache metadata


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build needs that can be known before the engine or the network is asked. It does
    not change once made: fetching and rendering return their results (build.run) instead of
    setting them here."""

    loaded: LoadedRecipe  # the recipe, its lock applied and its variant chosen: validated once, here
    platform: str
    bases: dict[str, str]  # stage -> the FROM reference (mirrored, digest-pinned)
    build_dir: Path
    build_root: Path  # build/: the contexts shared by a recipe's variants live under it (build.contextslot)
    tag: str
    secrets: dict[str, Path]  # BuildKit secret id -> file (never in a layer)
    options: BuildOptions
    config: Config
    lock: Optional[Lock] = None  # the lock applied (None: no current lock)
    debian: Optional[LockedDebian] = None  # the lock's Debian side for the platform (bootstrapped bases)
    # what a build reads from its environment, checked once here (None in a plan that does not fetch):
    cache_root: Optional[Path] = None  # the source and artifact cache ($SERVEBUILD_CACHE)
    created: Optional[tuple[str, str]] = None  # the image's created time and what it is a fact of
    unpinned: Optional[Refused] = None  # an unpinned PR entry (a dry run names it; a build stopped)


def _check_file(path: Optional[Path], option: str) -> Optional[Path]:
    if path is None:
        return None
    if check_input(path, "secret", str(path), field=option).st_size == 0:
        raise RecipeError(f"{path} is not a readable, non-empty file", field=option)
    return path.resolve()


def make_plan(root: Path, recipe_name: str, options: BuildOptions) -> BuildPlan:
    """Load and validate everything that can be checked without the engine."""
    loaded, lock, unpinned = _pinned_recipe(root, recipe_name, options)
    recipe = loaded.recipe
    platform = _platform(loaded, options.platform)
    variant = f"{options.variant}-" if options.variant else ""
    tag = options.tag or f"servebuild/{recipe.name}:{variant}{slug(platform).removeprefix('linux-')}"
    tag = tag.replace("{arch}", arch_of(platform))  # one option for several platforms
    if len(tag) > 255 or not TAG.match(tag):
        raise InputError(f"{tag!r} is not a valid image tag", field="--tag")
    options = _cache_refs(options, platform)
    secrets = {
        sid: path
        for sid, path in (
            ("ca", _check_file(options.ca_bundle, "--ca-bundle")),
            ("netrc", _check_file(options.netrc, "--netrc")),
        )
        if path
    }
    config = load_config()
    cache_root = created = None
    if options.fetching:  # what a build reads from its environment, checked before anything is written
        created = created_timestamp(loaded, platform)
        cache_root = checked_cache_dir(options.cache_dir)
    build_root = options.build_root or root / "build"
    build_dir = build_root / recipe.name / (options.variant or "") / slug(platform)
    if options.dry_run:  # a dry run never touches a real build's context
        build_dir = build_dir / "dry-run"
    debian, pinned_by = (lock.debian.get(platform), lock_display(loaded)) if lock else debian_pins(loaded, platform)
    if debian is not None:  # the lock's apt steps must be the ones this servebuild renders
        check_against(debian, apt_steps(recipe), pinned_by)
    elif options.locked and bootstrapped_suite(recipe):
        raise Refused(
            f"the lock pins no Debian packages for {platform}",
            hint=f"run `invoke lock --recipe {recipe.name}` where {DEFAULT_MIRROR} is reachable",
            file=lock_display(loaded),
            field=f"debian.{platform}",
        )
    return BuildPlan(
        loaded=loaded,
        platform=platform,
        bases=_base_refs(loaded, platform, config, options),
        build_dir=build_dir,
        build_root=build_root,
        tag=tag,
        secrets=secrets,
        options=options,
        config=config,
        lock=lock,
        debian=debian,
        cache_root=cache_root,
        created=created,
        unpinned=unpinned,
    )


def _cache_refs(options: BuildOptions, platform: str) -> BuildOptions:
    """--cache-from/--cache-to with `{arch}` filled in; a cache-to ref must name its registry."""
    arch = arch_of(platform)
    cache_from = tuple(ref.replace("{arch}", arch) for ref in options.cache_from)
    for ref in cache_from:
        if len(ref) > 255 or not TAG.match(re.sub(r"@sha256:[0-9a-f]{64}\Z", "", ref)):
            raise InputError(f"{ref!r} is not an image reference", field="--cache-from")
    cache_to = options.cache_to.replace("{arch}", arch) if options.cache_to else None
    if cache_to is not None and (len(cache_to) > 255 or not TAG.match(cache_to) or not re.match(rf"{HOST}/", cache_to)):
        raise InputError(f"{cache_to!r} is not a registry reference HOST[:PORT]/REPOSITORY[:TAG]", field="--cache-to")
    return dataclasses.replace(options, cache_from=cache_from, cache_to=cache_to)


def _pinned_recipe(
    root: Path, recipe_name: str, options: BuildOptions
) -> tuple[LoadedRecipe, Optional[Lock], Optional[Refused]]:
    """The recipe with its lock applied (strictly with --locked) and its variant chosen, and the
    unpinned PR entry it has, if any; a build stops here, before the engine or the network is asked
    anything, on an unpinned PR entry (a dry run or a plan that does not fetch carries it)."""
    loaded = load_recipe(recipe_name, root)
    if options.locked:  # refuse anything not locked
        lock = read_lock(loaded)
        loaded = apply_lock(loaded, lock)
    else:  # use what the committed lock pins, if it is current
        loaded, lock = pin_for_build(loaded)
    if options.stack is not None:
        try:
            stacked = loaded.recipe.with_stack(list(options.stack))
        except InputError as exc:  # an ad-hoc stack has a name: the line says which (bisect --variants NAME=...)
            if not options.variant:
                raise
            raise exc.moved(field=f"--variants {options.variant}") from None
        loaded = loaded.replace(stacked, variant=options.variant)
    elif options.variant:
        loaded = loaded.with_variant(options.variant)
    problem = unpinned_problem(loaded, lock)
    if problem and options.fetching and not options.dry_run:
        raise problem
    return loaded, lock, problem


def _platform(loaded: LoadedRecipe, wanted: Optional[str]) -> str:
    recipe, host = loaded.recipe, host_platform()
    platform = wanted or (host if host in recipe.platforms else recipe.platforms[0])
    if platform not in PLATFORMS:
        raise InputError(f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}", field="--platform")
    if platform not in recipe.platforms:
        raise RecipeError(
            f"platform {platform} is not among the recipe's platforms ({', '.join(recipe.platforms)})",
            file=loaded.file,
            field="platforms",
        )
    return platform


def _base_refs(loaded: LoadedRecipe, platform: str, config: Config, options: BuildOptions) -> dict[str, str]:
    mirrors = dict(config.image_mirrors)
    if options.mirror_map:
        mirrors.update(load_mirror_map(options.mirror_map))
    bases = {}
    for stage in ("build", "runtime"):
        base = getattr(loaded.recipe.bases, stage)
        # `{arch}` lets one recipe name per-arch local images (a local store holds one arch per tag)
        ref = mirrors.get(base.ref, base.ref).replace("{arch}", arch_of(platform))
        # a registry digest pins FROM; a mirrored ref is a different image, so its digest does not apply
        bases[stage] = f"{ref}@{base.digest}" if base.digest and ref == base.ref else ref
    return bases


MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z: the last second an ISO timestamp with a 4-digit year names


EXCLUDE_NEWER = re.compile(r"# exclude-newer: ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z);")


def created_timestamp(loaded: Optional[LoadedRecipe] = None, platform: Optional[str] = None) -> tuple[str, str]:
    """The image's creation time and what it is a fact of: $SOURCE_DATE_EPOCH (whole seconds since
    1970, checked) if set; else the newest `exclude-newer` cutoff among the hashed sets the image
    installs for `platform` (their headers, written by `invoke deps`); else a fixed time (TAR_MTIME,
    the mtime of every settled file). Never the clock: the same inputs give the same config."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        if not (re.fullmatch(r"[0-9]{1,12}", epoch) and int(epoch) <= MAX_EPOCH):
            raise InputError(
                f"{epoch!r} is not a number of seconds since 1970 (0..{MAX_EPOCH})", field="$SOURCE_DATE_EPOCH"
            )
        return iso_time(dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc)), "$SOURCE_DATE_EPOCH"
    dated = sorted(_cutoffs(loaded, platform)) if loaded is not None and platform else []
    if dated:
        when, rel = dated[-1]
        return when, f"exclude-newer of {rel}"
    return iso_time(dt.datetime.fromtimestamp(TAR_MTIME, dt.timezone.utc)), "fixed (no dated input)"


def iso_time(when: dt.datetime) -> str:
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _cutoffs(loaded: LoadedRecipe, platform: str) -> list[tuple[str, str]]:
    """(cutoff, file) for each hashed set of the platform whose header names an exclude-newer time."""
    recipe = loaded.recipe
    files = [recipe.constraints[platform]] if platform in recipe.constraints else []
    if recipe.engine:
        files += list(recipe.engine.mode.context_files(recipe.engine, platform).values())
    out = []
    for rel in files:
        for line in header_lines(loaded.root / rel):
            match = EXCLUDE_NEWER.match(line)
            if match:
                out.append((match.group(1), str(rel)))
    return out


def checked_cache_dir(path: Optional[Path] = None) -> Path:
    """The source cache ($SERVEBUILD_CACHE or ~/.cache/servebuild): a directory, or one that can be made."""
    path = path or default_cache_dir()
    for where in (path, *path.parents):
        if where.exists():
            if not where.is_dir():
                raise InputError(
                    f"{path} cannot be the source cache: {where} is not a directory", field="$SERVEBUILD_CACHE"
                )
            break
    return path
