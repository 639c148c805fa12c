"""invoke front door: parse options, call the servebuild package, print results.

Every user error is one line on stderr and exit code 2.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

from invoke import Exit, task

from servebuild.errors import ServebuildError

ROOT = Path(__file__).resolve().parent
DEFAULT_RECIPE = "sglang-native-fp8"


def one_line_errors(fn):
    import inspect
    defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for key, value in kwargs.items():  # an explicit '' is a mistake, not "not given"
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, str) and not v.strip() for v in values) and defaults.get(key) != value:
                raise Exit(f"error: --{key.replace('_', '-')}: empty value", code=2)
        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at exit
            return result
        except ServebuildError as exc:
            raise Exit(f"error: {exc}", code=exc.exit_code) from None
        except BrokenPipeError:  # `invoke validate | head`: the reader left; say nothing more
            import os
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=141) from None
    return wrapper


def _parse_errors_exit_2():
    """invoke's own parse errors ("No idea what '--bogus' is!") are user errors too: one line, exit 2."""
    from invoke import ParseError
    from invoke.program import Program
    if getattr(Program.parse_tasks, "_servebuild", False):
        return
    original = Program.parse_tasks

    def parse_tasks(self):
        try:
            return original(self)
        except ParseError as exc:  # "Flag <Argument: tag (t)> needed value..." names the option as typed
            text = re.sub(r"<Argument: ([A-Za-z0-9_-]+)[^>]*>", lambda m: "--" + m.group(1).replace("_", "-"),
                          " ".join(str(exc).split()))
            raise Exit(f"error: {text}", code=2) from None
        except ValueError as exc:  # a typed option's cast (int/float default) refused the value
            raise Exit(f"error: an option's value is not valid: {' '.join(str(exc).split())}", code=2) from None
    parse_tasks._servebuild = True
    Program.parse_tasks = parse_tasks


_parse_errors_exit_2()


def _verdict(code, out_dir):
    print(f"smoke verdict: {'PASS' if code == 0 else 'FAIL'} (JUnit XML: {out_dir / 'smoke-junit.xml'})")
    if code != 0:
        raise Exit(code=1)


def _image_ref(value: str) -> bool:
    from servebuild.recipe.grammar import TAG
    if re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", value):
        return True
    name = re.sub(r"@sha256:[0-9a-f]{64}\Z", "", value)
    return len(value) <= 255 and not value.startswith("-") and bool(TAG.match(name))


def _path(value):
    return Path(value) if value else None


def _options(platform=None, tag=None, no_cache=False, dry_run=False, ca_bundle=None, netrc=None,
             mirror_map=None, offline=False, cache_from=None, locked=False, variant=None, fetching=True, stack_=None):
    import os
    from servebuild.plan.make import BuildOptions
    ca_bundle = ca_bundle or os.environ.get("SERVEBUILD_CA_BUNDLE")
    return BuildOptions(platform=platform, tag=tag, no_cache=no_cache, dry_run=dry_run,
                        ca_bundle=_path(ca_bundle), netrc=_path(netrc), mirror_map=_path(mirror_map),
                        offline=offline, cache_from=tuple(cache_from or ()), locked=locked, variant=variant,
                        fetching=fetching, stack=stack_)


@task(help={"recipe": "recipe name or path"})
@one_line_errors
def validate(c, recipe=DEFAULT_RECIPE):
    """Load and validate a recipe (and the files it names); print its resolved form."""
    from servebuild.recipe.load import load_recipe
    loaded = load_recipe(recipe, ROOT)
    print(json.dumps(loaded.recipe.model_dump(mode="json"), indent=2, sort_keys=True))


@task(help={"recipe": "recipe name or path", "platform": "linux/arm64 or linux/amd64",
            "mirror_map": "YAML file rewriting base image references"})
