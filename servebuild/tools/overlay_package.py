"""Runs inside the image (standard library only): replace an installed package with its patched
tree and relabel its distribution, so nothing of the release package survives and
`importlib.metadata.version()` names the patch stack."""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import re
import shutil
import sys
from pathlib import Path


def record_row(site: Path, path: Path) -> list[str]:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [path.relative_to(site).as_posix(), f"sha256={digest}", str(len(data))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", type=Path, required=True)
    ap.add_argument("--dist", required=True)
    ap.add_argument("--package", required=True)
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--version", required=True)
    a = ap.parse_args()
    norm = re.sub(r"[-_.]+", "_", a.dist).lower()
    infos = [p for p in a.site.glob("*.dist-info") if p.name.lower().startswith(norm + "-")]
    if len(infos) != 1:
        sys.exit(f"overlay: expected one {a.dist} dist-info in {a.site}, found {len(infos)}")
    old_info, package = infos[0], a.site / a.package
    if not package.is_dir() or not a.tree.is_dir():
        sys.exit(f"overlay: {package} or {a.tree} is not a directory")
    old_rows = list(csv.reader((old_info / "RECORD").read_text().splitlines()))
    shutil.rmtree(package)
    shutil.copytree(a.tree, package)
    meta = old_info / "METADATA"
    meta.write_text(re.sub(r"^Version: .*$", f"Version: {a.version}", meta.read_text(), count=1, flags=re.M))
    new_info = a.site / f"{old_info.name.split('-')[0]}-{a.version}.dist-info"
    old_info.rename(new_info)
    keep = [r for r in old_rows if r and not r[0].startswith((f"{a.package}/", f"{old_info.name}/"))
            and (a.site / r[0]).exists()]
    ours = [record_row(a.site, p) for p in sorted(package.rglob("*")) + sorted(new_info.iterdir())
            if p.is_file() and p.name != "RECORD"]
    with (new_info / "RECORD").open("w", newline="") as fh:
        csv.writer(fh).writerows(sorted(keep + ours) + [[f"{new_info.name}/RECORD", "", ""]])
    print(f"overlay: {a.package} replaced from {a.tree}; {a.dist} is now {a.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
