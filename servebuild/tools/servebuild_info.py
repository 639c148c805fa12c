"""What this image is, from what its build left in it (runs in the image; standard library only).

usage: python /opt/servebuild/tools/servebuild_info.py [--json] [--manifest FILE]

Reads the build manifest ($SERVEBUILD_MANIFEST, else /opt/servebuild/manifest.json), the profile check's
record and the seed's record beside it, and prints: the recipe and variant, the engine and its version,
the tree it was built from (a release sdist: the tag's commit and the commit the sdist says it was cut from),
each patch of the stack (its PR and commit or its file, and the files it changes), the engine each
build-time stage ran on, each launch profile with the parser that accepted it, and the kernels the seed
holds. --json prints the same as one JSON object. A missing or unreadable manifest is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

MANIFEST = "/opt/servebuild/manifest.json"


def _read(path: str, what: str, required: bool) -> dict:
    """A JSON object from `path`; {} for an optional one that is absent. Raises ValueError with one line."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        if required:
            raise ValueError(f"{path}: no {what} (is this an image servebuild built?)") from None
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: the {what} cannot be read: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the {what} is not a JSON object")
    return data


def _patch(entry: dict) -> dict:
    origin = (
        f"PR #{entry['pr']} at {str(entry.get('commit'))[:12]}"
        if entry.get("pr") is not None
        else entry.get("file") or str(entry.get("commit"))[:12]
    )
    return {"id": entry.get("id"), "from": origin, "files": list(entry.get("files") or [])}


def _tree(source: dict) -> str:
    """Where the unpatched tree came from: the commit, or the release artifact, the tag's commit and the
    commit the artifact says it was cut from (its version file's commit_id, as short as it is there)."""
    tree = source.get("tree") or {}
    if tree.get("from", "git") == "git":
        return f"git commit {str(tree.get('commit') or source.get('commit'))[:12]}"
    line = f"{tree.get('file')} ({tree.get('from')}) of the tag commit {str(tree.get('tag_commit'))[:12]}"
    if "version_file" not in tree:
        return line
    if tree.get("sdist_commit") is None:
        return f"{line}; its {tree['version_file']} names no commit"
    return f"{line}, cut from commit {tree['sdist_commit']} ({tree['version_file']}: commit_id = {tree.get('commit_id')!r})"


def describe(manifest_path: str) -> dict:
    manifest = _read(manifest_path, "build manifest", required=True)
    here = os.path.dirname(manifest_path)
    checked = _read(os.path.join(here, "profiles-checked.json"), "profile check's record", required=False)
    seed = _read(os.path.join(here, "seed", "aot.json"), "seed's record", required=False)
    recipe, engine = manifest.get("recipe") or {}, manifest.get("engine") or {}
    launch = manifest.get("launch") or {}
    parsed = checked.get("profiles") or {}
    return {
        "recipe": recipe.get("name"),
        "variant": recipe.get("variant"),
        "platform": manifest.get("platform"),
        "engine": (
            {
                "name": engine.get("name"),
                "version": engine.get("installed_version") or engine.get("version"),
                "release": engine.get("version"),
                "install": engine.get("install"),
                "tree": _tree(engine["source"]) if engine.get("source") else None,
                "patches": [_patch(p) for p in (engine.get("source") or {}).get("patches") or []],
            }
            if engine
            else None
        ),
        "stages": {name: stage.get("on") for name, stage in sorted((manifest.get("stages") or {}).items())},
        "profiles": {name: (parsed.get(name) or {}).get("parsed_by") for name in launch.get("profiles") or []},
        "default_profile": launch.get("default"),
        "checked_by": (
            f"{checked.get('engine')} {checked.get('version')}"
            + (f" with the variant's {', '.join(checked['variant_files'])}" if checked.get("variant_files") else "")
            if checked
            else None
        ),
        "seed_kernels": [f"{k.get('builder')}{tuple(k.get('args') or ())}" for k in seed.get("kernels") or []],
    }


def text(info: dict) -> str:
    lines = [f"image: {info['recipe']}, variant {info['variant'] or '(none)'}, {info['platform']}"]
    engine = info["engine"]
    if engine:
        lines.append(f"engine: {engine['name']} {engine['version']} ({engine['install']} of {engine['release']})")
        if engine["tree"]:
            lines.append(f"tree: {engine['tree']}")
        lines.append(f"patches: {len(engine['patches'])}")
        lines += [f"  {p['id']} ({p['from']}): {', '.join(p['files'])}" for p in engine["patches"]]
    for stage, on in info["stages"].items():
        lines.append(f"{stage} stage ran on: {on}")
    if info["profiles"]:
        lines.append(f"profiles (default {info['default_profile']}), checked by {info['checked_by'] or 'nothing'}:")
        lines += [f"  {name}: {how or 'not checked'}" for name, how in info["profiles"].items()]
    lines.append(f"seed: {len(info['seed_kernels'])} kernels")
    lines += [f"  {k}" for k in info["seed_kernels"]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="what this image is, from its build manifest")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--manifest", default=os.environ.get("SERVEBUILD_MANIFEST") or MANIFEST)
    args = parser.parse_args(argv)
    try:
        info = describe(args.manifest)
    except ValueError as exc:
        print(f"servebuild-info: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=1, sort_keys=True) if args.json else text(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