@one_line_errors
def render(c, recipe=DEFAULT_RECIPE, platform=None, mirror_map=None):
    """Print the rendered Dockerfile (no engine, no network)."""
    from servebuild.plan.make import make_plan
    from servebuild.render.context import render_dockerfile
    plan = make_plan(ROOT, recipe, _options(platform=platform, mirror_map=mirror_map, fetching=False))
    sys.stdout.write(render_dockerfile(plan.loaded.recipe, plan.loaded.sha256, plan.platform, plan.bases, ROOT))


@task(help={"recipe": "recipe name or path",
            "platform": "linux/arm64 or linux/amd64, or several comma-separated (built concurrently)",
            "tag": "image tag (default servebuild/NAME:ARCH; {arch} is filled in)", "no_cache": "build without cache",
            "dry_run": "render the context and print the docker command; build nothing",
            "ca_bundle": "extra CA bundle for pip (a BuildKit secret, in no layer)",
            "netrc": "netrc with index tokens (a BuildKit secret, in no layer)",
            "mirror_map": "YAML file rewriting base image references",
            "offline": "use only the source cache for git sources",
            "cache_from": "image to use as a cache source (repeatable; {arch} is filled in)",
            "cache_to": "REGISTRY/REPO:TAG: push the image with inline BuildKit cache there ({arch} is filled in)",
            "farm": "farm file mapping platforms to engines (default: farm.yaml at the project root, if any)",
            "locked": "build exactly what the lock file next to the recipe pins; refuse if stale",
            "variant": "build one A/B variant of the recipe (see `invoke bisect`)"},
      iterable=["cache_from"])
@one_line_errors
def build(c, recipe=DEFAULT_RECIPE, platform=None, tag=None, no_cache=False, dry_run=False,
          ca_bundle=None, netrc=None, mirror_map=None, offline=False, cache_from=None, locked=False, variant=None,
          cache_to=None, farm=None):
    """Build a recipe into an image through the Docker engine with BuildKit (several platforms: each on
    its farm engine, concurrently)."""
    from servebuild.build import farm as farms
    from servebuild.build import run
    from servebuild.plan import make as pipeline
    from servebuild.build.docker import DockerClient
    platforms = farms.split_platforms(platform)
    farms.per_platform_option(tag, "--tag", platforms)
    farms.per_platform_option(cache_to, "--cache-to", platforms)
    farm_file = farms.farm_path(ROOT, farm)
    plans = {}
    for wanted in platforms:
        options = _options(wanted, tag, no_cache, dry_run, ca_bundle, netrc, mirror_map, offline, cache_from, locked,
                           variant)
        options.cache_to = cache_to
        plan = pipeline.make_plan(ROOT, recipe, options)
        plans[plan.platform] = plan
    if dry_run:
        reports = [run.dry_run(plan) for plan in plans.values()]
        print("\n".join(text for text, _ in reports))
        if any(stops for _, stops in reports):  # a dry run that passes must mean it
            raise Exit("error: the build would stop (see `would stop:` above)", code=2)
        return
    if farm_file is None and len(plans) == 1:  # one platform on the local engine: as it always was
        result = run.build(plan, DockerClient())
        _built(result)
        return
    _farm_build(farms, plans, farm_file)


def _built(result, where=""):
    print(f"built {result.tag} ({result.image_id}){where}")
    print(f"  manifest: {result.manifest_path}")
    print(f"  log:      {result.log_path}")
    if result.cache_ref:
        print(f"  cache:    {result.cache_ref} (inline BuildKit cache)")


def _farm_build(farms, plans, farm_file):
    """Preflight every platform's engine (one line and nothing built on any problem), then build
    each platform on its engine concurrently; a failed platform is one line, exit 2, and untagged."""
    farm = farms.load_farm(farm_file, ROOT) if farm_file else farms.local_farm(list(plans))
    nodes = farms.preflight(farm, plans)
    for platform, node in nodes.items():
        print(f"[{platform}] on {node.name} ({node.client.server_version})", file=sys.stderr)
    results, errors = farms.build_all(plans, nodes)
    for platform in plans:
        if platform in results:
            _built(results[platform], f" for {platform} on {nodes[platform].name}")
    if errors:
        first = next(p for p in plans if p in errors)
        built = ", ".join(results[p].tag for p in plans if p in results)
        tail = f"; built: {built}" if built else ""
        more = f" (also failed: {', '.join(p for p in plans if p in errors and p != first)})" if len(errors) > 1 else ""
        raise Exit(f"error: {first}: {errors[first]}{more}{tail}", code=errors[first].exit_code)


