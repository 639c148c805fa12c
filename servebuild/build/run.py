"""One build on a BuildKit engine: bases -> sources -> context -> BuildKit -> manifest -> tag.

The image is tagged only after its manifest is written, so a failure never leaves a tagged image.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TextIO

from servebuild.build import bases as base_images
from servebuild.build.buildlock import build_lock
from servebuild.build.contextslot import context_slot
from servebuild.build.docker import BuildRequest, DockerClient
from servebuild.build.imageconfig import layers_in, settle_config
from servebuild.build.manifest import inputs_manifest, oci_labels
from servebuild.errors import DockerError, InputError, RecipeError, Refused
from servebuild.fsutil import atomic_write, make_dir, write_json, writing
from servebuild.lock.lockfile import lock_display
from servebuild.plan.make import BuildPlan
from servebuild.plan.resources import derive
from servebuild.platforms import arch_of, docker_arch, emulation_ready
from servebuild.render.payload import SEED
from servebuild.render.context import dockerfile_data, write_context
from servebuild.render.reuse import Overlay
from servebuild.sources.debs import fetch_debs
from servebuild.sources.prepare import prepare_engine_source
from servebuild.sources.stack import PreparedSource, SourceCache


PROJECT_URL = "https://github.com/servebuild/servebuild"
DOCKERFILE = "Dockerfile"  # the rendered Dockerfile, copied into the build dir (the context is shared: contextslot)


@dataclass(frozen=True)
class Rendered:
    """A plan's rendered build context and what goes with it."""

    context: Path
    build_args: dict[str, str]
    manifest_inputs: dict
    notes: tuple[str, ...] = ()  # which build-time stages this variant shares with its release (render/reuse.py)


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    tag: str
    manifest_path: Path
    log_path: Path
    cache_ref: Optional[str] = None
    # (diff_ids, each layer's step) from the config settled after the build: read once, not again to compare
    layers: Optional[tuple[list[str], list[str]]] = None


_FETCH_LOCK = threading.Lock()  # builds of several platforms run in threads; they share one source cache


def _cache_root(plan: BuildPlan) -> Path:
    """The cache the plan checked ($SERVEBUILD_CACHE); a plan made only to render has none."""
    return plan.cache_root or _not_for_building()


def _not_for_building():
    raise InputError("this plan was made to render, not to build (BuildOptions.fetching is off)", field="build")


def fetch_sources(plan: BuildPlan) -> Optional[PreparedSource]:
    """The engine's patched source tarball for the plan's platform (None without an engine);
    make_plan has already refused unpinned PR entries."""
    root = _cache_root(plan)
    with writing(root, "the source cache"):  # a host fault ($SERVEBUILD_CACHE read-only, full, a file in the way)
        cache = SourceCache(root, plan.config.git_mirrors, offline=plan.options.offline, recipe=plan.loaded.file)
    make_dir(plan.build_dir, "the build directory", plan.build_root)
    with _FETCH_LOCK, writing(root, "the source cache"), writing(plan.build_dir / "work", "the engine source tree"):
        return prepare_engine_source(
            plan.loaded,
            plan.platform,
            cache,
            plan.build_dir / "work",
            offline=plan.options.offline,
            ca_bundle=plan.secrets.get("ca"),
        )


def resolve_bases(plan: BuildPlan, docker: DockerClient) -> dict[str, dict]:
    """Each base must be in the engine (pulled if a registry has it) and match the platform."""
    want_arch = plan.platform.split("/")[1]
    out = {}
    for stage, ref in plan.bases.items():
        if docker.image_id(ref) is None:
            pulled = docker.run("pull", "--platform", plan.platform, ref, check=False)
            if pulled.returncode != 0:
                raise RecipeError(
                    f"base image {ref} is not in the engine and cannot be pulled; make one with "
                    f"`invoke bootstrap-base` or map the reference with --mirror-map",
                    file=plan.loaded.file,
                    field=f"bases.{stage}",
                )
        info = docker.image_inspect(ref)
        if info.get("Architecture") != want_arch:
            raise RecipeError(
                f"base image {ref} is {info.get('Architecture')}, the build is for {plan.platform}",
                file=plan.loaded.file,
                field=f"bases.{stage}",
            )
        if plan.debian is not None and ref.startswith("servebuild/debian:"):
            if base_images.base_key(info) != plan.debian.base_key():
                raise Refused(
                    f"base image {ref} was not bootstrapped from the Debian packages {lock_display(plan.loaded)} pins",
                    hint=f"run `invoke bootstrap-base --recipe "
                    f"{plan.loaded.recipe.name} --arch {want_arch}` (or `invoke main`)",
                    file=plan.loaded.file,
                    field=f"bases.{stage}",
                )
        locked_id = getattr(plan.lock.bases, stage).local_id if plan.lock else None
        if locked_id and locked_id != info["Id"]:
            raise RecipeError(
                f"lock is stale: base image {ref} is now {info['Id']}, the lock pins {locked_id}; "
                f"run `invoke lock` again",
                file=plan.loaded.file,
                field=f"bases.{stage}",
            )
        repo_digest = digest_for_ref(ref, info.get("RepoDigests") or [])
        original = getattr(plan.loaded.recipe.bases, stage)
        out[stage] = {"ref": original.ref, "resolved": ref, "id": info["Id"], "digest": repo_digest}
    return out


