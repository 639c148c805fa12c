"""warm: run a command in a recipe's image (or any servebuild image), keep what it compiled, build IMAGE-warm."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Optional

from servebuild.build import farm as farms
from servebuild.build.docker import DockerClient
from servebuild.check.container import check_gpus, check_network, check_volume
from servebuild.check.warm import DEFAULT_MAX_BYTES, WarmRequest, launcher_name, result_tag, run_warm
from servebuild.cli.options import build_options, image_ref, whole_seconds
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


def checked_request(
    image: Optional[str],
    run: Optional[str],
    profile: Optional[str],
    gpus: Optional[str],
    volume,
    network,
    timeout,
    max_bytes,
    tag,
    check,
) -> WarmRequest:
    """Every option checked before the engine is asked anything (the image is filled in after)."""
    if not run or not run.strip() or "\x00" in run:
        raise InputError("give the command to run in the image (the engine's warmup, a benchmark, ...)", field="--run")
    gpus = check_gpus(gpus or "all", allow_auto=False)  # bisect's grammar, less `auto` (warm needs its GPUs)
    network = check_network(network or "none")
    for spec in volume or ():
        check_volume(spec)
    limit = DEFAULT_MAX_BYTES if max_bytes is None else byte_count(max_bytes)
    return WarmRequest(
        image=image or "",
        command=run,
        profile=profile,
        gpus=gpus,
        volumes=tuple(volume or ()),
        network=network,
        timeout=whole_seconds(timeout, 3600, positive=True),
        max_bytes=limit,
        tag=image_ref(tag, "--tag") if tag else None,
        check_only=check,
    )


def warm(
    root: Path,
    recipe=None,
    variant=None,
    platform=None,
    image=None,
    profile=None,
    run=None,
    volume=None,
    gpus=None,
    network=None,
    timeout=None,
    max_bytes=None,
    tag=None,
    check=False,
    farm=None,
) -> int:
    request = checked_request(image, run, profile, gpus, volume, network, timeout, max_bytes, tag, check)
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
        plan = make_plan(root, recipe, build_options(platform=platform, variant=variant, fetching=False))
        if not check:  # the recipe's tag with -warm (a farm build's image is named by id: not that)
            request = replace(request, tag=result_tag(plan.tag, request.tag))
        engine = farms.engine_for_build(root, plan.build_dir, plan.platform, farm)
        image = farms.image_of_build(root, plan.build_dir, farm) or plan.tag
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
