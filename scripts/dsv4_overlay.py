#!/usr/bin/env python3
"""The recipe's SGLang patch stack as an overlay of patched files, for a GPU host with no network and no
Docker (issue 44): made here from the real release wheel with servebuild's own source preparation, checked
here, applied over the installed wheel there (scripts/dsv4_device.sh pack/install).

    python scripts/dsv4_overlay.py make  --wheel SGLANG.whl --out DIR [--recipe sglang-native-fp8] [--variant local-stack]
    python scripts/dsv4_overlay.py check --wheel SGLANG.whl --overlay DIR
    python3 DIR/../dsv4_overlay.py apply --overlay DIR --site SITE

make   the variant's stack prepared as an image build prepares it (servebuild.sources.prepare: the wheel laid
       out under python/, each patch applied in order, the patched Python checked statically for 3.12), from a
       private source cache seeded with the wheel by its sha256 (offline: nothing is fetched); DIR/sglang/...
       holds every file the stack changes or adds, DIR/overlay.json their wheel and patched sha256s, the
       patches and what was left out. The variant is local-stack by default: PR #33276 comes from the
       upstream git mirror (~/.cache/servebuild/git/, `git diff COMMIT^1 COMMIT`), which a host without
       GitHub lacks; --variant final takes it where the mirror holds the commit.
check  every file of the overlay against the wheel with the stack's patch files applied by GNU patch (-p2 strips
       a/python/), byte for byte, so the overlay differs from the wheel only by the stack; every patched
       file in the overlay; every .py compiles (py_compile).
apply  standard library only (the device's python3): each target in SITE must be the wheel's file (its sha256 in
       overlay.json) or already the patched one (a second install), or absent where the stack adds it; then
       every file is copied over. A mismatch is one line, exit 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import py_compile
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "python/"  # the wheel-overlay mode's prefix: the wheel's sglang/ is the source tree's python/sglang/
MANIFEST = "overlay.json"


class OverlayError(Exception):
    """One line for the user."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make(wheel: Path, out: Path, recipe: str, variant: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from servebuild.recipe.load import load_recipe
    from servebuild.sources.prepare import prepare_engine_source
    from servebuild.sources.stack import SourceCache

    loaded = load_recipe(recipe, ROOT)
    if variant:
        loaded = loaded.with_variant(variant)
    engine = loaded.recipe.engine
    digest = sha256(wheel.read_bytes())
    with tempfile.TemporaryDirectory(prefix="dsv4-overlay-") as tmp:
        cache_root = Path(tmp) / "cache"
        seeded = cache_root / "artifacts" / digest / wheel.name
        seeded.parent.mkdir(parents=True)
        shutil.copyfile(wheel, seeded)
        cache = SourceCache(cache_root, offline=True, recipe=recipe)
        prepared = prepare_engine_source(loaded, "linux/amd64", cache, Path(tmp) / "work", offline=True)
        if prepared.tree.get("sha256") != digest:
            raise OverlayError(f"{wheel.name}: not the wheel {recipe}'s requirement pins for linux/amd64 py3.12")
        if prepared.deleted:
            raise OverlayError(f"the stack deletes {prepared.deleted[0]}: an overlay cannot carry a deletion")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        files: dict[str, dict] = {}
        with zipfile.ZipFile(wheel) as whl, tarfile.open(prepared.tarball) as tar:
            names = set(whl.namelist())
            members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
            for path in prepared.changed_files():
                rel = path.removeprefix(PREFIX)
                member = members.get(path) or members.get(f"{tarball_root(members)}{path}")
                if member is None or not member.isfile():
                    raise OverlayError(f"{path}: not a file of the prepared tarball")
                data = tar.extractfile(member).read()
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                (out / rel).write_bytes(data)
                files[rel] = {"wheel_sha256": sha256(whl.read(rel)) if rel in names else None, "sha256": sha256(data)}
    stack = [e for e in engine.source.patches]
    manifest = {
        "recipe": recipe,
        "variant": variant or None,
        "wheel": {"file": wheel.name, "sha256": digest},
        "patches": [
            {
                "id": e.id,
                "file": e.file,
                "pr": e.pr,
                "commit": e.commit,
                "sha256": next(p.sha256 for p in prepared.patches if p.id == e.id),
            }
            for e in stack
        ],  # fmt: skip
        "left_out": {
            e.id: f"PR #{e.pr} at {e.commit}: from the upstream git mirror, not in this variant"
            for e in load_recipe(recipe, ROOT).recipe.engine.source.patches
            if e.id not in {s.id for s in stack}
        },  # fmt: skip
        "tarball_sha256": prepared.tarball_sha256,
        "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def tarball_root(members: dict) -> str:
    """The folder the prepared tarball puts the tree under, if any (e.g. 'src/')."""
    first = next(iter(members), "")
    return first.split("/", 1)[0] + "/" if "/" in first and not first.startswith(PREFIX) else ""


def read_manifest(overlay: Path) -> dict:
    try:
        manifest = json.loads((overlay / MANIFEST).read_text())
        files = manifest["files"]
        if not isinstance(files, dict) or not files:
            raise ValueError("no files")
        for rel in files:
            if rel.startswith("/") or ".." in Path(rel).parts or not rel.startswith("sglang/"):
                raise ValueError(f"{rel!r} is not a path under sglang/")
        return manifest
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OverlayError(f"{overlay / MANIFEST}: not an overlay manifest ({exc})") from None


def check(wheel: Path, overlay: Path) -> dict:
    """The overlay is the wheel with the stack's patch files applied (GNU patch -p2), and it compiles."""
    manifest = read_manifest(overlay)
    if sha256(wheel.read_bytes()) != manifest["wheel"]["sha256"]:
        raise OverlayError(f"{wheel.name}: not the wheel the overlay was made from")
    if shutil.which("patch") is None:
        raise OverlayError("GNU patch is not installed here")
    with tempfile.TemporaryDirectory(prefix="dsv4-overlay-check-") as tmp:
        base = Path(tmp) / "python"
        touched: set[str] = set()
        with zipfile.ZipFile(wheel) as whl:
            for entry in manifest["patches"]:
                if not entry.get("file"):
                    raise OverlayError(f"{entry['id']}: no patch file to check against (a PR entry)")
                text = (ROOT / entry["file"]).read_text()
                for line in text.splitlines():
                    if line.startswith("+++ b/python/"):
                        touched.add(line[len("+++ b/python/") :].strip())
                for rel in touched:
                    if rel in whl.namelist() and not (base / rel).exists():
                        (base / rel).parent.mkdir(parents=True, exist_ok=True)
                        (base / rel).write_bytes(whl.read(rel))
                run = subprocess.run(["patch", "-p2", "--forward", "--batch", "--no-backup-if-mismatch", "-i",
                                      str(ROOT / entry["file"])], cwd=base, capture_output=True, text=True)  # fmt: skip
                if run.returncode != 0:
                    raise OverlayError(f"{entry['file']} does not apply with patch -p2: {run.stdout.strip()[-300:]}")
        if touched != set(manifest["files"]):
            raise OverlayError(f"the stack touches {sorted(touched ^ set(manifest['files']))}, the overlay differs")
        for rel in sorted(touched):
            ours, theirs = (overlay / rel).read_bytes(), (base / rel).read_bytes()
            if ours != theirs:
                raise OverlayError(f"{rel}: the overlay's file is not the wheel's with the stack's patches")
            if sha256(ours) != manifest["files"][rel]["sha256"]:
                raise OverlayError(f"{rel}: sha256 is not the manifest's")
            if rel.endswith(".py"):
                try:
                    py_compile.compile(str(overlay / rel), cfile=str(Path(tmp) / "c.pyc"), doraise=True)
                except py_compile.PyCompileError as exc:
                    raise OverlayError(f"{rel}: does not compile: {exc.msg.strip().splitlines()[-1]}") from None
    return {"files": sorted(touched), "patches": [e["id"] for e in manifest["patches"]]}


def apply(overlay: Path, site: Path) -> list[str]:
    manifest = read_manifest(overlay)
    plan = []
    for rel, want in sorted(manifest["files"].items()):
        target = site / rel
        have = sha256(target.read_bytes()) if target.is_file() else None
        if have == want["sha256"]:
            continue  # already the stack's
        if have != want["wheel_sha256"]:
            what = "absent" if have is None else f"sha256 {have[:12]}"
            raise OverlayError(f"{target}: {what}, neither the wheel's file nor the stack's: install the wheel first")
        plan.append(rel)
    for rel in plan:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(overlay / rel, site / rel)
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dsv4_overlay.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--wheel", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--recipe", default="sglang-native-fp8")
    m.add_argument("--variant", default="local-stack")
    c = sub.add_parser("check")
    c.add_argument("--wheel", required=True)
    c.add_argument("--overlay", required=True)
    a = sub.add_parser("apply")
    a.add_argument("--overlay", required=True)
    a.add_argument("--site", required=True)
    args = ap.parse_args(argv)
    try:
        for name in ("wheel", "overlay", "site"):
            given = getattr(args, name, None)
            if given is not None and not (Path(given).is_dir() if name != "wheel" else zipfile.is_zipfile(given)):
                raise OverlayError(f"--{name} {given}: not {'a wheel' if name == 'wheel' else 'a folder'}")
        if args.cmd == "make":
            done = make(Path(args.wheel), Path(args.out), args.recipe, args.variant)
            print(f"overlay: {len(done['files'])} files of {', '.join(p['id'] for p in done['patches'])}"
                  f"{'; left out ' + ', '.join(done['left_out']) if done['left_out'] else ''}")  # fmt: skip
        elif args.cmd == "check":
            done = check(Path(args.wheel), Path(args.overlay))
            print(f"overlay checked: {len(done['files'])} files are the wheel's with {', '.join(done['patches'])}"
                  " (patch -p2), the .py ones compile")  # fmt: skip
        else:
            done = apply(Path(args.overlay), Path(args.site))
            print(f"overlay applied: {len(done)} files replaced" + (f" ({', '.join(done)})" if done else ""))
    except OverlayError as exc:
        print(f"dsv4_overlay: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the project's own one-line errors (InputError, Refused, ...)
        if type(exc).__module__.startswith("servebuild"):
            print(f"dsv4_overlay: {exc}", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