@task(help={"recipe": "recipe name or path", "offline": "do not touch the network",
            "locked": "fetch what the lock file pins"})
@one_line_errors
def fetch(c, recipe=DEFAULT_RECIPE, offline=False, locked=False):
    """Mirror the recipe's sources, apply its patch stack and write the source tarball."""
    import time
    from servebuild.build import run
    from servebuild.plan import make as pipeline
    plan = pipeline.make_plan(ROOT, recipe, _options(offline=offline, locked=locked))
    start = time.monotonic()
    source = run.fetch_sources(plan)
    if source is None:
        print(f"{plan.loaded.recipe.name} has no engine source; nothing to fetch")
        return
    print(f"fetched {source.url} at {source.commit} in {time.monotonic() - start:.1f}s")
    for p in source.patches:
        kind = "python-only" if p.python_only else "native"
        print(f"  {p.id}: sha256 {p.sha256} ({kind}; {len(p.files)} files)")
    print(f"  tarball: {source.tarball} sha256 {source.tarball_sha256}")


@task(help={"arch": "amd64 or arm64 (default: this host's)", "suite": "Debian suite",
            "tag": "image tag (default servebuild/debian:SUITE-ARCH)"})
@one_line_errors
def bootstrap_base(c, arch=None, suite="bookworm", tag=None):
    """Make a Debian minbase image for amd64 or arm64 from distribution packages (no registry)."""
    from servebuild.build import bases
    from servebuild.build.docker import DockerClient
    from servebuild.platforms import host_arch
    from servebuild.plan.make import checked_cache_dir
    arch = arch or host_arch()
    tag = tag or bases.default_tag(suite, arch)
    image_id = bases.bootstrap_base(DockerClient(), arch, suite, tag, checked_cache_dir())
    print(f"{tag} ({image_id})")


