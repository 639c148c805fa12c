"""One build, front to back: recipe -> resolved -> rendered context -> built image -> manifest -> tag.

Every input is checked before the engine is asked to do anything, and the image is tagged only
after its manifest is written, so a failure never leaves a tagged image or a half build dir.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TextIO

from servebuild.config import Config, load_config, load_mirror_map
from servebuild.docker import BuildRequest, DockerClient
from servebuild.engine_source import prepare_engine_source
from servebuild.errors import DockerError, RecipeError
from servebuild.fsutil import write_json
from servebuild.loading import LoadedRecipe, load_recipe
from servebuild.manifest import inputs_manifest, oci_labels
from servebuild.platforms import PLATFORMS, arch_of, docker_arch, emulation_ready, host_platform, slug
from servebuild.recipe import COMPONENT, HOST
from servebuild.render import write_context
from servebuild.resources import derive
from servebuild.sources import PreparedSource, SourceCache, default_cache_dir

PROJECT_URL = "https://github.com/servebuild/servebuild"
# docker reference grammar: [host[:port]/]path-components[:tag], lower-case path, tag <= 128 chars
TAG = re.compile(rf"^(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?\Z")


@dataclass
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


@dataclass
class BuildPlan:
    loaded: LoadedRecipe
    platform: str
    bases: dict[str, str]
    build_dir: Path
    tag: str
    secrets: dict[str, Path]
    options: BuildOptions
    config: Config
    source: Optional[PreparedSource] = None
    lock: Optional[dict] = None
    context: Optional[Path] = None
    build_args: dict[str, str] = field(default_factory=dict)
    manifest_inputs: dict = field(default_factory=dict)


@dataclass
class BuildResult:
    image_id: str
    tag: str
    manifest_path: Path
    log_path: Path
    cache_ref: Optional[str] = None


def _check_file(path: Optional[Path], option: str) -> Optional[Path]:
    if path is None:
        return None
    if not path.is_file() or path.stat().st_size == 0:
        raise RecipeError(f"{path} is not a readable, non-empty file", field=option)
    return path.resolve()


def make_plan(root: Path, recipe_name: str, options: BuildOptions) -> BuildPlan:
    """Load and validate everything that can be checked without the engine."""
    loaded, lock = _pinned_recipe(root, recipe_name, options)
    recipe = loaded.recipe
    platform = _platform(loaded, options.platform)
    variant = f"{options.variant}-" if options.variant else ""
    tag = options.tag or f"servebuild/{recipe.name}:{variant}{slug(platform).removeprefix('linux-')}"
    tag = tag.replace("{arch}", arch_of(platform))  # one option for several platforms
    if len(tag) > 255 or not TAG.match(tag):
        raise RecipeError(f"{tag!r} is not a valid image tag", field="--tag")
    options = _cache_refs(options, platform)
    secrets = {sid: path for sid, path in (("ca", _check_file(options.ca_bundle, "--ca-bundle")),
                                           ("netrc", _check_file(options.netrc, "--netrc"))) if path}
    config = load_config()
    if options.fetching:  # what a build reads from its environment, checked before anything is written
        created_timestamp()
        checked_cache_dir(options.cache_dir)
    build_dir = (options.build_root or root / "build") / recipe.name / (options.variant or "") / slug(platform)
    if options.dry_run:  # a dry run never touches a real build's context
        build_dir = build_dir / "dry-run"
    return BuildPlan(loaded=loaded, platform=platform, bases=_base_refs(loaded, platform, config, options),
                     build_dir=build_dir, tag=tag,
                     secrets=secrets, options=options, config=config, lock=lock)


def _cache_refs(options: BuildOptions, platform: str) -> BuildOptions:
    """--cache-from/--cache-to with `{arch}` filled in; a cache-to ref must name its registry."""
    import dataclasses
    arch = arch_of(platform)
    cache_from = tuple(ref.replace("{arch}", arch) for ref in options.cache_from)
    for ref in cache_from:
        if len(ref) > 255 or not TAG.match(re.sub(r"@sha256:[0-9a-f]{64}\Z", "", ref)):
            raise RecipeError(f"{ref!r} is not an image reference", field="--cache-from")
    cache_to = options.cache_to.replace("{arch}", arch) if options.cache_to else None
    if cache_to is not None and (len(cache_to) > 255 or not TAG.match(cache_to)
                                 or not re.match(rf"{HOST}/", cache_to)):
        raise RecipeError(f"{cache_to!r} is not a registry reference HOST[:PORT]/REPOSITORY[:TAG]",
                          field="--cache-to")
    return dataclasses.replace(options, cache_from=cache_from, cache_to=cache_to)


def _pinned_recipe(root: Path, recipe_name: str, options: BuildOptions) -> tuple[LoadedRecipe, Optional[dict]]:
    """The recipe with its lock applied (strictly with --locked) and its variant chosen; a build
    stops here, before the engine or the network is asked anything, on an unpinned PR entry."""
    from servebuild.lock import apply_lock, pin_for_build, read_lock, unpinned_problem
    loaded = load_recipe(recipe_name, root)
    if options.locked:  # refuse anything not locked
        lock = read_lock(loaded)
        loaded = apply_lock(loaded, lock)
    else:  # use what the committed lock pins, if it is current
        loaded, lock = pin_for_build(loaded)
    if options.stack is not None:
        loaded = loaded.replace(loaded.recipe.with_stack(list(options.stack)), variant=options.variant)
    elif options.variant:
        loaded = loaded.with_variant(options.variant)
    problem = unpinned_problem(loaded, lock)
    if problem and options.fetching and not options.dry_run:
        raise problem
    return loaded, lock


def _platform(loaded: LoadedRecipe, wanted: Optional[str]) -> str:
    recipe, host = loaded.recipe, host_platform()
    platform = wanted or (host if host in recipe.platforms else recipe.platforms[0])
    if platform not in PLATFORMS:
        raise RecipeError(f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}",
                          field="--platform")
    if platform not in recipe.platforms:
        raise RecipeError(f"platform {platform} is not among the recipe's platforms "
                          f"({', '.join(recipe.platforms)})", file=loaded.file, field="platforms")
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


_FETCH_LOCK = threading.Lock()  # builds of several platforms run in threads; they share one source cache


def fetch_sources(plan: BuildPlan) -> Optional[PreparedSource]:
    """The engine's patched source tarball for the plan's platform (None without an engine);
    make_plan has already refused unpinned PR entries."""
    root = checked_cache_dir(plan.options.cache_dir)
    try:
        cache = SourceCache(root, plan.config.git_mirrors, offline=plan.options.offline, recipe=plan.loaded.file)
    except OSError as exc:
        raise RecipeError(f"cannot use {root} as the source cache: {exc.strerror or exc}",
                          field="$SERVEBUILD_CACHE") from None
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    with _FETCH_LOCK:
        plan.source = prepare_engine_source(plan.loaded, plan.platform, cache, plan.build_dir / "work",
                                            offline=plan.options.offline, ca_bundle=plan.secrets.get("ca"))
    return plan.source


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
                    file=plan.loaded.file, field=f"bases.{stage}")
        info = docker.image_inspect(ref)
        if info.get("Architecture") != want_arch:
            raise RecipeError(f"base image {ref} is {info.get('Architecture')}, the build is for "
                              f"{plan.platform}", file=plan.loaded.file, field=f"bases.{stage}")
        locked_id = ((plan.lock or {}).get("bases", {}).get(stage) or {}).get("local_id")
        if locked_id and locked_id != info["Id"]:
            raise RecipeError(f"lock is stale: base image {ref} is now {info['Id']}, the lock pins {locked_id}; "
                              f"run `invoke lock` again", file=plan.loaded.file, field=f"bases.{stage}")
        repo_digest = digest_for_ref(ref, info.get("RepoDigests") or [])
        original = getattr(plan.loaded.recipe.bases, stage)
        out[stage] = {"ref": original.ref, "resolved": ref, "id": info["Id"], "digest": repo_digest}
    return out


def repository_of(ref: str) -> str:
    """`reg:5000/a/b:tag@sha256:...` -> `reg:5000/a/b`, with Docker Hub's implied prefixes dropped."""
    name = ref.split("@", 1)[0]
    if name.rfind(":") > name.rfind("/"):
        name = name[:name.rfind(":")]
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name.removeprefix("library/")


