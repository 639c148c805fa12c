"""Benchmark one engine recipe on this machine's engine: a cold build (build cache pruned first),
a warm rebuild with nothing changed, then each further variant (only its engine layers differ);
image and base sizes, what the runtime adds (venv, engine, apt), unique bytes per variant.

Usage: .venv/bin/python scripts/bench_engine_image.py RECIPE PLATFORM VARIANT [VARIANT...]
A VARIANT is a recipe variant's name, or NAME=ID+ID+... (an ad-hoc stack of patch ids, `NAME=` empty).
Prints a table and writes build/bench/RECIPE-ARCH.json. Figures, not assertions: machines are noisy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from servebuild import bisect as ab  # noqa: E402
from servebuild.docker import DockerClient  # noqa: E402
from servebuild.pipeline import BuildOptions, build, make_plan  # noqa: E402

CA = os.environ.get("SERVEBUILD_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")


def timed_build(docker, recipe, platform, spec):
    name, _, stack = spec.partition("=")
    options = BuildOptions(platform=platform, variant=name, echo=False,
                           stack=tuple(filter(None, stack.split("+"))) if "=" in spec else None,
                           ca_bundle=Path(CA) if Path(CA).exists() else None)
    plan = make_plan(ROOT, recipe, options)
    start = time.monotonic()
    result = build(plan, docker)
    return result, time.monotonic() - start


def du(docker, tag, platform, paths):
    out = docker.run("run", "--rm", "--network", "none", "--platform", platform, "--entrypoint", "du", tag,
                     "-sb", *paths).stdout
    return {line.split("\t")[1]: int(line.split("\t")[0]) for line in out.splitlines()}


def main() -> int:
    recipe, platform, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
    docker = DockerClient()
    subprocess.run([docker.client, "builder", "prune", "-af"], capture_output=True)
    rows = []
    result, cold = timed_build(docker, recipe, platform, variants[0])
    _, warm = timed_build(docker, recipe, platform, variants[0])
    rows.append({"variant": variants[0], "build_s": round(cold), "warm_rebuild_s": round(warm, 1), "tag": result.tag})
    for variant in variants[1:]:
        other, seconds = timed_build(docker, recipe, platform, variant)
        rows.append({"variant": variant, "build_s": round(seconds, 1), "tag": other.tag})
    total = sum(r["build_s"] for r in rows)
    sizes = {r["variant"]: ab.layer_sizes(docker, r["tag"]) for r in rows}
    unique = ab.unique_bytes(sizes) if len(sizes) > 1 else {}
    image = int(docker.image_inspect(result.tag)["Size"])
    manifest = json.loads(result.manifest_path.read_text())
    base = int(docker.image_inspect(manifest["bases"]["runtime"]["resolved"])["Size"])
    parts = du(docker, result.tag, platform, ["/opt/venv", "/opt/engine", "/usr", "/opt/servebuild"])
    report = {"recipe": recipe, "platform": platform, "image_bytes": image, "runtime_base_bytes": base,
              "runtime_parts_bytes": parts, "rows": [{**r, "unique_bytes": unique.get(r["variant"])} for r in rows],
              "all_variants_over_cold": round(total / rows[0]["build_s"], 3),
              "unique_over_image": {r["variant"]: round((unique.get(r["variant"]) or 0) / image, 5) for r in rows}}
    out = ROOT / "build" / "bench" / f"{recipe}-{platform.split('/')[1]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