@task
@one_line_errors
def binfmt(c):
    """Register QEMU binfmt handlers so arm64 images build and run on an x86_64 host."""
    for cmd in (["update-binfmts", "--enable", "qemu-aarch64"],):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 and "already enabled" not in proc.stderr:
            raise Exit(f"error: {' '.join(cmd)} failed: {proc.stderr.strip()} "
                       f"(apt-get install qemu-user-static binfmt-support)", code=2)
    print("qemu-aarch64: " + Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").read_text().splitlines()[0])


@task(help={"recipe": "recipe whose expectations to check (default: read the manifest in the image)",
            "image": "image to test (default: the recipe's default tag for this host)",
            "hosts": "test a host instead of an image: local://, ssh://user@host, docker://container",
            "platform": "platform of the recipe's image to test",
            "require_gpu": "fail, rather than skip, the GPU checks when no GPU is visible",
            "python": "python on the host under test (hosts mode; default python3)",
            "network": "give the test container network (default: none)",
            "variant": "the A/B variant of the recipe's image",
            "farm": "farm file: test the recipe's image on the engine that built it (default: farm.yaml, if any)"})
@one_line_errors
def test_image(c, recipe=None, image=None, hosts=None, platform=None, require_gpu=False, python=None,
               network=False, variant=None, farm=None):
    """Run the testinfra smoke suite against an image (in a throwaway container) or a host."""
    from servebuild.build import run
    from servebuild.plan import make as pipeline
    from servebuild.check import smoke
    from servebuild.recipe.load import load_recipe
    if image is not None and not _image_ref(image):  # it reaches docker as an argument: never an option
        raise Exit(f"error: --image: {image!r} is not an image reference NAME[:TAG][@sha256:DIGEST] "
                   f"or an image id", code=2)
    loaded = load_recipe(recipe, ROOT) if recipe else None
    if loaded is not None and variant:
        loaded = loaded.with_variant(variant)
    if hosts:
        if loaded is None:
            raise Exit("error: --recipe: --hosts needs --recipe to say what to expect", code=2)
        out_dir = ROOT / "build" / loaded.recipe.name / "smoke-hosts"
        code = smoke.run_suite(hosts, smoke.expectations(loaded, None, image=False), out_dir,
                               require_gpu=require_gpu, python=python)
    else:
        from servebuild.build.docker import DockerClient
        if image is None:
            if loaded is None:
                raise Exit("error: --image: give --image REF or --recipe NAME", code=2)
            plan = pipeline.make_plan(ROOT, recipe, _options(platform=platform, variant=variant, fetching=False))
            image, out_dir = plan.tag, plan.build_dir / "smoke"
            engine = _build_engine(plan, farm)
            if farm is not None or (ROOT / "farm.yaml").exists():  # the build's own image, wherever it is tagged
                from servebuild.release.publish import read_json_file
                image = read_json_file(plan.build_dir / "manifest.json", "build manifest")["outputs"]["image_id"]
        else:
            out_dir = ROOT / "build" / "images" / image.replace("/", "_").replace(":", "_") / "smoke"
            engine = DockerClient()
        code = smoke.test_image(engine, image, loaded, out_dir, require_gpu=require_gpu, network=network)
    _verdict(code, out_dir)


@task(help={"recipe": "recipe whose launch profiles to parse",
            "image": "a built image of the same engine to parse them in (e.g. servebuild/sglang-native-fp8:amd64)"})
@one_line_errors
def check_profiles(c, recipe=DEFAULT_RECIPE, image=None):
    """Parse every launch profile of a recipe with its engine's own argument parser, inside a built
    image of that engine (a build does this itself; this checks a recipe that shares an image)."""
    from servebuild.check import profiles as argcheck
    from servebuild.build.docker import DockerClient
    from servebuild.recipe.load import load_recipe
    if image is None or not _image_ref(image):
        raise Exit(f"error: --image: {image!r} is not an image reference NAME[:TAG][@sha256:DIGEST] or an image id",
                   code=2)
    record = argcheck.check_in_image(DockerClient(), image, load_recipe(recipe, ROOT))
    for name, entry in sorted(record["profiles"].items()):
        print(f"{record['recipe']}: profile {name}: accepted by {entry['parsed_by']} "
              f"({record['engine']} {record['version']} in {image})")


@task(help={"serve": "this host runs the images too: the NVIDIA runtime and a driver >= 580 are required"})
@one_line_errors
def doctor(c, serve=False):
    """Check this host: Docker engine, a BuildKit build with --secret, the NVIDIA runtime, driver, disk."""
    from servebuild.check import host as hostcheck
    checks = hostcheck.run_checks(serve=serve)
    for check in checks:
        print(check.line())
    failed = [ch.name for ch in checks if ch.status == "FAIL"]
    if failed:
        raise Exit(f"error: this host is not ready: {', '.join(failed)} (see above)", code=2)


def _build_engine(plan, farm_option):
    """The engine holding a recipe build's image: with a farm file, the node the build manifest
    names; else the local engine."""
    from servebuild.build import farm as farms
    from servebuild.build.docker import DockerClient
    from servebuild.release.publish import read_json_file
    farm_file = farms.farm_path(ROOT, farm_option)
    manifest_path = plan.build_dir / "manifest.json"
    if farm_file is None or not manifest_path.exists():
        return DockerClient()
    return farms.engine_of_build(farms.load_farm(farm_file, ROOT), plan.platform,
                                 read_json_file(manifest_path, "build manifest"))


@task(help={"recipe": "recipe name", "output": "where to write the expectations JSON"})
@one_line_errors
def smoke_expect(c, recipe="torch-cu130", output="smoke-expect.json"):
    """Write the smoke suite's expectations for a host run (for machines without this project)."""
    from servebuild.check import smoke
    from servebuild.fsutil import write_json
    from servebuild.recipe.load import load_recipe
    import os
    import stat
    try:  # a directory, link, device or FIFO is never replaced (nor written through)
        mode = os.lstat(output).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise Exit(f"error: --output: cannot use {output!r}: {exc.strerror}", code=2) from None
    if (mode is not None and not stat.S_ISREG(mode)) or output.endswith("/"):
        raise Exit(f"error: --output: {output!r} exists and is not a regular file; give a file path", code=2)
    data = smoke.expectations(load_recipe(recipe, ROOT), None, image=False)
    try:
        write_json(Path(output), data)
    except (OSError, ValueError) as exc:
        raise Exit(f"error: --output: cannot write {output!r}: {getattr(exc, 'strerror', None) or exc}", code=2) from None
    print(output)


@task(help={"recipe": "recipe name or path", "offline": "resolve from the source cache only"})
@one_line_errors
def lock(c, recipe=DEFAULT_RECIPE, offline=False):
    """Resolve commits, diff hashes and base digests; write RECIPE.lock.yaml next to the recipe."""
    import time
    from servebuild.lock import compute, lockfile as locking
    from servebuild.plan.config import load_config
    from servebuild.build.docker import DockerClient
    from servebuild.errors import DockerError
    from servebuild.recipe.load import load_recipe
    from servebuild.plan.make import checked_cache_dir
    from servebuild.sources.stack import SourceCache
    loaded = load_recipe(recipe, ROOT)
    try:
        engine = DockerClient()
        ids = {b.ref: engine.image_id(b.ref) for b in (loaded.recipe.bases.build, loaded.recipe.bases.runtime)}
    except DockerError:
        ids = {}
    cache = SourceCache(checked_cache_dir(), load_config().git_mirrors, offline=offline, recipe=loaded.file)
    start = time.monotonic()
    data = compute.compute_lock(loaded, cache, ids, ROOT / "build" / loaded.recipe.name / "lock-work")
    path = locking.lock_path(loaded)
    locking.write_lock(path, data)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
          f"in {time.monotonic() - start:.1f}s")
    for item in data["unresolved"]:
        print(f"  unresolved: {item}")


