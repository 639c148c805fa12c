"""Benchmark one engine recipe on this machine's engine: a cold build (`--no-cache`; with --prune
the whole builder cache is pruned first, which also empties pip's cache mounts), a warm rebuild
with nothing changed, each further variant (only its engine layers differ), then a rebuild of the
second variant after a one-line edit of the first local patch it carries; image and base sizes,
what the runtime adds (venv, engine, apt), unique bytes per variant.

Usage: .venv/bin/python scripts/bench_engine_image.py [--prune] RECIPE PLATFORM VARIANT [VARIANT...]
A VARIANT is a recipe variant's name, or NAME=ID+ID+... (an ad-hoc stack of patch ids, `NAME=` empty).
Builds run in a scratch copy of the project's recipes, patches, constraints and recordings (the patch edit
never touches the work tree). Prints a table and writes build/bench/RECIPE-ARCH.json. Figures, not
assertions: machines are noisy.
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

from servebuild.check import bisect  # noqa: E402
from servebuild.cli.lock import lock  # noqa: E402
from servebuild.build.docker import DockerClient  # noqa: E402
from servebuild.build.run import build  # noqa: E402
from servebuild.plan.make import BuildOptions, make_plan  # noqa: E402

CA = os.environ.get("SERVEBUILD_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")


def timed_build(docker, root, recipe, platform, spec, no_cache=False):
    name, _, stack = spec.partition("=")
    options = BuildOptions(
        platform=platform,
        variant=name,
        echo=False,
        no_cache=no_cache,
        stack=tuple(filter(None, stack.split("+"))) if "=" in spec else None,
        ca_bundle=Path(CA) if Path(CA).exists() else None,
    )
    plan = make_plan(root, recipe, options)
    start = time.monotonic()
    result = build(plan, docker)
    return result, time.monotonic() - start


def du(docker, tag, platform, paths):
    out = docker.run(
        "run", "--rm", "--network", "none", "--platform", platform, "--entrypoint", "du", tag, "-sb", *paths
    ).stdout
    return {line.split("\t")[1]: int(line.split("\t")[0]) for line in out.splitlines()}


def scratch_project() -> Path:
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="servebuild-bench-"))
    for part in ("recipes", "patches", "constraints", "recordings"):
        shutil.copytree(ROOT / part, root / part)
    return root


def stages(log_path: Path) -> dict:
    """Per build-time stage: shared with the release (the build's own note) and whether BuildKit ran any
    of its steps for this build (every step CACHED), read from the build log."""
    import re

    log = log_path.read_text()
    out = {}
    for m in re.finditer(r"^servebuild: (aot|profile-check): (shared|built on)", log, re.M):
        steps = re.findall(rf"^#(\d+) \[{m.group(1)} \d+/\d+\]", log, re.M)
        cached = all(re.search(rf"^#{n} CACHED$", log, re.M) for n in steps) if steps else None
        out[m.group(1)] = {"shared": m.group(2) == "shared", "cached": cached}
    return out


def edit_local_patch(root: Path, recipe: str, variant_spec: str) -> str:
    """A one-line change in an added comment of the first local patch the variant carries; the
    recipes' recorded sha256 follows and the recipe is locked again (offline). Returns the patch's path."""
    import hashlib
    import yaml
    from servebuild.recipe.load import load_recipe

    loaded = load_recipe(recipe, root)
    name, _, stack = variant_spec.partition("=")
    ids = stack.split("+") if "=" in variant_spec else loaded.recipe.variants[name].patches
    entries = {e.id: e for e in loaded.recipe.engine.source.patches + loaded.recipe.engine.source.optional_patches}
    entry = next(entries[i] for i in ids if entries[i].file)
    path = root / entry.file
    old = path.read_text()
    line = next(x for x in old.splitlines() if x.startswith("+") and "# " in x)
    path.write_text(old.replace(line, line + " (edited)", 1))
    new_sha = hashlib.sha256(path.read_bytes()).hexdigest()
    for recipe_file in (root / "recipes").glob("*.yaml"):
        if not recipe_file.name.endswith(".lock.yaml"):  # the lock follows by `invoke lock`, below
            recipe_file.write_text(recipe_file.read_text().replace(entry.sha256, new_sha))
    yaml.safe_load((root / "recipes" / f"{recipe}.yaml").read_text())
    lock(root, recipe, offline=True)  # as a user does after an edit: the patch's hash in the lock
    return entry.file


def main() -> int:
    args = sys.argv[1:]
    prune = "--prune" in args
    recipe, platform, variants = (
        [a for a in args if a != "--prune"][0],
        [a for a in args if a != "--prune"][1],
        [a for a in args if a != "--prune"][2:],
    )
    docker = DockerClient()
    if prune:
        subprocess.run([docker.client, "builder", "prune", "-af"], capture_output=True)
    root = scratch_project()
    rows = []
    result, cold = timed_build(docker, root, recipe, platform, variants[0], no_cache=True)
    _, warm = timed_build(docker, root, recipe, platform, variants[0])
    rows.append(
        {
            "variant": variants[0],
            "build_s": round(cold),
            "warm_rebuild_s": round(warm, 1),
            "tag": result.tag,
            "stages": stages(result.log_path),
        }
    )
    for variant in variants[1:]:
        other, seconds = timed_build(docker, root, recipe, platform, variant)
        rows.append(
            {"variant": variant, "build_s": round(seconds, 1), "tag": other.tag, "stages": stages(other.log_path)}
        )
        print(f"variant {variant}: {seconds:.1f} s, {rows[-1]['stages']}", flush=True)
    edited = edit_local_patch(root, recipe, variants[1]) if len(variants) > 1 else None
    patch_edit_s = timed_build(docker, root, recipe, platform, variants[1])[1] if edited else None
    total = sum(r["build_s"] for r in rows)
    sizes = {r["variant"]: bisect.layer_sizes(docker, r["tag"]) for r in rows}
    unique = bisect.unique_bytes(sizes) if len(sizes) > 1 else {}
    image = int(docker.image_inspect(result.tag)["Size"])
    manifest = json.loads(result.manifest_path.read_text())
    base = int(docker.image_inspect(manifest["bases"]["runtime"]["resolved"])["Size"])
    parts = du(docker, result.tag, platform, ["/opt/venv", "/opt/engine", "/usr", "/opt/servebuild"])
    report = {
        "recipe": recipe,
        "platform": platform,
        "image_bytes": image,
        "runtime_base_bytes": base,
        "runtime_parts_bytes": parts,
        "rows": [{**r, "unique_bytes": unique.get(r["variant"])} for r in rows],
        "all_variants_over_cold": round(total / rows[0]["build_s"], 3),
        "pruned_first": prune,
        "patch_edit": {
            "patch": edited,
            "variant": variants[1] if edited else None,
            "rebuild_s": round(patch_edit_s, 1) if edited else None,
            "over_cold": round(patch_edit_s / rows[0]["build_s"], 4) if edited else None,
        },
        "unique_over_image": {r["variant"]: round((unique.get(r["variant"]) or 0) / image, 5) for r in rows},
    }
    out = ROOT / "build" / "bench" / f"{recipe}-{platform.split('/')[1]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    from servebuild.errors import ServebuildError

    try:
        sys.exit(main())
    except ServebuildError as exc:  # a failed build or a bad recipe: its one line, no traceback
        sys.exit(f"bench_engine_image.py: {exc}")
