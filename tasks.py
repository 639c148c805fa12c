"""invoke front door: one task per command, each its help text and one call into servebuild.cli.

The commands themselves (option grammar, sequencing, printing) are in servebuild/cli/, where tests
call them without invoke. Every user error is one line on stderr and exit code 2.
"""

from __future__ import annotations

from pathlib import Path

from invoke import task

from servebuild.cli import bench as cli_bench, bisect as cli_bisect, build as cli_build, lock as cli_lock
from servebuild.cli import release as cli_release
from servebuild.cli import test as cli_test, warm as cli_warm
from servebuild.cli.front import interrupts_stop, one_line_errors, parse_errors_exit_2
from servebuild.cli.options import DEFAULT_RECIPE, DEFAULT_SUITE, EXPECT_FILE, HOST_RECIPE, MAIN_RECIPE

ROOT = Path(__file__).resolve().parent

parse_errors_exit_2()
interrupts_stop()


@task(help={"recipe": "recipe name or path"})
@one_line_errors
def validate(c, recipe=DEFAULT_RECIPE):
    """Load and validate a recipe (and the files it names); print its resolved form."""
    cli_build.validate(ROOT, recipe)


@task(
    help={
        "recipe": "recipe name or path",
        "platform": "linux/arm64 or linux/amd64",
        "mirror_map": "YAML file rewriting base image references",
    }
)
@one_line_errors
def render(c, recipe=DEFAULT_RECIPE, platform=None, mirror_map=None):
    """Print the rendered Dockerfile (no engine, no network)."""
    cli_build.render(ROOT, recipe, platform, mirror_map)


@task(
    help={
        "recipe": "recipe name or path",
        "platform": "linux/arm64 or linux/amd64, or several comma-separated (built concurrently)",
        "tag": "image tag (default servebuild/NAME:ARCH; {arch} is filled in)",
        "no_cache": "build without cache",
        "dry_run": "render the context and print the docker command; build nothing",
        "ca_bundle": "extra CA bundle for pip (a BuildKit secret, in no layer)",
        "netrc": "netrc with index tokens (a BuildKit secret, in no layer)",
        "mirror_map": "YAML file rewriting base image references",
        "offline": "use only the source cache for git sources",
        "cache_from": "image to use as a cache source (repeatable; {arch} is filled in)",
        "cache_to": "REGISTRY/REPO:TAG: push the image with inline BuildKit cache there ({arch} is filled in)",
        "farm": "farm file mapping platforms to engines (default: farm.yaml at the project root, if any)",
        "locked": "build exactly what the lock file next to the recipe pins; refuse if stale",
        "variant": "build one A/B variant of the recipe (see `invoke bisect`)",
        "record_id": "write the image's id to RECIPE.ids.yaml as the committed one (else compare with it)",
    },
    iterable=["cache_from"],
)
@one_line_errors
def build(
    c,
    recipe=DEFAULT_RECIPE,
    platform=None,
    tag=None,
    no_cache=False,
    dry_run=False,
    ca_bundle=None,
    netrc=None,
    mirror_map=None,
    offline=False,
    cache_from=None,
    locked=False,
    variant=None,
    cache_to=None,
    farm=None,
    record_id=False,
):
    """Build a recipe into an image through the Docker engine with BuildKit (several platforms: each on
    its farm engine, concurrently)."""
    cli_build.build(
        ROOT,
        recipe,
        platform,
        tag,
        no_cache,
        dry_run,
        ca_bundle,
        netrc,
        mirror_map,
        offline,
        cache_from,
        locked,
        variant,
        cache_to,
        farm,
        record_id,
    )


@task(
    help={
        "recipe": "recipe name or path",
        "offline": "do not touch the network",
        "locked": "fetch what the lock file pins",
    }
)
@one_line_errors
def fetch(c, recipe=DEFAULT_RECIPE, offline=False, locked=False):
    """Mirror the recipe's sources, apply its patch stack and write the source tarball."""
    cli_build.fetch(ROOT, recipe, offline, locked)


@task(
    help={
        "arch": "amd64 or arm64 (default: this host's)",
        "suite": "Debian suite",
        "tag": "image tag (default servebuild/debian:SUITE-ARCH)",
        "recipe": "recipe whose lock pins the Debian packages (default: the main job's)",
        "offline": "use only the artifact cache for the .debs",
    }
)
@one_line_errors
def bootstrap_base(c, arch=None, suite=DEFAULT_SUITE, tag=None, recipe=MAIN_RECIPE, offline=False):
    """Make a Debian minbase image for amd64 or arm64 from the packages a recipe's lock pins (no registry):
    the same bytes and image id on any machine, any day."""
    cli_test.bootstrap_base(ROOT, arch, suite, tag, recipe, offline)