@task(help={"recipe": "recipe to build and prove (default torch-cu130-bookworm: needs no registry)",
            "platform": "platform (default: this host's)"})
@one_line_errors
def main(c, recipe="torch-cu130-bookworm", platform=None):
    """The main job: base image, build, smoke verdict, on a machine with PyPI but no registry."""
    import os
    from servebuild.build import bases
    from servebuild.build import run
    from servebuild.plan import make as pipeline
    from servebuild.check import smoke
    from servebuild.build.docker import DockerClient
    from servebuild.platforms import host_platform
    from servebuild.recipe.load import load_recipe
    from servebuild.plan.make import checked_cache_dir
    engine = DockerClient()
    loaded = load_recipe(recipe, ROOT)
    platform = platform or host_platform()
    arch = platform.split("/")[1]
    for stage in ("build", "runtime"):
        ref = getattr(loaded.recipe.bases, stage).ref
        if ref.startswith("servebuild/debian:") and engine.image_id(ref.replace("{arch}", arch)) is None:
            suite = ref.split(":", 1)[1].split("-", 1)[0]
            print(f"==> bootstrap-base {suite} {arch}")
            bases.bootstrap_base(engine, arch, suite, ref.replace("{arch}", arch), checked_cache_dir())
    ca = os.environ.get("SERVEBUILD_CA_BUNDLE") or (
        "/etc/ssl/certs/ca-certificates.crt" if Path("/etc/ssl/certs/ca-certificates.crt").exists() else None)
    print(f"==> build {recipe} for {platform}" + (f" (extra CA: {ca})" if ca else ""))
    plan = pipeline.make_plan(ROOT, recipe, _options(platform=platform, ca_bundle=ca))
    result = run.build(plan, engine)
    print(f"built {result.tag} ({result.image_id})\n  manifest: {result.manifest_path}")
    print(f"==> test-image {result.tag}")
    out_dir = plan.build_dir / "smoke"
    code = smoke.test_image(engine, result.tag, loaded, out_dir)
    _verdict(code, out_dir)