def digest_for_ref(ref: str, repo_digests: list[str]) -> Optional[str]:
    """The registry digest of the base *as referenced*: a digest the ref pins, else a RepoDigest of the
    same repository. A RepoDigest left by a push to some other registry says nothing about this
    reference and is not a base digest (the image id is recorded instead)."""
    if "@" in ref:
        return ref.split("@", 1)[1]
    want = repository_of(ref)
    return next((d.split("@", 1)[1] for d in repo_digests
                 if "@" in d and repository_of(d) == want), None)


def render_plan(plan: BuildPlan, bases: dict[str, dict], cpus: int, mem: int,
                tarball: Optional[Path] = None) -> Path:
    recipe = plan.loaded.recipe
    engine = recipe.engine
    # compile parallelism reaches only a step that compiles (and no layer on hosts that do not)
    plan.build_args = derive(cpus, mem, recipe.build, recipe.cuda_arch_list) if engine and engine.mode.compiles else {}
    if engine:
        plan.build_args["ENGINE_VERSION"] = plan.source.version(engine.version) if plan.source else engine.version
    plan.manifest_inputs = inputs_manifest(plan.loaded, plan.platform, bases, plan.source, plan.build_args)
    plan.context = write_context(plan.loaded, plan.platform, plan.bases, plan.build_dir / "context",
                                 plan.manifest_inputs, tarball or (plan.source.tarball if plan.source else None))
    return plan.context