@task
@one_line_errors
def binfmt(c):
    """Register QEMU binfmt handlers so arm64 images build and run on an x86_64 host."""
    cli_test.binfmt()


@task(
    help={
        "recipe": "recipe whose expectations to check (default: read the manifest in the image)",
        "image": "image to test (default: the recipe's default tag for this host)",
        "hosts": "test a host instead of an image: local://, ssh://user@host, docker://container",
        "platform": "platform of the recipe's image to test",
        "require_gpu": "fail, rather than skip, the GPU checks when no GPU is visible",
        "python": "python on the host under test (hosts mode; default python3)",
        "network": "give the test container network (default: none)",
        "variant": "the A/B variant of the recipe's image",
        "farm": "farm file: test the recipe's image on the engine that built it (default: farm.yaml, if any)",
    }
)
@one_line_errors
def test_image(
    c,
    recipe=None,
    image=None,
    hosts=None,
    platform=None,
    require_gpu=False,
    python=None,
    network=False,
    variant=None,
    farm=None,
):
    """Run the testinfra smoke suite against an image (in a throwaway container) or a host."""
    return cli_test.test_image(ROOT, recipe, image, hosts, platform, require_gpu, python, network, variant, farm)


@task(
    help={
        "recipe": "recipe whose launch profiles to parse",
        "image": "a built image of the same engine to parse them in (e.g. servebuild/sglang-native-fp8:amd64)",
    }
)
@one_line_errors
def check_profiles(c, recipe=DEFAULT_RECIPE, image=None):
    """Parse every launch profile of a recipe with its engine's own argument parser, inside a built
    image of that engine (a build does this itself; this checks a recipe that shares an image)."""
    cli_test.check_profiles(ROOT, recipe, image)


@task(help={"serve": "this host runs the images too: the NVIDIA runtime and a driver >= 580 are required"})
@one_line_errors
def doctor(c, serve=False):
    """Check this host: Docker engine, a BuildKit build with --secret, the NVIDIA runtime, driver, disk."""
    cli_test.doctor(serve)


@task(help={"recipe": "recipe name", "output": "where to write the expectations JSON"})
@one_line_errors
def smoke_expect(c, recipe=HOST_RECIPE, output=EXPECT_FILE):
    """Write the smoke suite's expectations for a host run (for machines without this project)."""
    cli_test.smoke_expect(ROOT, recipe, output)


@task(help={"recipe": "recipe name or path", "offline": "resolve from the source cache only"})
@one_line_errors
def lock(c, recipe=DEFAULT_RECIPE, offline=False):
    """Resolve commits, diff hashes and base digests; write RECIPE.lock.yaml next to the recipe."""
    cli_lock.lock(ROOT, recipe, offline)


@task(
    help={
        "recipe": "recipe to build and prove (default torch-cu130-bookworm: needs no registry)",
        "platform": "platform (default: this host's)",
    }
)
@one_line_errors
def main(c, recipe=MAIN_RECIPE, platform=None):
    """The main job: base image, build, smoke verdict, on a machine with PyPI but no registry."""
    return cli_build.main(ROOT, recipe, platform)


@task(
    help={
        "recipe": "recipe whose built image to warm",
        "variant": "the A/B variant of the recipe's image",
        "platform": "platform of the recipe's image",
        "image": "warm this image instead (built by servebuild)",
        "profile": "launch profile the caches are for ($SERVEBUILD_LAUNCHER in the command; default the recipe's)",
        "run": "shell command run in the image: the engine's warmups, a benchmark, anything that compiles",
        "volume": "docker -v SRC:DST[:ro] (repeatable: the model, a cache volume on /cache)",
        "gpus": "all (default), none (only the JIT paths that need no GPU), or devices such as 0,1",
        "network": "the container's network (default none)",
        "timeout": "seconds for the command (default 3600)",
        "max_bytes": "refuse a cache layer larger than this (default 16 GiB)",
        "tag": "tag of the warm image (default IMAGE-warm)",
        "check": "only count what the command compiles: exit 1 unless nothing",
        "farm": "farm file: warm on the engine that built the image",
    },
    iterable=["volume"],
)
@one_line_errors
def warm(
    c,
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
):
    """Run a command in the image, keep the kernels it compiled: IMAGE-warm = the image plus one cache layer."""
    return cli_warm.warm(
        ROOT,
        recipe,
        variant,
        platform,
        image,
        profile,
        run,
        volume,
        gpus,
        network,
        timeout,
        max_bytes,
        tag,
        check,
        farm,
    )