@task(help={"recipe": "recipe with `variants` (or a patch stack, with --search)",
            "variants": "comma-separated recipe variants (default: all), or ad-hoc NAME=ID+ID stacks "
                        "(`release=` is the stack-less release)",
            "platform": "platform (default: this host's if the recipe has it)",
            "locked": "build what the lock pins", "offline": "sources from the cache only",
            "ca_bundle": "extra CA bundle for pip (BuildKit secret)",
            "run": "shell command run in a throwaway container of each image (exit status + JSON metrics)",
            "search": "find the first patch of the stack whose prefix changes the outcome (needs --run)",
            "metric": "metric whose value against --threshold is the outcome (default: the exit status)",
            "threshold": "pass when the metric is at least this", "profiles": "comma-separated launch "
            "profiles: run the command once per profile ($SERVEBUILD_PROFILE, $SERVEBUILD_LAUNCHER)",
            "timeout": "seconds per run (default 1800)", "network": "give the run containers network",
            "metrics_file": "JSON file the command writes in the container (default: its last JSON line)",
            "volume": "docker -v SRC:DST[:ro] for the run containers (repeatable: model, benchmark, cache)"},
      iterable=["volume"])
@one_line_errors
def bisect(c, recipe=DEFAULT_RECIPE, variants=None, platform=None, locked=False, offline=False, ca_bundle=None,
           run=None, search=False, metric=None, threshold=None, profiles=None, timeout=None, network=False,
           metrics_file=None, volume=None):
    """A/B images: one isolated image per variant (sharing every layer but the engine's), a command
    run in each, one table; --search bisects the patch stack for the first patch that changes the result."""
    from servebuild.check import bisect as ab
    from servebuild.recipe.load import load_recipe
    threshold = ab.parse_threshold(metric, threshold)
    loaded = load_recipe(recipe, ROOT)
    if search and not run:
        raise Exit("error: --search: give the command that decides the outcome with --run", code=2)
    profile_names = profiles.split(",") if profiles else [None]
    unknown = [p for p in profile_names if p not in loaded.recipe.launch.profiles and p is not None]
    if unknown:
        raise Exit(f"error: {loaded.file}: launch.profiles: no profile {unknown[0]!r} "
                   f"(known: {', '.join(loaded.recipe.launch.profiles)})", code=2)
    timeout = "1800" if timeout is None else timeout  # a str option: invoke's int() would traceback on 'abc'
    if not re.fullmatch(r"[0-9]{1,9}", timeout):
        raise Exit(f"error: --timeout: {timeout!r} is not a whole number of seconds", code=2)
    probe = ab.Probe(run, timeout_s=int(timeout), network=network, metrics_file=metrics_file,
                     volumes=tuple(volume or ())) if run is not None else None
    if probe:
        probe.check()
    if search:
        if loaded.recipe.engine is None:
            raise Exit(f"error: {loaded.file}: engine: a recipe without an engine has no patch stack", code=2)
        stack = [e.id for e in loaded.recipe.engine.source.patches]
        jobs = [(f"prefix-{i}", tuple(stack[:i])) for i in range(len(stack) + 1)]
    else:
        specs = variants.split(",") if variants else list(loaded.recipe.variants)
        jobs = [ab.variant_job(loaded, spec) for spec in specs]
        if not jobs:
            raise Exit(f"error: {loaded.file}: variants: the recipe defines no variants", code=2)
    options = {name: _options(platform=platform, locked=locked, offline=offline, ca_bundle=ca_bundle, variant=name,
                              stack_=stack_) for name, stack_ in jobs}
    session = ab.Session(ROOT, recipe, probe, profile_names, options)  # plans checked before anything builds
    if search:
        found = ab.first_change(len(jobs) - 1, lambda i: session.outcome(jobs[i][0], metric, threshold))
        culprit = session.culprit(jobs, found)
        print(culprit)
    else:
        for name, _ in jobs:
            session.measure(name)
    json_path, md_path = session.report(ROOT / "build" / loaded.recipe.name / "bisect")
    print(ab.table(session.rows), end="")
    print(f"report: {json_path} and {md_path}")


