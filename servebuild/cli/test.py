"""test-image, check-profiles, smoke-expect, doctor, bootstrap-base, binfmt: proving images and hosts."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild import procs
from servebuild.build import bases, farm as farms
from servebuild.build.docker import DockerClient
from servebuild.check import engine_parser, host as hostcheck, smoke
from servebuild.cli.options import build_options, image_ref, option, verdict
from servebuild.errors import HostError, InputError
from servebuild.fsutil import no_link_below, write_json
from servebuild.lock.lockfile import lock_display
from servebuild.plan.make import checked_cache_dir, make_plan
from servebuild.platforms import host_arch
from servebuild.recipe.grammar import TAG, shown
from servebuild.recipe.load import load_recipe

BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


@dataclass(frozen=True)
class TestImageArgs:
    """`invoke test-image`'s options, in the order invoke gives their short flags."""

    __test__ = False  # not a pytest class, whatever imports it

    recipe: Optional[str] = option(None, "recipe whose expectations to check (default: read the manifest in the image)")
    image: Optional[str] = option(None, "image to test (default: the recipe's default tag for this host)")
    hosts: Optional[str] = option(
        None, "test a host instead of an image: local://, ssh://user@host, docker://container"
    )
    platform: Optional[str] = option(None, "platform of the recipe's image to test", plan=True)
    require_gpu: bool = option(False, "fail, rather than skip, the GPU checks when no GPU is visible")
    python: Optional[str] = option(None, "python on the host under test (hosts mode; default python3)")
    network: bool = option(False, "give the test container network (default: none)")
    variant: Optional[str] = option(None, "the A/B variant of the recipe's image", plan=True)
    farm: Optional[str] = option(
        None, "farm file: test the recipe's image on the engine that built it (default: farm.yaml, if any)"
    )


def test_image(root: Path, args: TestImageArgs) -> int:
    recipe, image, variant, require_gpu = args.recipe, args.image, args.variant, args.require_gpu
    if image is not None:
        image_ref(image)
    loaded = load_recipe(recipe, root) if recipe else None
    if loaded is not None and variant:
        loaded = loaded.with_variant(variant)
    if args.hosts:
        if loaded is None:
            raise InputError("--hosts needs --recipe to say what to expect", field="--recipe")
        out_dir = no_link_below(root / "build" / loaded.recipe.name / "smoke-hosts", "the smoke output", root / "build")
        code = smoke.run_suite(
            args.hosts,
            smoke.expectations(loaded, None, image=False),
            out_dir,
            require_gpu=require_gpu,
            python=args.python,
        )
        return verdict(code, out_dir)
    if image is None:
        if loaded is None:
            raise InputError("give --image REF or --recipe NAME", field="--image")
        plan = make_plan(root, recipe, build_options(args, fetching=False))
        image, out_dir = plan.tag, plan.build_dir / "smoke"
        engine = farms.engine_for_build(root, plan.build_dir, plan.platform, args.farm)
        image = farms.image_of_build(root, plan.build_dir, args.farm) or image
    else:
        out_dir = root / "build" / "images" / image.replace("/", "_").replace(":", "_") / "smoke"
        engine = DockerClient()
    no_link_below(out_dir, "the smoke output", root / "build")  # no folder of it under build/ a planted link
    code = smoke.test_image(engine, image, loaded, out_dir, require_gpu=require_gpu, network=args.network)
    return verdict(code, out_dir)


def check_profiles(root: Path, recipe: str, image: Optional[str]) -> None:
    record = engine_parser.check_in_image(DockerClient(), image_ref(image), load_recipe(recipe, root))
    for name, entry in sorted(record["profiles"].items()):
        print(
            f"{record['recipe']}: profile {name}: accepted by {entry['parsed_by']} "
            f"({record['engine']} {record['version']} in {image})"
        )


def doctor(serve: bool = False) -> None:
    checks = hostcheck.run_checks(serve=serve)
    for check in checks:
        print(check.line())
    failed = [ch.name for ch in checks if ch.status == "FAIL"]
    if failed:
        raise HostError(f"this host is not ready: {', '.join(failed)} (see above)")


def smoke_expect(root: Path, recipe: str, output: str) -> None:
    try:  # a directory, link, device or FIFO is never replaced (nor written through)
        mode = os.lstat(output).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise InputError(f"cannot use {output!r}: {exc.strerror}", field="--output") from None
    if (mode is not None and not stat.S_ISREG(mode)) or output.endswith("/"):
        raise InputError(f"{output!r} exists and is not a regular file; give a file path", field="--output")
    data = smoke.expectations(load_recipe(recipe, root), None, image=False)
    try:
        write_json(Path(output), data)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot write {output!r}: {getattr(exc, 'strerror', None) or exc}", field="--output"
        ) from None
    print(output)


def bootstrap_base(
    root: Path, arch: Optional[str], suite: str, tag: Optional[str], recipe: str, offline: bool = False
) -> None:
    arch = arch or host_arch()
    bases.check_arch(arch)
    bases.check_suite(suite)
    tag = tag or bases.default_tag(suite, arch)
    if len(tag) > 255 or not TAG.match(tag):  # before the .debs are fetched and mmdebstrap runs
        raise InputError(f"{shown(tag)} is not a valid image tag", field="--tag")
    loaded = load_recipe(recipe, root)
    engine = DockerClient()
    cache = checked_cache_dir()
    pins = bases.pins_for(loaded, f"linux/{arch}", suite, offline=offline)
    image_id = bases.bootstrap_base(
        engine, pins, arch, tag, cache, loaded.recipe.name, lock_display(loaded), offline=offline
    )
    print(f"{tag} ({image_id}): {len(pins.base)} packages of {pins.suite}, Release of {pins.release.date}")


def binfmt() -> None:
    cmd = ["update-binfmts", "--enable", "qemu-aarch64"]
    proc = procs.run(cmd, "binfmt", capture_output=True, text=True)
    if proc.returncode != 0 and "already enabled" not in proc.stderr:
        raise HostError(
            f"{' '.join(cmd)} failed: {proc.stderr.strip()}", hint="apt-get install qemu-user-static binfmt-support"
        )
    print("qemu-aarch64: " + BINFMT.read_text().splitlines()[0])