@task(
    help={
        "recipe": "recipe with `variants` (or a patch stack, with --search)",
        "variants": "comma-separated recipe variants (default: all), or ad-hoc NAME=ID+ID stacks "
        "(`release=` is the stack-less release)",
        "platform": "platform (default: this host's if the recipe has it)",
        "locked": "build what the lock pins",
        "offline": "sources from the cache only",
        "ca_bundle": "extra CA bundle for pip (BuildKit secret)",
        "run": "shell command run in a throwaway container of each image (exit status + JSON metrics)",
        "suite": "instead of --run: start $SERVEBUILD_LAUNCHER, wait for health, run servebuild-bench with "
        "this suite (and any bench options after it: 'tail --requests 50')",
        "search": "find the first patch of the stack whose prefix changes the outcome (needs --run or --suite)",
        "metric": "metric whose value against --threshold is the outcome (default: the exit status)",
        "threshold": "pass when the metric is at least this",
        "profiles": "comma-separated launch profiles, each run per variant, and/or VARIANT:PROFILE for one "
        "variant only (default: the recipe's default profile; $SERVEBUILD_LAUNCHER)",
        "repeat": "runs per row, interleaved across rows (A B C, C B A, ...); the table shows medians",
        "timeout": "seconds per run (default 7200: a cold DSV4 start plus a 1M prefill)",
        "network": "network of the run containers: none (default), bridge, host or a network's name",
        "gpus": "all, none, or devices such as 0,1 (default: all where the engine has the NVIDIA runtime)",
        "env": "K=V for the run containers (repeatable)",
        "shm_size": "shared memory of the run containers (32g)",
        "metrics_file": "JSON (or JSONL: its last object) the command writes in the container "
        "(default: its last JSON line)",
        "volume": "docker -v SRC:DST[:ro] for the run containers (repeatable: model, benchmark, cache)",
        "keep": "a directory in the container copied next to each run's log (--suite: the bench's output)",
        "farm": "farm file mapping platforms to engines, as for build: the variants build and run on the "
        "platform's engine (default: farm.yaml at the project root, if any)",
    },
    iterable=["volume", "env"],
)
@one_line_errors
def bisect(
    c,
    recipe=DEFAULT_RECIPE,
    variants=None,
    platform=None,
    locked=False,
    offline=False,
    ca_bundle=None,
    run=None,
    search=False,
    metric=None,
    threshold=None,
    profiles=None,
    timeout=None,
    network=None,
    metrics_file=None,
    volume=None,
    gpus=None,
    env=None,
    shm_size=None,
    repeat=None,
    suite=None,
    keep=None,
    farm=None,
):
    """A/B images: one isolated image per variant (sharing every layer but the engine's), a command (or a
    bench suite) run in each, --repeat times interleaved; one table of medians, every run's full log kept,
    PNGs of TTFT and decode; --search bisects the patch stack for the first patch that changes the result."""
    cli_bisect.bisect(
        ROOT,
        recipe,
        variants,
        platform,
        locked,
        offline,
        ca_bundle,
        run,
        search,
        metric,
        threshold,
        profiles,
        timeout,
        network,
        metrics_file,
        volume,
        gpus,
        env,
        shm_size,
        repeat,
        suite,
        keep,
        farm,
    )