@task(help={"recipe": "recipe whose builds to publish", "registry": "HOST[:PORT] of the registry",
            "platform": "platform(s) to put under the tag, comma-separated (default: the recipe's first)",
            "variant": "A/B variant of the builds",
            "repository": "repository in the registry (default servebuild/RECIPE)",
            "tag": "tag of the OCI index (default: the variant, else latest)",
            "credentials": "JSON file {username, password}, mode 600 (default: the Docker config's auths)",
            "ca": "PEM CA bundle the registry's certificate is checked against (private CA)",
            "force": "move a tag that already points at other images",
            "farm": "farm file: push each platform from the engine that built it (default: farm.yaml, if any)",
            "no_verify": "publish without a passing smoke verdict for each exact image",
            "sign_key": "PEM private key file (Ed25519 or ECDSA P-256, mode 600) to sign each provenance statement "
                        "with, attached as a DSSE envelope (default: $SERVEBUILD_SIGN_KEY; never the key itself)"})
@one_line_errors
def publish(c, recipe=DEFAULT_RECIPE, registry=None, platform=None, variant=None, repository=None, tag=None,
            credentials=None, ca=None, force=False, no_verify=False, farm=None, sign_key=None):
    """Push each platform's smoke-tested image by digest, attach SBOM + manifest + provenance (+ its signature),
    write one OCI index under the tag and read it back."""
    import os
    from servebuild.release import credentials as creds_mod
    from servebuild.build import run
    from servebuild.plan import make as pipeline
    from servebuild.release import signing
    from servebuild.build.docker import DockerClient
    from servebuild.lock.lockfile import lock_path
    from servebuild.platforms import PLATFORMS
    from servebuild.release.publish import check_build, lock_record, publish as publish_builds
    from servebuild.release.registry import RegistryClient
    if not registry:
        raise Exit("error: --registry: give the registry as HOST[:PORT]", code=2)
    name = (repository or f"servebuild/{recipe}").strip()
    tag = tag or variant or "latest"
    if not re.fullmatch(pipeline.HOST, registry) or not pipeline.TAG.match(f"{registry}/{name}:{tag}") \
            or "@" in name or name.count(":"):
        raise Exit(f"error: --registry/--repository/--tag: {f'{registry}/{name}:{tag}'!r} is not a registry "
                   f"reference HOST[:PORT]/REPOSITORY:TAG", code=2)
    platforms = [p.strip() for p in (platform or "").split(",") if p.strip()] if platform else [None]
    if not platforms:
        raise Exit(f"error: --platform: {platform!r} names no platform", code=2)
    for p in platforms:
        if p is not None and p not in PLATFORMS:
            raise Exit(f"error: --platform: unknown platform {p!r} (one of {', '.join(PLATFORMS)})", code=2)
    if len(set(platforms)) != len(platforms):
        raise Exit("error: --platform: a platform is named twice", code=2)
    key_file, key_field = (sign_key, "--sign-key") if sign_key else (os.environ.get("SERVEBUILD_SIGN_KEY"),
                                                                     "SERVEBUILD_SIGN_KEY")
    signer = signing.load_private_key(Path(key_file), key_field) if key_file else None  # before any push
    docker = DockerClient()
    builds, plan = [], None
    for p in platforms:  # every build checked before the registry is touched
        plan = pipeline.make_plan(ROOT, recipe, _options(platform=p, variant=variant, fetching=False))
        if plan.platform not in plan.loaded.recipe.platforms:
            raise Exit(f"error: --platform: recipe {plan.loaded.recipe.name} does not build {plan.platform}", code=2)
        engine = _build_engine(plan, farm)
        build = check_build(engine, plan.platform, plan.build_dir, verify=not no_verify)
        build.engine = engine
        build.lock = lock_record(lock_path(plan.loaded), ROOT)
        builds.append(build)
    if repository is None:
        name = f"servebuild/{plan.loaded.recipe.name}"
    creds = creds_mod.resolve(registry, _path(credentials))
    client = RegistryClient(registry, creds, _path(ca))
    result = publish_builds(docker, builds, client, name, tag, force=force, signer=signer,
                            progress=lambda event, detail: print(f"{event}: {detail}", flush=True))
    print(f"published {result['ref']}\n  index: {result['pinned']}")
    if signer:
        print(f"  provenance signed by {signer.keyid}")
    for p, digest in result["platforms"].items():
        print(f"  {p}: {registry}/{name}@{digest}")


