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
from servebuild.cli.bisect import BisectArgs
from servebuild.cli.build import BuildArgs
from servebuild.cli.front import interrupts_stop, one_line_errors, options_task, parse_errors_exit_2
from servebuild.cli.release import PublishArgs
from servebuild.cli.test import TestImageArgs
from servebuild.cli.warm import WarmArgs
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


@options_task(BuildArgs)
def build(c, args):
    """Build a recipe into an image through the Docker engine with BuildKit (several platforms: each on
    its farm engine, concurrently)."""
    cli_build.build(ROOT, args)


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


@options_task(TestImageArgs)
def test_image(c, args):
    """Run the testinfra smoke suite against an image (in a throwaway container) or a host."""
    return cli_test.test_image(ROOT, args)


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


@options_task(WarmArgs)
def warm(c, args):
    """Run a command in the image, keep the kernels it compiled: IMAGE-warm = the image plus one cache layer."""
    return cli_warm.warm(ROOT, args)


@options_task(BisectArgs)
def bisect(c, args):
    """A/B images: one isolated image per variant (sharing every layer but the engine's), a command (or a
    bench suite) run in each, --repeat times interleaved; one table of medians, every run's full log kept,
    PNGs of TTFT and decode; --search bisects the patch stack for the first patch that changes the result."""
    cli_bisect.bisect(ROOT, args)


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


@options_task(PublishArgs)
def publish(c, args):
    """Push each platform's smoke-tested image by digest, attach SBOM + manifest + provenance (+ its signature),
    write one OCI index under the tag and read it back."""
    cli_release.publish(ROOT, args)


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