@task(
    help={
        "suite": "comma-separated: prefill, decode, story, tail, grid; or ksweep (alone, with --ks and --serve)",
        "url": "the server, http://HOST:PORT (default http://127.0.0.1:30000)",
        "serve": "shell command that starts the server (stopped after); ksweep: with {k} in it",
        "out": "output directory (default build/bench/SUITE-TIME)",
        "model": "model name (default: the first of /v1/models)",
        "api": "completions (default) or chat",
        "ignore_eos": "on (default: fixed output length) or off, for servers that refuse the field",
        "sizes": "prefill: prompt sizes in tokens (2048,8192,32768)",
        "runs": "prefill, decode: runs per case (3)",
        "max_tokens": "decode, story, grid: tokens generated (256)",
        "requests": "tail: requests (100)",
        "grid_sizes": "grid: input sizes (5000,10000,20000)",
        "concurrencies": "grid: streams (1,5,10,20)",
        "warmup": "unmeasured requests per suite and shape (1)",
        "ks": "ksweep: k values, e.g. 0,5,6,7",
        "health_timeout": "seconds to wait for /health (1800)",
        "request_timeout": "seconds per request (600)",
        "calibrate": "on (default: fit prompt sizes to the tokenizer first) or off (nothing before the measured "
        "requests)",
    }
)
@one_line_errors
def bench(
    c,
    suite="decode",
    url=None,
    serve=None,
    out=None,
    model=None,
    api=None,
    ignore_eos=None,
    sizes=None,
    runs=None,
    max_tokens=None,
    requests=None,
    grid_sizes=None,
    concurrencies=None,
    warmup=None,
    ks=None,
    health_timeout=None,
    request_timeout=None,
    calibrate=None,
):
    """The seed's benchmarks against an OpenAI-compatible streaming server (SGLang, vLLM, ...): one flat
    JSON object, the raw samples, the seed's tables, and PNGs (TTFT per case, the k sweep)."""
    return cli_bench.bench(
        ROOT,
        suite=suite,
        url=url,
        serve=serve,
        out=out,
        model=model,
        api=api,
        ignore_eos=ignore_eos,
        sizes=sizes,
        runs=runs,
        max_tokens=max_tokens,
        requests=requests,
        grid_sizes=grid_sizes,
        concurrencies=concurrencies,
        warmup=warmup,
        ks=ks,
        health_timeout=health_timeout,
        request_timeout=request_timeout,
        calibrate=calibrate,
    )


@task(
    help={
        "recipe": "recipe whose builds to publish",
        "registry": "HOST[:PORT] of the registry",
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
        "with, attached as a DSSE envelope (default: $SERVEBUILD_SIGN_KEY; never the key itself)",
    }
)
@one_line_errors
def publish(
    c,
    recipe=DEFAULT_RECIPE,
    registry=None,
    platform=None,
    variant=None,
    repository=None,
    tag=None,
    credentials=None,
    ca=None,
    force=False,
    no_verify=False,
    farm=None,
    sign_key=None,
):
    """Push each platform's smoke-tested image by digest, attach SBOM + manifest + provenance (+ its signature),
    write one OCI index under the tag and read it back."""
    cli_release.publish(
        ROOT, recipe, registry, platform, variant, repository, tag, credentials, ca, force, no_verify, farm, sign_key
    )


@task(
    help={
        "ref": "HOST[:PORT]/REPOSITORY:TAG to check",
        "credentials": "JSON file {username, password}, mode 600 (default: the Docker config's auths)",
        "ca": "PEM CA bundle the registry's certificate is checked against",
        "public_key": "PEM public key file: each platform's provenance must carry a DSSE signature under it "
        "over exactly the attached statement",
    },
    positional=["ref"],
)
@one_line_errors
def verify(c, ref=None, credentials=None, ca=None, public_key=None):
    """Check a published tag end to end: index, platform digests, labels, attached manifest/SBOM/provenance
    (and its signature, with --public-key), lock."""
    cli_release.verify(ROOT, ref, credentials, ca, public_key)


@task(
    help={
        "check": "HOST[:PORT]/REPOSITORY:TAG of a published image to rebuild and compare",
        "platform": "the platform of the tag's index to rebuild (default: this host's)",
        "credentials": "JSON file {username, password}, mode 600 (default: the Docker config's auths)",
        "ca": "PEM CA bundle the registry's certificate is checked against",
        "ca_bundle": "extra CA bundle for pip in the rebuild (a BuildKit secret, in no layer)",
        "committed": "RECIPE: rebuild it and compare with its committed id (RECIPE.ids.yaml), no registry",
        "variant": "with --committed: the A/B variant's committed id",
    }
)
@one_line_errors
def rebuild(c, check=None, platform=None, credentials=None, ca=None, ca_bundle=None, committed=None, variant=None):
    """Rebuild a published image (or, --committed, a recipe) from this checkout (--no-cache) and compare
    every layer and the config with the registry's (or the committed id); exit 1 naming the first
    differing layer."""
    return cli_release.rebuild_check(ROOT, check, platform, credentials, ca, ca_bundle, committed, variant)


@task(
    help={
        "stack": "stack to regenerate: a directory constraints/STACK with an inputs.yaml",
        "target": "only this target, e.g. py3.11-linux-amd64 (repeatable; default: all)",
        "check": "regenerate into a temp dir and fail if the committed files differ",
    },
    iterable=["target"],
)
@one_line_errors
def deps(c, stack=None, target=None, check=False):
    """Regenerate a stack's hashed requirement sets from constraints/STACK/inputs.yaml (uv pip compile)."""
    cli_lock.deps(ROOT, stack, target, check)