@task(help={"ref": "HOST[:PORT]/REPOSITORY:TAG to check",
            "credentials": "JSON file {username, password}, mode 600 (default: the Docker config's auths)",
            "ca": "PEM CA bundle the registry's certificate is checked against",
            "public_key": "PEM public key file: each platform's provenance must carry a DSSE signature under it "
                          "over exactly the attached statement"}, positional=["ref"])
@one_line_errors
def verify(c, ref=None, credentials=None, ca=None, public_key=None):
    """Check a published tag end to end: index, platform digests, labels, attached manifest/SBOM/provenance
    (and its signature, with --public-key), lock."""
    from servebuild.release import credentials as creds_mod
    from servebuild.build import run
    from servebuild.plan import make as pipeline
    from servebuild.release import signing
    from servebuild.release.registry import RegistryClient
    from servebuild.release.verify import verify as verify_tag
    m = re.fullmatch(rf"({pipeline.HOST})/([a-z0-9][a-z0-9._/-]*):([A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})", ref or "")
    if not m or not pipeline.TAG.match(ref):
        raise Exit(f"error: REF: {ref!r} is not a registry reference HOST[:PORT]/REPOSITORY:TAG", code=2)
    registry, name, tag = m.groups()
    key = signing.load_public_key(Path(public_key)) if public_key else None  # before the registry is asked
    client = RegistryClient(registry, creds_mod.resolve(registry, _path(credentials)), _path(ca))
    report = verify_tag(client, name, tag, ROOT, key)
    print(f"verified {report['ref']} (index {report['index']})")
    for p, r in sorted(report["platforms"].items()):
        print(f"  {p}: {r['digest']} image {r['image_id'][:19]} recipe {r['recipe']} manifest "
              f"{r['manifest_sha256'][:12]} sbom {r['packages']} packages, lock {r['lock']}, {r['signature']}")


@task(help={"stack": "stack to regenerate: a directory constraints/STACK with an inputs.yaml",
            "target": "only this target, e.g. py3.11-linux-amd64 (repeatable; default: all)",
            "check": "regenerate into a temp dir and fail if the committed files differ"},
      iterable=["target"])
@one_line_errors
def deps(c, stack=None, target=None, check=False):
    """Regenerate a stack's hashed requirement sets from constraints/STACK/inputs.yaml (uv pip compile)."""
    from servebuild.lock import depsets
    if not stack:
        raise Exit(f"error: --stack: give one of {', '.join(depsets.stacks(ROOT))}", code=2)
    if check:
        problems = depsets.check(ROOT, stack, target or None)
        if problems:
            more = f" (and {len(problems) - 1} more files)" if len(problems) > 1 else ""
            raise Exit(f"error: {problems[0]}{more}", code=2)
        print(f"{stack}: committed sets match their inputs")
        return
    for path in depsets.generate(ROOT, stack, target or None):
        print(path.relative_to(ROOT))