def repository_of(ref: str) -> str:
    """`reg:5000/a/b:tag@sha256:...` -> `reg:5000/a/b`, with Docker Hub's implied prefixes dropped."""
    name = ref.split("@", 1)[0]
    if name.rfind(":") > name.rfind("/"):
        name = name[: name.rfind(":")]
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name.removeprefix("library/")


def digest_for_ref(ref: str, repo_digests: list[str]) -> Optional[str]:
    """The registry digest of the base *as referenced*: a digest the ref pins, else a RepoDigest of the
    same repository. A RepoDigest left by a push to some other registry says nothing about this
    reference and is not a base digest (the image id is recorded instead)."""
    if "@" in ref:
        return ref.split("@", 1)[1]
    want = repository_of(ref)
    return next((d.split("@", 1)[1] for d in repo_digests if "@" in d and repository_of(d) == want), None)


def pinned_debs(plan: BuildPlan, fetch: bool = True) -> dict[str, list[tuple[str, Optional[Path]]]]:
    """stage -> (name:arch=version, the cached .deb) of each package the lock pins for its apt step; the
    .debs fetched into the artifact cache and checked against the lock's sha256 (not fetched: no paths)."""
    if plan.debian is None:
        return {}
    out = {}
    for stage, step in sorted(plan.debian.apt.items()):
        if fetch:
            root = _cache_root(plan)
            with writing(root, "the artifact cache"):
                paths = fetch_debs(
                    step.packages,
                    plan.debian.mirror,
                    root,
                    plan.loaded.recipe.name,
                    lock_display(plan.loaded),
                    offline=plan.options.offline,
                )
        else:
            paths = [None] * len(step.packages)
        out[stage] = [(p.spec, path) for p, path in zip(step.packages, paths)]
    return out


def deb_digests(plan: BuildPlan) -> dict[str, str]:
    """The lock's sha256 of each pinned .deb, by its name in the context (fetch_debs checked each against it)."""
    if plan.debian is None:
        return {}
    return {
        f"debs/{stage}/{Path(p.filename).name}": p.sha256
        for stage, step in plan.debian.apt.items()
        for p in step.packages
    }


def render(
    plan: BuildPlan,
    source: Optional[PreparedSource],
    bases: dict[str, dict],
    cpus: int,
    mem: int,
    tarball: Optional[Path] = None,
    debs: Optional[dict] = None,
    context: Optional[Path] = None,
) -> Rendered:
    """The build context for the plan: compile parallelism for the engine's host, the inputs manifest
    and the rendered Dockerfile, written to `context` (default: under the plan's build dir)."""
    recipe = plan.loaded.recipe
    engine = recipe.engine
    # compile parallelism reaches only a step that compiles (and no layer on hosts that do not)
    build_args = derive(cpus, mem, recipe.build, recipe.cuda_arch_list) if engine and engine.mode.compiles else {}
    if engine:
        build_args["ENGINE_VERSION"] = source.version(engine.version) if source else engine.version
    manifest_inputs = inputs_manifest(plan.loaded, plan.platform, bases, source, build_args)
    overlay = changed_files(plan, source)
    stages = {}
    if engine:
        data = dockerfile_data(recipe, plan.loaded.root, plan.platform, plan.bases, overlay_files=overlay)
        stages = {
            name: base
            for name, base in data["stage_bases"].items()
            if data["aot" if name == "aot" else "profile_check"]
        }
    if stages:  # recorded: which engine each build-time stage ran on
        manifest_inputs["stages"] = {
            name: {"on": b.base, **({"because": b.because} if b.because else {})} for name, b in sorted(stages.items())
        }
    context = context or plan.build_dir / "context"
    make_dir(plan.build_dir, "the build directory", plan.build_root)
    try:
        with writing(context, "the build context"):
            write_context(
                plan.loaded,
                plan.platform,
                plan.bases,
                context,
                manifest_inputs,
                tarball or (source.tarball if source else None),
                debs if debs is not None else pinned_debs(plan, fetch=False),
                overlay,
                deb_digests(plan),
            )
    except BaseException:  # a full disk or ^C: no half context is left for a later build to trust
        shutil.rmtree(context, ignore_errors=True)
        raise
    return Rendered(
        context=context,
        build_args=build_args,
        manifest_inputs=manifest_inputs,
        notes=tuple(b.describe(name) for name, b in sorted(stages.items())),
    )


