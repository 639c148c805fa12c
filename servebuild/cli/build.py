"""validate, render, build, fetch, main: from a recipe to an image."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild.build import bases, committed, farm as farms, run
from servebuild.build.buildlock import build_lock
from servebuild.build.docker import DockerClient
from servebuild.check import smoke
from servebuild.cli.options import DEFAULT_RECIPE, build_options, default_ca_bundle, option, verdict
from servebuild.errors import Refused
from servebuild.lock.lockfile import lock_display
from servebuild.plan.make import checked_cache_dir, make_plan
from servebuild.platforms import arch_of, host_platform, platform_list
from servebuild.recipe.load import load_recipe
from servebuild.render.context import render_dockerfile


def validate(root: Path, recipe: str) -> None:
    loaded = load_recipe(recipe, root)
    print(json.dumps(loaded.recipe.model_dump(mode="json"), indent=2, sort_keys=True))


def render(root: Path, recipe: str, platform: Optional[str], mirror_map: Optional[str]) -> None:
    plan = make_plan(root, recipe, build_options(platform=platform, mirror_map=mirror_map, fetching=False))
    sys.stdout.write(
        render_dockerfile(
            plan.loaded.recipe,
            plan.loaded.sha256,
            plan.platform,
            plan.bases,
            root,
            plan.debian.apt_specs() if plan.debian else None,
        )
    )


@dataclass(frozen=True)
class BuildArgs:
    """`invoke build`'s options, in the order invoke gives their short flags."""

    recipe: str = option(DEFAULT_RECIPE, "recipe name or path")
    platform: Optional[str] = option(
        None, "linux/arm64 or linux/amd64, or several comma-separated (built concurrently)", plan=True
    )
    tag: Optional[str] = option(None, "image tag (default servebuild/NAME:ARCH; {arch} is filled in)", plan=True)
    no_cache: bool = option(False, "build without cache", plan=True)
    dry_run: bool = option(False, "render the context and print the docker command; build nothing", plan=True)
    ca_bundle: Optional[str] = option(None, "extra CA bundle for pip (a BuildKit secret, in no layer)", plan=True)
    netrc: Optional[str] = option(None, "netrc with index tokens (a BuildKit secret, in no layer)", plan=True)
    mirror_map: Optional[str] = option(None, "YAML file rewriting base image references", plan=True)
    offline: bool = option(False, "use only the source cache for git sources", plan=True)
    cache_from: Optional[list[str]] = option(
        None, "image to use as a cache source (repeatable; {arch} is filled in)", repeatable=True, plan=True
    )
    locked: bool = option(False, "build exactly what the lock file next to the recipe pins; refuse if stale", plan=True)
    variant: Optional[str] = option(None, "build one A/B variant of the recipe (see `invoke bisect`)", plan=True)
    cache_to: Optional[str] = option(
        None, "REGISTRY/REPO:TAG: push the image with inline BuildKit cache there ({arch} is filled in)", plan=True
    )
    farm: Optional[str] = option(
        None, "farm file mapping platforms to engines (default: farm.yaml at the project root, if any)"
    )
    record_id: bool = option(
        False, "write the image's id to RECIPE.ids.yaml as the committed one (else compare with it)"
    )


def build(root: Path, args: BuildArgs) -> None:
    """One plan per platform, all checked first; a dry run prints them (and fails if one would stop);
    one platform without a farm builds on the local engine, else each on its farm engine, concurrently."""
    platforms = platform_list(args.platform)
    farms.per_platform_option(args.tag, "--tag", platforms)
    farms.per_platform_option(args.cache_to, "--cache-to", platforms)
    farm_file = farms.farm_path(root, args.farm)
    plans = {}
    for wanted in platforms:
        plan = make_plan(root, args.recipe, build_options(args, platform=wanted))
        if not plan.options.stack:  # a malformed ids file: one line before anything is built (read again after)
            committed.load_committed(plan.loaded)
        plans[plan.platform] = plan
    if args.dry_run:
        reports = [run.dry_run(plan) for plan in plans.values()]
        print("\n".join(text for text, _ in reports))
        if any(stops for _, stops in reports):  # a dry run that passes must mean it
            raise Refused("the build would stop (see `would stop:` above)")
        return
    if farm_file is None and len(plans) == 1:  # one platform on the local engine: as it always was
        docker = DockerClient()
        plan = next(iter(plans.values()))
        result = run.build(plan, docker)
        print_built(result)
        print_committed(docker, plan, result.image_id, args.record_id, result.layers)
        return
    if args.record_id:
        raise Refused("--record-id records one platform built on the local engine", field="--record-id")
    farm_build(root, farms, plans, farm_file)


