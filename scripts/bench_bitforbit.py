"""Bit for bit across engines, by hand (issue 20): build a recipe for linux/amd64 with --no-cache on this
machine's engine (umask 022) and on a second dockerd started here (its own data root, exec root, bridge
and an empty build cache; umask 077), then print both image ids, the layers side by side and the
wall time of each build. Too heavy for CI with the engine images (two cold 9 GB builds); CI proves
the toy fixture on two engines (tests/integration/test_farm.py).

    .venv/bin/python scripts/bench_bitforbit.py RECIPE [--variant V]

The second engine is the farm test's (tests/integration/test_farm.py: SecondEngine); the base images
are copied to it with docker save | docker load. Needs the disk for two copies of the image; the
build dir build/RECIPE/linux-amd64 is the second build's afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from integration.test_farm import DOCKER, SecondEngine, tls_entry  # noqa: E402
from servebuild.cli import build as cli_build  # noqa: E402
from servebuild.recipe.load import load_recipe  # noqa: E402


def layers(run, ref: str) -> list[str]:
    return json.loads(run("image", "inspect", "--format", "{{json .RootFS.Layers}}", ref).stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--variant")
    args = ap.parse_args()
    tag = f"servebuild-bitforbit/{args.recipe}:amd64"
    bases = sorted({getattr(load_recipe(args.recipe, ROOT).recipe.bases, s).ref.replace("{arch}", "amd64")
                    for s in ("build", "runtime")})

    def node1(*a, check=True):
        return subprocess.run([DOCKER, *a], check=check, capture_output=True, text=True)

    node2 = SecondEngine()
    timings = {}
    try:
        node2.start()
        save = subprocess.Popen([DOCKER, "save", *bases], stdout=subprocess.PIPE)
        node2.docker("load", stdin=save.stdout)
        if save.wait() != 0:
            raise SystemExit(f"docker save {' '.join(bases)} failed on this engine")
        with tempfile.TemporaryDirectory() as tmp:
            farm = Path(tmp) / "farm.yaml"
            farm.write_text("platforms:\n  linux/amd64:\n" + tls_entry(node2))
            for name, umask, farm_file in (("node 1", 0o022, None), ("node 2", 0o077, str(farm))):
                old = os.umask(umask)
                start = time.monotonic()
                try:
                    cli_build.build(ROOT, args.recipe, "linux/amd64", tag, no_cache=True, variant=args.variant,
                                    farm=farm_file)
                finally:
                    os.umask(old)
                timings[name] = time.monotonic() - start
        ids = [run("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip() for run in (node1, node2.docker)]
        a, b = layers(node1, tag), layers(node2.docker, tag)
        print(f"\n{args.recipe}{' variant ' + args.variant if args.variant else ''}, linux/amd64, --no-cache:")
        print(f"  node 1 (umask 022): {ids[0]}  {timings['node 1']:.0f} s")
        print(f"  node 2 (umask 077): {ids[1]}  {timings['node 2']:.0f} s")
        for i in range(max(len(a), len(b))):
            x, y = (a[i] if i < len(a) else "-"), (b[i] if i < len(b) else "-")
            print(f"  layer {i}: {x[:19]} {y[:19]} {'same' if x == y else 'DIFFERENT'}")
        print(f"  identical: {ids[0] == ids[1]}")
        return 0 if ids[0] == ids[1] else 1
    finally:
        node2.remove()
        node1("image", "rm", tag, check=False)


if __name__ == "__main__":
    sys.exit(main())