def _host_resources() -> tuple[int, int]:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return os.cpu_count() or 1, pages


MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z: the last second an ISO timestamp with a 4-digit year names


def created_timestamp() -> str:
    """The image's creation time: $SOURCE_DATE_EPOCH (whole seconds since 1970, checked) or now."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None or epoch == "":
        when = dt.datetime.now(dt.timezone.utc)
    elif re.fullmatch(r"[0-9]{1,12}", epoch) and int(epoch) <= MAX_EPOCH:
        when = dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc)
    else:
        raise RecipeError(f"{epoch!r} is not a number of seconds since 1970 (0..{MAX_EPOCH})",
                          field="$SOURCE_DATE_EPOCH")
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def checked_cache_dir(path: Optional[Path] = None) -> Path:
    """The source cache ($SERVEBUILD_CACHE or ~/.cache/servebuild): a directory, or one that can be made."""
    path = path or default_cache_dir()
    for where in (path, *path.parents):
        if where.exists():
            if not where.is_dir():
                raise RecipeError(f"{path} cannot be the source cache: {where} is not a directory",
                                  field="$SERVEBUILD_CACHE")
            break
    return path


def dry_run(plan: BuildPlan) -> tuple[str, bool]:
    """What a build would do, without the engine or the network: the context is rendered with an
    empty source placeholder and the sources that would be fetched are listed; and whether the build
    would stop before building (an unpinned PR entry)."""
    bases = {s: {"ref": getattr(plan.loaded.recipe.bases, s).ref, "resolved": r, "id": None, "digest": None}
             for s, r in plan.bases.items()}
    engine = plan.loaded.recipe.engine
    lines, problem = [], None
    if engine:
        from servebuild.lock import unpinned_problem
        problem = unpinned_problem(plan.loaded, plan.lock)
        origin = engine.mode.tree_origin(engine, plan.platform)
        tree = (f"{origin.artifact} from {origin.requirement}" if origin.kind == "pypi"
                else f"{engine.source.url} at {engine.source.commit}")
        lines.append(f"  source: {tree}; stack: {', '.join(e.id for e in engine.source.patches) or '(none)'}")
        if problem:
            lines.append(f"  would stop: {problem}")
        placeholder = plan.build_dir / "dry-run-source.tar"
        placeholder.parent.mkdir(parents=True, exist_ok=True)
        placeholder.write_bytes(b"")
    context = render_plan(plan, bases, *_host_resources(), tarball=placeholder if engine else None)
    args = " ".join(f"--build-arg {k}={v}" for k, v in sorted(plan.build_args.items()))
    secrets = " ".join(f"--secret id={k},src={v}" for k, v in sorted(plan.secrets.items()))
    text = "\n".join([f"would build {plan.loaded.recipe.name} for {plan.platform} as {plan.tag}",
                      f"  context: {context}", *lines,
                      f"  docker build --platform {plan.platform} {args} {secrets} -f {context}/Dockerfile {context}"])
    return text, problem is not None


def build(plan: BuildPlan, docker: DockerClient, echo: Optional[TextIO] = None) -> BuildResult:
    """`echo` takes the live progress (default stderr unless options.echo is off)."""
    info = docker.info()
    bases = resolve_bases(plan, docker)
    # this host's binfmt says nothing about a remote engine (the farm preflight probes that engine)
    if docker.endpoint is None and engine_arch(info) != arch_of(plan.platform) and not emulation_ready(plan.platform):
        raise DockerError(f"building for {plan.platform} on a {engine_arch(info)} engine needs QEMU "
                          f"binfmt; run `invoke binfmt`", field="--platform")
    fetch_sources(plan)
    context = render_plan(plan, bases, int(info.get("NCPU", 1)), int(info.get("MemTotal", 1 << 30)))
    created = created_timestamp()
    labels = oci_labels(plan.manifest_inputs, created, PROJECT_URL)
    log_path = plan.build_dir / "build.log"
    request = BuildRequest(context=context, platform=plan.platform, build_args=plan.build_args,
                           labels=labels, secrets=plan.secrets, no_cache=plan.options.no_cache,
                           cache_from=plan.options.cache_from, inline_cache=plan.options.cache_to is not None,
                           network=docker.endpoint.network if docker.endpoint else None)
    image_id = docker.build(request, log_path, echo=echo or (sys.stderr if plan.options.echo else None))
    packages, apt = installed_lists(docker, image_id, plan.platform)
    manifest = dict(plan.manifest_inputs)
    manifest["outputs"] = {"image_id": image_id, "tag": plan.tag, "created": created, "labels": labels,
                           "packages": sorted(p for p in packages if p.strip()),
                           "apt_packages": sorted(p for p in apt if p.strip()),
                           "engine": {"server_version": docker.server_version, "client": docker.client,
                                      **({"host": docker.endpoint.host} if docker.endpoint else {})}}
    manifest_path = plan.build_dir / "manifest.json"
    write_json(manifest_path, manifest)
    docker.tag(image_id, plan.tag)
    if plan.options.cache_to:
        docker.push(image_id, plan.options.cache_to)
    return BuildResult(image_id=image_id, tag=plan.tag, manifest_path=manifest_path, log_path=log_path,
                       cache_ref=plan.options.cache_to)


def installed_lists(docker: DockerClient, image_id: str, platform: str) -> tuple[list[str], list[str]]:
    """The image's pip and apt package lists, read in one throwaway container (no network)."""
    # absolute paths: a launch profile named like a command (/usr/local/bin/cat) must not answer
    out = docker.run_in_image(image_id, "-c", "/bin/cat /opt/servebuild/packages.txt; echo '#apt'; "
                              "/bin/cat /opt/servebuild/apt-runtime.txt", platform=platform, entrypoint="/bin/sh")
    packages, _, apt = out.partition("#apt\n")
    return packages.splitlines(), apt.splitlines()


def engine_arch(info: dict) -> str:
    return docker_arch(info.get("Architecture", ""))


