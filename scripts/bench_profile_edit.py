"""Rebuild seconds and new layer bytes after a one-flag launch-profile edit of an engine image.

usage: .venv/bin/python scripts/bench_profile_edit.py --recipe sglang-native-fp8-bookworm
       [--variant local-stack] [--parent sglang-native-fp8] [--ca-bundle FILE]
       (--ca-bundle defaults to $SERVEBUILD_CA_BUNDLE, else the system bundle where it exists)

Works in a throwaway clone of this checkout's HEAD (commit first): builds the recipe there (warm if the engine's cache
already holds it), edits one flag of the parent recipe's default profile (--mem-fraction-static
0.96 -> 0.95), relocks, rebuilds, and prints the rebuild time and the layers the edited image has
that the first does not (their bytes, read from the engine's layer store). Both images are removed.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from servebuild.check import bisect  # noqa: E402
from servebuild.build.docker import DockerClient  # noqa: E402


def build(clone: Path, recipe: str, variant: str, tag: str, ca: str | None) -> float:
    cmd = [str(ROOT / ".venv/bin/invoke"), "build", "--recipe", recipe, "--platform", "linux/amd64", "--tag", tag]
    cmd += ["--variant", variant] if variant else []
    cmd += ["--ca-bundle", ca] if ca else []
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=clone, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"build of {tag} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="sglang-native-fp8-bookworm")
    ap.add_argument("--variant", default="local-stack")
    ap.add_argument("--parent", default="sglang-native-fp8", help="the recipe file whose profile is edited")
    # as bench_engine_image.py: a host whose HTTPS goes through an intercepting proxy needs its CA in the
    # build (pip then said "No matching distribution" for the first pin it fetched)
    default_ca = os.environ.get("SERVEBUILD_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    ap.add_argument("--ca-bundle", default=default_ca if Path(default_ca).exists() else None)
    args = ap.parse_args()
    docker = DockerClient()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        first, second = "sbbench/profile-edit:a", "sbbench/profile-edit:b"
        try:
            first_s = build(clone, args.recipe, args.variant, first, args.ca_bundle)
            path = clone / "recipes" / f"{args.parent}.yaml"
            text = path.read_text()
            edited = text.replace(
                '- --mem-fraction-static\n        - "0.96"', '- --mem-fraction-static\n        - "0.95"', 1
            )
            if edited == text:
                sys.exit(f"{path.name}: no --mem-fraction-static 0.96 to edit")
            path.write_text(edited)
            for name in {args.parent, args.recipe}:
                subprocess.run(
                    [str(ROOT / ".venv/bin/invoke"), "lock", "--recipe", name],
                    cwd=clone,
                    capture_output=True,
                    check=True,
                )
            second_s = build(clone, args.recipe, args.variant, second, args.ca_bundle)
            a, b = bisect.layer_sizes(docker, first), bisect.layer_sizes(docker, second)
            old = {diff for diff, _ in a}
            new = [(diff, size) for diff, size in b if diff not in old]
            record = {
                "recipe": args.recipe,
                "variant": args.variant,
                "first_build_s": round(first_s, 1),
                "rebuild_after_one_flag_edit_s": round(second_s, 1),
                "layers": len(b),
                "new_layers": len(new),
                "new_layer_bytes": sum(size or 0 for _, size in new),
            }
            print(json.dumps(record, indent=2))
        finally:
            for tag in (first, second):
                docker.remove_image(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