def print_committed(docker: DockerClient, plan, image_id: str, record_id: bool = False, layers=None) -> bool:
    """Say whether the image equals the recipe's (or the variant's) committed id, or record it. `layers`:
    the image's (diff_ids, steps) where the build read them already, else read from the engine."""
    variant = plan.options.variant
    if plan.options.stack:  # an ad-hoc stack has no committed id
        return False
    layers, steps = layers or committed.layers_of(docker, image_id, plan.platform)
    if record_id:
        base = docker.image_id(plan.bases["runtime"])
        committed.record(
            plan.loaded, plan.platform, committed.CommittedImage(image=image_id, base=base, layers=layers), variant
        )
        print(f"  recorded {image_id} for {committed.key(plan.platform, variant)} in {committed.display(plan.loaded)}")
        return True
    same, line = committed.verdict(plan.loaded, plan.platform, image_id, layers, steps, variant)
    print(f"  {line}")
    return same


def print_built(result, where: str = "") -> None:
    print(f"built {result.tag} ({result.image_id}){where}")
    print(f"  manifest: {result.manifest_path}")
    print(f"  log:      {result.log_path}")
    if result.cache_ref:
        print(f"  cache:    {result.cache_ref} (inline BuildKit cache)")


def farm_build(root: Path, farm_module, plans: dict, farm_file: Optional[Path]) -> None:
    """Preflight every platform's engine (one line and nothing built on any problem), then build
    each platform on its engine concurrently; a failed platform is one line, exit 2, and untagged.
    `farm_module` is servebuild.build.farm (a test hands in stand-ins for its steps)."""
    farm = farm_module.load_farm(farm_file, root) if farm_file else farm_module.local_farm(list(plans))
    nodes = farm_module.preflight(farm, plans)
    for platform, node in nodes.items():
        print(f"[{platform}] on {node.name} ({node.client.server_version})", file=sys.stderr)
    results, errors = farm_module.build_all(plans, nodes)
    for platform in plans:
        if platform in results:
            print_built(results[platform], f" for {platform} on {nodes[platform].name}")
    if errors:
        first = next(p for p in plans if p in errors)
        built = ", ".join(results[p].tag for p in plans if p in results)
        tail = f"; built: {built}" if built else ""
        more = f" (also failed: {', '.join(p for p in plans if p in errors and p != first)})" if len(errors) > 1 else ""
        raise type(errors[first])(f"{errors[first]}{more}{tail}", field=first)  # its line, under its platform


def fetch(root: Path, recipe: str, offline: bool = False, locked: bool = False) -> None:
    plan = make_plan(root, recipe, build_options(offline=offline, locked=locked))
    start = time.monotonic()
    with build_lock(plan.build_dir, plan.loaded.recipe.name, plan.build_root):  # it writes the build dir's work tree
        source = run.fetch_sources(plan)
    if source is None:
        print(f"{plan.loaded.recipe.name} has no engine source; nothing to fetch")
        return
    print(f"fetched {source.url} at {source.commit} in {time.monotonic() - start:.1f}s")
    if "version_file" in source.tree:  # a release sdist: the commit it says it was cut from
        tree = source.tree
        print(f"  tree: {tree['file']}, cut from commit {tree['sdist_commit']} (its {tree['version_file']})")
    for p in source.patches:
        kind = "python-only" if p.python_only else "native"
        print(f"  {p.id}: sha256 {p.sha256} ({kind}; {len(p.files)} files)")
    print(f"  tarball: {source.tarball} sha256 {source.tarball_sha256}")


def main(root: Path, recipe: str, platform: Optional[str] = None) -> int:
    """The main job: the recipe's bootstrappable bases, the build, the smoke verdict."""
    engine = DockerClient()
    loaded = load_recipe(recipe, root)
    committed.load_committed(loaded)  # a malformed ids file: one line before a base is bootstrapped or built
    platform = platform or host_platform()
    arch = arch_of(platform)
    if bases.bootstrappable_refs(loaded, arch):
        cache = checked_cache_dir()
        pins = bases.pins_for(loaded, platform)
        for ref, suite in bases.missing_bootstrappable(engine, loaded, arch, pins.base_key()):
            print(
                f"==> bootstrap-base {suite} {arch} ({len(pins.base)} pinned packages, Release of {pins.release.date})"
            )
            image_id = bases.bootstrap_base(engine, pins, arch, ref, cache, loaded.recipe.name, lock_display(loaded))
            print(f"    {ref} ({image_id})")
    ca = default_ca_bundle(host_default=True)
    print(f"==> build {recipe} for {platform}" + (f" (extra CA: {ca})" if ca else ""))
    plan = make_plan(root, recipe, build_options(platform=platform, ca_bundle=ca))
    result = run.build(plan, engine)
    print(f"built {result.tag} ({result.image_id})\n  manifest: {result.manifest_path}")
    print_committed(engine, plan, result.image_id, layers=result.layers)
    print(f"==> test-image {result.tag}")
    out_dir = plan.build_dir / "smoke"
    return verdict(smoke.test_image(engine, result.tag, loaded, out_dir), out_dir)