def changed_files(plan: BuildPlan, source: Optional[PreparedSource]) -> Optional[Overlay]:
    """What the patch stack does to the engine's tree (files changed, added, deleted); nothing for an empty
    stack; None when the sources are not prepared (a dry run of a stack: the build-time stages then run on
    the variant)."""
    engine = plan.loaded.recipe.engine
    if source is not None:
        return Overlay(tuple(source.changed_files()), tuple(source.created_files()), tuple(source.deleted))
    return Overlay(()) if engine is not None and not engine.source.patches else None


def _host_resources() -> tuple[int, int]:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return os.cpu_count() or 1, pages


def dry_run(plan: BuildPlan) -> tuple[str, bool]:
    """What a build would do, without the engine or the network: the context is rendered with an
    empty source placeholder and the sources that would be fetched are listed; and whether the build
    would stop before building (an unpinned PR entry). One at a time per build dir, as builds."""
    with build_lock(plan.build_dir, plan.loaded.recipe.name, plan.build_root):
        return _dry_run(plan)


def _dry_run(plan: BuildPlan) -> tuple[str, bool]:
    bases = {
        s: {"ref": getattr(plan.loaded.recipe.bases, s).ref, "resolved": r, "id": None, "digest": None}
        for s, r in plan.bases.items()
    }
    engine = plan.loaded.recipe.engine
    lines, problem = [], None
    if engine:
        problem = plan.unpinned
        origin = engine.mode.tree_origin(engine, plan.platform)
        tree = (
            f"{origin.artifact} from {origin.requirement}"
            if origin.kind == "pypi"
            else f"{engine.source.url} at {engine.source.commit}"
        )
        lines.append(f"  source: {tree}; stack: {', '.join(e.id for e in engine.source.patches) or '(none)'}")
        if problem:
            lines.append(f"  would stop: {problem}")
        placeholder = make_dir(plan.build_dir, "the build directory", plan.build_root) / "dry-run-source.tar"
        with writing(placeholder, "the dry run's source placeholder"):
            atomic_write(placeholder, b"")  # a link planted there is replaced, never written through
    rendered = render(plan, None, bases, *_host_resources(), tarball=placeholder if engine else None)
    context = rendered.context
    args = " ".join(f"--build-arg {k}={v}" for k, v in sorted(rendered.build_args.items()))
    secrets = " ".join(f"--secret id={k},src={v}" for k, v in sorted(plan.secrets.items()))
    text = "\n".join(
        [
            f"would build {plan.loaded.recipe.name} for {plan.platform} as {plan.tag}",
            f"  context: {context}",
            *lines,
            f"  docker build --platform {plan.platform} {args} {secrets} -f {context}/Dockerfile {context}",
        ]
    )
    return text, problem is not None


def build(plan: BuildPlan, docker: DockerClient, echo: Optional[TextIO] = None) -> BuildResult:
    """`echo` takes the live progress (default stderr unless options.echo is off); one build at a
    time per build dir (a second refuses)."""
    with build_lock(plan.build_dir, plan.loaded.recipe.name, plan.build_root):
        return _build(plan, docker, echo)


def _build(plan: BuildPlan, docker: DockerClient, echo: Optional[TextIO]) -> BuildResult:
    with context_slot(plan.build_root, plan.loaded.recipe.name, plan.platform) as context:
        return _build_in(plan, docker, echo, context)


