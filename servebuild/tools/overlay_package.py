"""Runs inside the image (standard library only): relabel an installed distribution with the
version that names its patch stack, and (with --package/--tree) first make its package hold exactly
the patched tree: files the stack deletes are removed, changed files rewritten (and compiled), and
nothing else is touched, so the layer holds only what the patches change. With --deleted the tree
holds only the files the stack changes or adds (the build context then carries those, not the whole
tree), and the list names what it deletes: the package ends the same either way.

With --info-from DIR the release's dist-info is read from DIR (the engine stage keeps it out of the
shared engine layer) and the relabelled one is written into the site: the step deletes nothing of a
lower layer for the relabel, and a deletion is a whiteout, which Docker 20.10's BuildKit writes into
the layer with the clock of the export (so the layer, and every image holding it, would differ
from one build to the next)."""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import py_compile
import re
import shutil
import sys
from pathlib import Path


def record_row(site: Path, path: Path) -> list[str]:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [path.relative_to(site).as_posix(), f"sha256={digest}", str(len(data))]


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")
            if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.relative_to(root).parts}


def sync_tree(tree: Path, package: Path, deleted: list[Path] | None = None) -> list[Path]:
    """Make `package` hold exactly the files of `tree`, writing only what differs; return them.
    With `deleted` (package paths), `tree` holds only the files the stack changes or adds: those
    are written where they differ, the deleted ones removed, and nothing else is looked at."""
    want = _files(tree)
    gone = _files(package) - want if deleted is None else {
        rel for rel in deleted if (package / rel).is_file() or (package / rel).is_symlink()}
    for rel in sorted(gone):  # deleted (or renamed away) by the stack
        (package / rel).unlink()
        for stale in (package / rel).parent.joinpath("__pycache__").glob(f"{rel.stem}.*.pyc"):
            stale.unlink()
    changed = []
    for rel in sorted(want):
        src, dst = tree / rel, package / rel
        if dst.is_file() and not dst.is_symlink() and not src.is_symlink() and dst.read_bytes() == src.read_bytes():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() or dst.is_symlink():
            dst.unlink()
        shutil.copy2(src, dst, follow_symlinks=False)
        if rel.suffix == ".py":
            py_compile.compile(str(dst), doraise=True)
        changed.append(dst)
    return changed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", type=Path, required=True)
    ap.add_argument("--dist", required=True)
    ap.add_argument("--package", help="package directory to replace (with --tree)")
    ap.add_argument("--tree", type=Path, help="the patched package to put in its place")
    ap.add_argument("--version", required=True)
    ap.add_argument("--info-from", type=Path, help="where the release's dist-info is (read only; not in --site)")
    ap.add_argument("--deleted", type=Path, help="with --tree holding only the changed files: the tree paths the "
                    "stack deletes, one a line (those outside --deleted-under are not the package's)")
    ap.add_argument("--deleted-under", default="", help="the tree path of the package (with --deleted)")
    a = ap.parse_args()
    norm = re.sub(r"[-_.]+", "_", a.dist).lower()
    infos_in = lambda d: [p for p in d.glob("*.dist-info") if p.name.lower().startswith(norm + "-")]  # noqa: E731
    where = a.info_from or a.site
    infos = infos_in(where)
    if len(infos) != 1:
        sys.exit(f"overlay: expected one {a.dist} dist-info in {where}, found {len(infos)}")
    if a.info_from and infos_in(a.site):
        sys.exit(f"overlay: {a.site} already holds a {a.dist} dist-info (--info-from {a.info_from} gives it)")
    old_info = infos[0]
    old_rows = list(csv.reader((old_info / "RECORD").read_text().splitlines()))
    replaced = []
    if a.package or a.tree:
        package = a.site / (a.package or "")
        if not a.package or not a.tree or not package.is_dir() or not a.tree.is_dir():
            sys.exit(f"overlay: --package and --tree must both name directories ({package}, {a.tree})")
        deleted = None
        if a.deleted:
            under = a.deleted_under.strip("/") + "/"
            deleted = [Path(line[len(under):]) for line in a.deleted.read_text().splitlines()
                       if line.startswith(under)]
        changed = sync_tree(a.tree, package, deleted)
        print(f"overlay: {len(changed)} file(s) of {a.package} changed by the patch stack")
        replaced = sorted(package.rglob("*"))
    new_info = a.site / f"{old_info.name.split('-')[0]}-{a.version}.dist-info"
    if new_info != old_info:  # copy, not rename: overlayfs cannot rename a directory of a lower layer
        shutil.copytree(old_info, new_info)
        if not a.info_from:
            shutil.rmtree(old_info)
    meta = new_info / "METADATA"
    meta.write_text(re.sub(r"^Version: .*$", f"Version: {a.version}", meta.read_text(), count=1, flags=re.M))
    gone = (f"{a.package}/", f"{old_info.name}/") if a.package else (f"{old_info.name}/",)
    keep = [r for r in old_rows if r and not r[0].startswith(gone) and (a.site / r[0]).exists()]
    ours = [record_row(a.site, p) for p in replaced + sorted(new_info.iterdir())
            if p.is_file() and p.name != "RECORD"]
    with (new_info / "RECORD").open("w", newline="") as fh:
        csv.writer(fh).writerows(sorted(keep + ours) + [[f"{new_info.name}/RECORD", "", ""]])
    print(f"overlay: {a.dist} is now {a.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
