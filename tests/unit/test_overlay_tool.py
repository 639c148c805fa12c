"""The overlay tool that runs inside images: the package ends up exactly the patched tree (deleted
files gone, changed ones rewritten and compiled, the rest untouched) and the distribution is
relabelled with a consistent RECORD."""

from __future__ import annotations

import csv
import importlib.metadata
import os
import shutil
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
    (tree / "__init__.py").write_text("VALUE = 2\n")  # changed
    (tree / "keep.py").write_text("KEEP = True\n")  # same
    (tree / "new.py").write_text("NEW = True\n")  # added
    (tree / "data.cuh").write_text("// jit source\n")  # same
    keep_before = os.stat(site / "demo" / "keep.py").st_mtime_ns
    out = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "--site",
            str(site),
            "--dist",
            "demo",
            "--package",
            "demo",
            "--tree",
            str(tree),
            "--version",
            "1.0+sb1.abc",
        ],
        capture_output=True,
        text=True,
    )
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
    assert (
        "demo/new.py" in recorded and "demo/gone.py" not in recorded and "demo-1.0.dist-info/METADATA" not in recorded
    )


def _tree_of(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
        for p in sorted(root.rglob("*"))
    }


def run_tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def test_with_info_from_the_relabel_deletes_nothing(tmp_path):
    """The engine stage keeps the release's dist-info out of the shared layer (--info-from): the
    relabelled one is written into the site and the site loses nothing but the files the stack deletes
    (a deletion in a runtime layer is a whiteout, stamped with the clock by Docker 20.10's BuildKit)."""
    site, tree, info = tmp_path / "site", tmp_path / "tree", tmp_path / "engine-info"
    make_site(site)
    info.mkdir()
    (site / "demo-1.0.dist-info").rename(info / "demo-1.0.dist-info")
    tree.mkdir()
    for name in ("__init__.py", "keep.py", "gone.py", "data.cuh"):  # the stack changes one file, deletes none
        (tree / name).write_bytes((site / "demo" / name).read_bytes())
    (tree / "__init__.py").write_text("VALUE = 2\n")
    before_site, before_info = _tree_of(site), _tree_of(info)
    info.chmod(0o555)  # a read-only bind mount in the image
    try:
        out = run_tool(
            "--site",
            site,
            "--dist",
            "demo",
            "--package",
            "demo",
            "--tree",
            tree,
            "--version",
            "1.0+sb1.abc",
            "--info-from",
            info,
        )
    finally:
        info.chmod(0o755)
    assert out.returncode == 0, out.stderr
    assert _tree_of(info) == before_info  # the release's dist-info as it was
    after = _tree_of(site)
    assert set(before_site) <= set(after), set(before_site) - set(after)  # nothing deleted
    assert after["demo/__init__.py"][1] == b"VALUE = 2\n"
    assert importlib.metadata.Distribution.at(site / "demo-1.0+sb1.abc.dist-info").version == "1.0+sb1.abc"
    assert [p.name for p in site.glob("*.dist-info")] == ["demo-1.0+sb1.abc.dist-info"]
    recorded = {row[0] for row in csv.reader((site / "demo-1.0+sb1.abc.dist-info" / "RECORD").read_text().splitlines())}
    assert {"demo/keep.py", "demo/gone.py", "demo-1.0+sb1.abc.dist-info/METADATA"} <= recorded
    assert not any(r.startswith("demo-1.0.dist-info/") for r in recorded)


def test_with_info_from_a_dist_info_already_in_the_site_is_refused(tmp_path):
    site, info = tmp_path / "site", tmp_path / "engine-info"
    make_site(site)
    info.mkdir()
    (info / "demo-1.0.dist-info").mkdir()
    (info / "demo-1.0.dist-info" / "METADATA").write_text("Name: demo\nVersion: 1.0\n")
    (info / "demo-1.0.dist-info" / "RECORD").write_text("")
    out = run_tool("--site", site, "--dist", "demo", "--version", "1.0+sb1.abc", "--info-from", info)
    assert out.returncode != 0 and "already holds a demo dist-info" in out.stderr, out.stderr


def test_the_changed_files_alone_give_the_site_the_whole_tree_gives(tmp_path):
    """The build context carries only what the stack changes (overlay.tar, overlay-deleted.txt), not the
    whole patched tree: the site, its compiled files and the relabelled RECORD end byte for byte as with
    the whole tree, and a deleted path outside the package or absent from the site is passed over."""
    changed = {"__init__.py": "VALUE = 2\n", "new.py": "NEW = True\n", "sub/deep.py": "DEEP = 1\n"}
    sites = {}
    make_site(tmp_path / "release")
    for how in ("whole", "changed"):  # at one path: the compiled files name their source
        site, tree = tmp_path / "site", tmp_path / "src" / "python" / "demo"
        for old in (site, tmp_path / "src"):
            shutil.rmtree(old, ignore_errors=True)
        shutil.copytree(tmp_path / "release", site)  # one release install, times and all
        tree.mkdir(parents=True)
        if how == "whole":  # the patched tree: every file of the package but the deleted one
            for name in ("keep.py", "data.cuh"):
                (tree / name).write_bytes((site / "demo" / name).read_bytes())
        for name, text in changed.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(text)
        for path in tree.rglob("*"):  # as the tarball gives them: one fixed time (the .pyc files carry it)
            os.utime(path, (946684800, 946684800))
        args = ["--site", site, "--dist", "demo", "--package", "demo", "--tree", tree, "--version", "1.0+sb1.abc"]
        if how == "changed":
            listed = tmp_path / "deleted.txt"
            listed.write_text("python/demo/gone.py\npython/demo/never-there.py\ndocs/gone.md\n")
            args += ["--deleted", listed, "--deleted-under", "python/demo/"]
        out = run_tool(*args)
        assert out.returncode == 0, out.stderr
        assert "3 file(s) of demo changed" in out.stdout, out.stdout
        sites[how] = {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}
    assert sites["changed"] == sites["whole"]
    assert "demo/gone.py" not in sites["whole"] and "demo/sub/deep.py" in sites["whole"]
