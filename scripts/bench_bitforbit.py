"""Bit for bit across engines, by hand (issue 20): build a recipe for a platform (linux/amd64, or linux/arm64
under QEMU) with --no-cache on this
machine's engine (umask 022) and on a second dockerd started here (its own data root, exec root, bridge
and an empty build cache; umask 077), then print both image ids, the layers side by side and the
wall time of each build. Too heavy for CI with the engine images (two cold 9 GB builds); CI proves
the toy fixture and the torch pair on two engines (tests/integration/test_farm.py).

    .venv/bin/python scripts/bench_bitforbit.py RECIPE [--variant V] [--other-variant W] [--json F]
                                                [--platform linux/arm64] [--record-id]

--other-variant W first builds W on this engine the usual way (with the cache), then V with
--no-cache: the variants share every layer below the engine's when the --no-cache build made the
same bytes as the cache records W was built from (the case that once gave two copies of the venv).

Afterwards, on node 1's image: the cost of the settle every step pays (the marker and the two scans
of the image's filesystem, with nothing to touch), the cost of settling the whole venv (every file
touched), and the import time of the engine (or torch) with the image's checked-hash .pyc, with
timestamp .pyc, and with none.

The second engine is the farm test's (tests/integration/test_farm.py: SecondEngine, whose farm entry
builds with the host's network); the base images are copied to it with docker save | docker load.
Needs the disk for two copies of the image; each build's log is kept in build/bench/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from integration.test_farm import DOCKER, SecondEngine, tls_entry  # noqa: E402
from integration.conftest import HOST_CA  # noqa: E402
from servebuild.build import bases as base_images, committed  # noqa: E402
from servebuild.lock.lockfile import lock_display  # noqa: E402
from servebuild.build.docker import DockerClient, Endpoint  # noqa: E402
from servebuild.build.copyups import copy_up_only, image_layers  # noqa: E402
from servebuild.cli import build as cli_build  # noqa: E402
from servebuild.recipe.load import load_recipe  # noqa: E402
from servebuild.render.settle import SETTLE, START  # noqa: E402

BENCH = ROOT / "build" / "bench"


def layers(run, ref: str) -> list[str]:
    return json.loads(run("image", "inspect", "--format", "{{json .RootFS.Layers}}", ref).stdout)


def step_times(log: Path) -> list[tuple[float, str]]:
    """(seconds, step name) of every step BuildKit ran (not CACHED), slowest first."""
    names, out = {}, []
    for line in log.read_text(errors="replace").splitlines():
        if m := re.match(r"#(\d+) (\[.*)", line):
            names[m.group(1)] = m.group(2)[:90]
        elif m := re.match(r"#(\d+) DONE ([0-9.]+)s", line):
            if m.group(1) in names:
                out.append((float(m.group(2)), names[m.group(1)]))
    return sorted(out, reverse=True)


def in_image(tag: str, script: str) -> tuple[float, str]:
    """Wall seconds and output of `bash -c script` in a throwaway container of `tag` (no network)."""
    start = time.monotonic()
    proc = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", tag, "-c", script],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"in {tag}: {script[:80]!r} exited {proc.returncode}: {proc.stderr[-400:]}")
    return time.monotonic() - start, proc.stdout


def costs(tag: str, module: str) -> dict:
    """What settling costs on this image's filesystem, and what the .pyc policy costs at import (timed
    inside the container, so the container's start is not counted)."""

    def timed(before, body):
        script = f"{before}\nt0=$(date +%s%N); {body}; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 ))"
        return int(in_image(tag, script)[1].split()[-1]) / 1000

    out = {}
    # every step pays this: the marker, the scan for the newest input time, the settle's two scans
    out["settle_fixed_s"] = round(timed("true", f"{START} && true && {SETTLE}"), 2)
    # a step that wrote the whole venv: a fresh copy (new files in the container's own layer, newer
    # than the marker, as a pip step's are), then the settle that stamps every one of them
    out["venv_files"] = int(in_image(tag, "find /opt/venv -xdev | wc -l")[1].strip())
    out["settle_whole_venv_s"] = round(timed(f"{START} && cp -r /opt/venv /opt/venv-copy", SETTLE), 2)
    timer = (
        f"python - <<'PY'\nimport time, importlib\ns = time.perf_counter()\nimportlib.import_module({module!r})\n"
        f"print(time.perf_counter() - s)\nPY"
    )
    best = lambda prep: min(float(in_image(tag, prep + timer)[1].split()[-1]) for _ in range(3))  # noqa: E731
    out["import_checked_hash_pyc_s"] = round(best("export PYTHONDONTWRITEBYTECODE=1\n"), 2)
    out["import_timestamp_pyc_s"] = round(
        best(
            "python -m compileall -q -f --invalidation-mode timestamp /opt/venv /opt/engine/site >/dev/null 2>&1 || true\n"
            "export PYTHONDONTWRITEBYTECODE=1\n"
        ),
        2,
    )
    out["import_no_pyc_s"] = round(
        best("find /opt/venv /opt/engine -name '*.pyc' -delete 2>/dev/null\nexport PYTHONDONTWRITEBYTECODE=1\n"), 2
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--variant")
    ap.add_argument("--other-variant")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument(
        "--record-id",
        action="store_true",
        help="when both engines built one image, record it as the "
        "committed id (RECIPE.ids.yaml): an id is committed only once two engines agree",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="then run the smoke suite on node 1's image (its JIT checks: the seed's kernels load with no compile)",
    )
    ap.add_argument("--costs-only", metavar="IMAGE", help="no builds: only the settle and import costs on IMAGE")
    ap.add_argument(
        "--node1-built",
        action="store_true",
        help="node 1's --no-cache build is done already (`invoke build --no-cache --tag "
        "servebuild-bitforbit/RECIPE:ARCH`, its log still in the build dir): build on node 2 only. For QEMU "
        "builds of 20 minutes and more, where node 1's build ran beside other work",
    )
    ap.add_argument("--no-costs", action="store_true", help="skip the settle and import costs (slow under QEMU)")
    ap.add_argument(
        "--platform",
        default="linux/amd64",
        choices=("linux/amd64", "linux/arm64"),
        help="the platform both engines build (linux/arm64 runs under QEMU on an amd64 host)",
    )
    args = ap.parse_args()
    platform = args.platform
    arch = platform.split("/")[1]
    loaded = load_recipe(args.recipe, ROOT)
    module = loaded.recipe.engine.name if loaded.recipe.engine else "torch"
    if args.costs_only:
        print(json.dumps(costs(args.costs_only, module)))
        return 0
    tag = f"servebuild-bitforbit/{args.recipe}:{arch}"
    bases = sorted({getattr(loaded.recipe.bases, s).ref.replace("{arch}", arch) for s in ("build", "runtime")})
    BENCH.mkdir(parents=True, exist_ok=True)

    def build_log(variant) -> Path:  # where the build leaves its log (each build of the variant overwrites it)
        return ROOT / "build" / args.recipe / (variant or "") / platform.replace("/", "-") / "build.log"

    def kept_log(name: str) -> Path:  # where this bench keeps a copy, one per recipe, variant, arch and node
        return (
            BENCH
            / f"bitforbit-{args.recipe}{'-' + args.variant if args.variant else ''}-{arch}-{name.replace(' ', '-')}.log"
        )

    def node1(*a, check=True):
        return subprocess.run([DOCKER, *a], check=check, capture_output=True, text=True)

    node2 = SecondEngine()
    figures = {"recipe": args.recipe, "variant": args.variant, "platform": platform, "builds": {}}
    other_tag = f"servebuild-bitforbit/{args.recipe}:{args.other_variant}-{arch}" if args.other_variant else None
    try:
        node2.start()
        # node 2 bootstraps its own bases from the lock's Debian packages, with an empty artifact cache and
        # umask 077 (issue 29): nothing of node 1's is handed over
        client2 = DockerClient(endpoint=Endpoint(f"unix://{node2.sock}", network="host"))
        old = os.umask(0o077)
        try:
            with tempfile.TemporaryDirectory() as empty_cache:
                pins = base_images.pins_for(loaded, platform)
                for ref in bases:
                    start = time.monotonic()
                    made = base_images.bootstrap_base(
                        client2, pins, arch, ref, Path(empty_cache), loaded.recipe.name, lock_display(loaded)
                    )
                    mine = node1("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
                    figures.setdefault("bases", {})[ref] = {
                        "node1": mine,
                        "node2": made,
                        "identical": mine == made,
                        "node2_seconds": round(time.monotonic() - start),
                    }
                    print(f"  base {ref}: node 1 {mine}, node 2 (own bootstrap, empty cache) {made}")
        finally:
            os.umask(old)
        with tempfile.TemporaryDirectory() as tmp:
            farm = Path(tmp) / "farm.yaml"
            farm.write_text(f"platforms:\n  {platform}:\n" + tls_entry(node2))
            # (name, umask, farm file, --no-cache, variant, tag)
            runs = [
                ("node 1", 0o022, None, True, args.variant, tag),
                ("node 2", 0o077, str(farm), True, args.variant, tag),
            ]
            if other_tag:
                runs.insert(0, (f"node 1 {args.other_variant}", 0o022, None, False, args.other_variant, other_tag))
            if args.node1_built:  # node 1's image and log are there: keep the log, build node 2 only
                if node1("image", "inspect", tag, check=False).returncode:
                    sys.exit(f"bench_bitforbit.py: --node1-built: node 1 has no {tag}")
                runs = [r for r in runs if r[0] != "node 1"]
                kept = kept_log("node 1")
                shutil.copyfile(build_log(args.variant), kept)
                figures["builds"]["node 1"] = {
                    "umask": "0o022",
                    "no_cache": True,
                    "seconds": None,
                    "slowest_steps": step_times(kept)[:8],
                    "log": str(kept.relative_to(ROOT)),
                    "built_before": "invoke build --no-cache",
                }
            for name, umask, farm_file, no_cache, variant, build_tag in runs:
                old = os.umask(umask)
                start = time.monotonic()
                try:
                    cli_build.build(
                        ROOT,
                        cli_build.BuildArgs(
                            recipe=args.recipe,
                            platform=platform,
                            tag=build_tag,
                            no_cache=no_cache,
                            variant=variant,
                            farm=farm_file,
                            ca_bundle=str(HOST_CA) if HOST_CA.exists() else None,
                        ),
                    )
                finally:
                    os.umask(old)
                seconds = time.monotonic() - start
                kept = kept_log(name)
                shutil.copyfile(build_log(variant), kept)
                figures["builds"][name] = {
                    "umask": oct(umask),
                    "no_cache": no_cache,
                    "seconds": round(seconds),
                    "slowest_steps": step_times(kept)[:8],
                    "log": str(kept.relative_to(ROOT)),
                }
        ids = [run("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip() for run in (node1, node2.docker)]
        a, b = layers(node1, tag), layers(node2.docker, tag)
        figures.update(
            node1_id=ids[0],
            node2_id=ids[1],
            identical=ids[0] == ids[1],
            layers_differing=sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b)),
            layers=len(a),
        )
        print(f"\n{args.recipe}{' variant ' + args.variant if args.variant else ''}, {platform}, --no-cache:")
        print(f"  node 1 (umask 022): {ids[0]}  {figures['builds']['node 1']['seconds']} s")
        print(f"  node 2 (umask 077): {ids[1]}  {figures['builds']['node 2']['seconds']} s")
        for i in range(max(len(a), len(b))):
            x, y = (a[i] if i < len(a) else "-"), (b[i] if i < len(b) else "-")
            print(f"  layer {i}: {x[:19]} {y[:19]} {'same' if x == y else 'DIFFERENT'}")
        print(f"  identical: {ids[0] == ids[1]}")
        # node 2 has given all it is asked for: its image store and build cache go before the copy-up scan's
        # `docker save` needs room for the whole image (with 19 GB free, the scan of vLLM's image ran out of
        # disk after both engines had agreed, and nothing was recorded)
        node2.remove()
        # a directory only a copy-up put in a layer is there on one engine and not on another (build/copyups.py)
        figures["copy_up_only"] = [f"layer {i}: {p}" for i, p in copy_up_only(image_layers(DockerClient(), ids[0]))]
        print(f"  directories only a copy-up put in a layer: {', '.join(figures['copy_up_only']) or 'none'}")
        diff_ids, steps = committed.layers_of(DockerClient(), ids[0], platform)
        same, line = committed.verdict(loaded, platform, ids[0], diff_ids, steps, args.variant)
        figures["committed"] = {"matches": same, "line": line}
        print(f"  node 1's image {line}")
        if args.record_id and ids[0] == ids[1] and not figures["copy_up_only"]:
            base_id = node1(
                "image", "inspect", "--format", "{{.Id}}", loaded.recipe.bases.runtime.ref.replace("{arch}", arch)
            ).stdout.strip()
            committed.record(
                loaded,
                platform,
                committed.CommittedImage(image=ids[0], base=base_id, layers=diff_ids),
                args.variant,
            )
            print(f"  recorded {ids[0]} as the committed id of {committed.key(platform, args.variant)}")
        if other_tag:
            c = layers(node1, other_tag)
            shared = [i for i, (x, y) in enumerate(zip(a, c)) if x == y]
            sizes = json.loads(node1("image", "inspect", "--format", "{{json .Size}}", tag).stdout)
            figures["other_variant"] = {
                "variant": args.other_variant,
                "layers": len(c),
                "shared_prefix": len(shared),
                "first_difference": next((i for i, (x, y) in enumerate(zip(a, c)) if x != y), None),
            }
            print(
                f"  {args.other_variant} (built first, with the cache) shares {len(shared)} of {len(c)} layers with "
                f"{args.variant} --no-cache; first difference at layer {figures['other_variant']['first_difference']}"
                f" (image {sizes} bytes)"
            )
        if args.smoke:
            from servebuild.check import smoke

            out = BENCH / f"bitforbit-{args.recipe}-smoke"
            loaded_v = loaded.with_variant(args.variant) if args.variant else loaded
            figures["smoke_exit"] = smoke.test_image(DockerClient(), tag, loaded_v, out)
            print(f"  smoke suite on node 1's image: exit {figures['smoke_exit']} ({out}/smoke-junit.xml)")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        try:
            figures["costs"] = {"skipped": "--no-costs"} if args.no_costs else costs(tag, module)
        except SystemExit as exc:  # the builds' figures stand without them
            figures["costs"] = {"error": str(exc)}
        print(f"  costs on node 1's image: {json.dumps(figures['costs'])}")
        for name, build in figures["builds"].items():
            print(
                f"  {name}: {build['seconds']} s; slowest steps: "
                + "; ".join(f"{s:.1f} s {n}" for s, n in build["slowest_steps"][:5])
            )
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        return 0 if ids[0] == ids[1] and not figures["copy_up_only"] and not figures.get("smoke_exit") else 1
    finally:
        node2.remove()
        node1("image", "rm", tag, check=False)
        if other_tag:
            node1("image", "rm", other_tag, check=False)


if __name__ == "__main__":
    from servebuild.errors import ServebuildError

    try:
        sys.exit(main())
    except ServebuildError as exc:  # a failed build or a bad recipe: its one line, no traceback
        sys.exit(f"bench_bitforbit.py: {exc}")
