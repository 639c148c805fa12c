"""The overlay tool that runs inside images: the package ends up exactly the patched tree (deleted
files gone, changed ones rewritten and compiled, the rest untouched) and the distribution is
relabelled with a consistent RECORD."""

from __future__ import annotations

import csv
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from support import REPO_ROOT

TOOL = REPO_ROOT / "servebuild" / "tools" / "overlay_package.py"


def make_site(site: Path) -> None:
    pkg = site / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    (pkg / "keep.py").write_text("KEEP = True\n")
    (pkg / "gone.py").write_text("GONE = True\n")
    (pkg / "data.cuh").write_text("// jit source\n")
    info = site / "demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    rows = [[f"demo/{n}", "", ""] for n in ("__init__.py", "keep.py", "gone.py", "data.cuh")]
    rows.append(["demo-1.0.dist-info/METADATA", "", ""])
    with (info / "RECORD").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(pkg)], check=True)


def test_sync_writes_only_what_the_stack_changes(tmp_path):
    site, tree = tmp_path / "site", tmp_path / "tree"
    make_site(site)
    tree.mkdir()
    (tree / "__init__.py").write_text("VALUE = 2\n")        # changed
    (tree / "keep.py").write_text("KEEP = True\n")          # same
    (tree / "new.py").write_text("NEW = True\n")            # added
    (tree / "data.cuh").write_text("// jit source\n")       # same
    keep_before = os.stat(site / "demo" / "keep.py").st_mtime_ns
    out = subprocess.run([sys.executable, str(TOOL), "--site", str(site), "--dist", "demo", "--package", "demo",
                          "--tree", str(tree), "--version", "1.0+sb1.abc"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "2 file(s) of demo changed" in out.stdout
    pkg = site / "demo"
    assert sorted(p.name for p in pkg.iterdir() if p.is_file()) == ["__init__.py", "data.cuh", "keep.py", "new.py"]
    assert not list((pkg / "__pycache__").glob("gone.*.pyc"))
    assert list((pkg / "__pycache__").glob("new.*.pyc")) and (pkg / "__init__.py").read_text() == "VALUE = 2\n"
    assert os.stat(pkg / "keep.py").st_mtime_ns == keep_before  # untouched: not in the variant's layer
    dist = importlib.metadata.Distribution.at(site / "demo-1.0+sb1.abc.dist-info")
    assert dist.version == "1.0+sb1.abc"
    recorded = {row[0] for row in csv.reader((site / "demo-1.0+sb1.abc.dist-info" / "RECORD").read_text().splitlines())}
    assert "demo/new.py" in recorded and "demo/gone.py" not in recorded and "demo-1.0.dist-info/METADATA" not in recorded