def _build_in(plan: BuildPlan, docker: DockerClient, echo: Optional[TextIO], context: Path) -> BuildResult:
    info = docker.info()
    bases = resolve_bases(plan, docker)
    # this host's binfmt says nothing about a remote engine (the farm preflight probes that engine)
    if docker.endpoint is None and engine_arch(info) != arch_of(plan.platform) and not emulation_ready(plan.platform):
        raise DockerError(
            f"building for {plan.platform} on a {engine_arch(info)} engine needs QEMU binfmt; run `invoke binfmt`",
            field="--platform",
        )
    source = fetch_sources(plan)
    debs = pinned_debs(plan)
    cpus, mem = int(info.get("NCPU", 1)), int(info.get("MemTotal", 1 << 30))
    rendered = render(plan, source, bases, cpus, mem, debs=debs, context=context)
    with writing(plan.build_dir / DOCKERFILE, "the rendered Dockerfile"):  # the build's own copy, to read
        atomic_write(plan.build_dir / DOCKERFILE, (context / "Dockerfile").read_bytes())
    created, created_from = plan.created or _not_for_building()
    labels = oci_labels(rendered.manifest_inputs, created, PROJECT_URL)
    log_path = plan.build_dir / "build.log"
    request = BuildRequest(
        context=rendered.context,
        platform=plan.platform,
        build_args=rendered.build_args,
        labels=labels,
        secrets=plan.secrets,
        no_cache=plan.options.no_cache,
        cache_from=plan.options.cache_from,
        inline_cache=plan.options.cache_to is not None,
        network=docker.endpoint.network if docker.endpoint else None,
        notes=rendered.notes,
    )
    echo = echo or (sys.stderr if plan.options.echo else None)
    image_id = docker.build(request, log_path, echo=echo)
    settled = settle_config(docker, image_id, created, plan.bases.get("runtime"), plan.platform, then=LISTS)
    image_id = settled.image_id
    packages, apt, aot = image_lists(docker, image_id, plan.platform, settled.output, echo)
    manifest = dict(rendered.manifest_inputs)
    manifest["outputs"] = {
        "image_id": image_id,
        "tag": plan.tag,
        "created": created,
        "created_from": created_from,
        "labels": labels,
        "packages": sorted(p for p in packages if p.strip()),
        "apt_packages": sorted(p for p in apt if p.strip()),
        "aot": aot,
        "engine": {
            "server_version": docker.server_version,
            "client": docker.client,
            **({"host": docker.endpoint.host} if docker.endpoint else {}),
        },
    }
    manifest_path = plan.build_dir / "manifest.json"
    with writing(manifest_path, "the build manifest"):  # before the tag: a manifest that cannot be written tags nothing
        write_json(manifest_path, manifest, strict=True)
    docker.tag(image_id, plan.tag)
    if plan.options.cache_to:  # the image's layers under a config that carries BuildKit's inline cache
        docker.push(settled.cache_id or image_id, plan.options.cache_to)
    return BuildResult(
        image_id=image_id,
        tag=plan.tag,
        manifest_path=manifest_path,
        log_path=log_path,
        cache_ref=plan.options.cache_to,
        layers=layers_in(settled.config) if settled.config else None,
    )


# the image's pip and apt package lists and its aot record (absolute paths: a launch profile named like a
# command, /usr/local/bin/cat, must not answer)
LISTS = (
    "/bin/cat /opt/servebuild/packages.txt; echo '#apt'; "
    "/bin/cat /opt/servebuild/apt-runtime.txt; echo '#aot'; "
    f"/bin/cat {SEED}/aot.json 2>/dev/null || true"
)


def image_lists(
    docker: DockerClient, image_id: str, platform: str, output: Optional[str], echo: Optional[TextIO]
) -> tuple[list[str], list[str], Optional[dict]]:
    """The lists from what settle_config's container printed (`output`), else read in a container of their
    own. The second way is taken only when reading the engine's image store in a container of the image
    failed, and the build then read the config from a `docker save` of the whole image (a minute on a 9 GB
    image): it says so on `echo`, rather than being slow without a word."""
    if output is not None:
        return parse_lists(output)
    if echo is not None:
        echo.write(
            f"servebuild: the image's config could not be read from {docker.name}'s image store in a container "
            f"of it: read from `docker save` instead (slower; the package lists in a container of their own)\n"
        )
    return installed_lists(docker, image_id, platform)


def installed_lists(docker: DockerClient, image_id: str, platform: str) -> tuple[list[str], list[str], Optional[dict]]:
    """The image's pip and apt package lists and its aot record (what the aot stage compiled, with
    cache keys), read in one throwaway container (no network)."""
    return parse_lists(docker.run_in_image(image_id, "-c", LISTS, platform=platform, entrypoint="/bin/sh"))


def parse_lists(out: str) -> tuple[list[str], list[str], Optional[dict]]:
    packages, _, rest = out.partition("#apt\n")
    apt, _, aot = rest.partition("#aot\n")
    try:
        record = json.loads(aot) if aot.strip() else None
    except ValueError:
        raise DockerError(f"the image's {SEED}/aot.json is not JSON", field="build") from None
    return packages.splitlines(), apt.splitlines(), record


def engine_arch(info: dict) -> str:
    return docker_arch(info.get("Architecture", ""))
