"""warm: run a command in a recipe's image (or any servebuild image), keep what it compiled, build IMAGE-warm."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from servebuild.build import farm as farms
from servebuild.build.docker import DockerClient
from servebuild.check.container import check_gpus, check_network, check_volume
from servebuild.check.warm import DEFAULT_MAX_BYTES, WarmRequest, launcher_name, result_tag, run_warm
from servebuild.cli.options import build_options, image_ref, option, whole_seconds
from servebuild.errors import InputError
from servebuild.fsutil import no_link_below, writing
from servebuild.plan.make import make_plan
from servebuild.recipe.load import load_recipe

SIZE = re.compile(r"\A([0-9]{1,15})([KMG]i?B?)?\Z")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_count(value: str) -> int:
    """--max-bytes: a whole number of bytes, or with K, M or G (KiB, MiB, GiB)."""
    m = SIZE.match(str(value).strip())
    if not m or int(m.group(1)) < 1:
        raise InputError(f"{value!r} is not a size in bytes such as 4000000000 or 16G", field="--max-bytes")
    return int(m.group(1)) * UNITS[(m.group(2) or "")[:1]]


@dataclass(frozen=True)
class WarmArgs:
    """`invoke warm`'s options, in the order invoke gives their short flags."""

    recipe: Optional[str] = option(None, "recipe whose built image to warm")
    variant: Optional[str] = option(None, "the A/B variant of the recipe's image", plan=True)
    platform: Optional[str] = option(None, "platform of the recipe's image", plan=True)
    image: Optional[str] = option(None, "warm this image instead (built by servebuild)")
    profile: Optional[str] = option(
        None, "launch profile the caches are for ($SERVEBUILD_LAUNCHER in the command; default the recipe's)"
    )
    run: Optional[str] = option(
        None, "shell command run in the image: the engine's warmups, a benchmark, anything that compiles"
    )
    volume: Optional[list[str]] = option(
        None, "docker -v SRC:DST[:ro] (repeatable: the model, a cache volume on /cache)", repeatable=True
    )
    gpus: Optional[str] = option(
        None, "all (default), none (only the JIT paths that need no GPU), or devices such as 0,1"
    )
    network: Optional[str] = option(None, "the container's network (default none)")
    timeout: Optional[str] = option(None, "seconds for the command (default 3600)")
    max_bytes: Optional[str] = option(None, "refuse a cache layer larger than this (default 16 GiB)")
    tag: Optional[str] = option(None, "tag of the warm image (default IMAGE-warm)")
    check: bool = option(False, "only count what the command compiles: exit 1 unless nothing")
    farm: Optional[str] = option(None, "farm file: warm on the engine that built the image")


def checked_request(args: WarmArgs) -> WarmRequest:
    """Every option checked before the engine is asked anything (the image is filled in after)."""
    run = args.run
    if not run or not run.strip() or "\x00" in run:
        raise InputError("give the command to run in the image (the engine's warmup, a benchmark, ...)", field="--run")
    gpus = check_gpus(args.gpus or "all", allow_auto=False)  # bisect's grammar, less `auto` (warm needs its GPUs)
    network = check_network(args.network or "none")
    for spec in args.volume or ():
        check_volume(spec)
    limit = DEFAULT_MAX_BYTES if args.max_bytes is None else byte_count(args.max_bytes)
    return WarmRequest(
        image=args.image or "",
        command=run,
        profile=args.profile,
        gpus=gpus,
        volumes=tuple(args.volume or ()),
        network=network,
        timeout=whole_seconds(args.timeout, 3600, positive=True),
        max_bytes=limit,
        tag=image_ref(args.tag, "--tag") if args.tag else None,
        check_only=args.check,
    )


def warm(root: Path, args: WarmArgs) -> int:
    request = checked_request(args)
    image, profile, recipe, variant, check = args.image, args.profile, args.recipe, args.variant, args.check
    if image is not None:
        image_ref(image)
        launcher_name(profile)  # no recipe lists the image's profiles: the name's grammar, before the engine
        if not check:  # the tag the hour of work ends in, before it starts
            request = replace(request, tag=result_tag(image, request.tag))
        engine, work = DockerClient(), root / "build" / "images" / re.sub(r"[/:@]", "_", image) / "warm"
    elif recipe:
        loaded = load_recipe(recipe, root)
        if variant:
            loaded = loaded.with_variant(variant)
        default = loaded.recipe.launch.default_profile()
        if profile is not None and profile not in loaded.recipe.launch.profiles:
            known = ", ".join(sorted(loaded.recipe.launch.profiles)) or "none"
            raise InputError(
                f"recipe {loaded.recipe.name} has no launch profile {profile!r} (it has: {known})", field="--profile"
            )
        profile = profile or default
        plan = make_plan(root, recipe, build_options(args, fetching=False))
        if not check:  # the recipe's tag with -warm (a farm build's image is named by id: not that)
            request = replace(request, tag=result_tag(plan.tag, request.tag))
        engine = farms.engine_for_build(root, plan.build_dir, plan.platform, args.farm)
        image = farms.image_of_build(root, plan.build_dir, args.farm) or plan.tag
        work = plan.build_dir / "warm"
    else:
        raise InputError("give --recipe NAME (its built image) or --image REF", field="--recipe")
    no_link_below(work, "the warm output", root / "build")  # no folder of it under build/ a planted link
    with writing(work, "the warm output"):
        result = run_warm(engine, replace(request, image=image, profile=profile), work)
    if check:
        total = sum(result.new_files.values())
        print(f"warm --check: {total} new cache files while the command ran")
        return 1 if total else 0
    return 0
