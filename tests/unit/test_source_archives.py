"""What goes into an image from sources/archives.py: the source tarball keeps the exec bit git records
and no other mode bits; an unpacked release wheel or sdist keeps its exec bits and may not place a
path outside its tree. Unit level: git is real, no engine."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from servebuild.errors import IntegrityError
from servebuild.sources.archives import unpack_release, write_tarball
from support import git, one_printable_line


# -- the source tarball keeps the exec bit, and only where git has it --------------------------------------------


def test_the_source_tarball_keeps_the_exec_bit_and_only_that(tmp_path):
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tree / "bin" / "run.sh").chmod(0o755)
    (tree / "lib.py").write_text("x = 1\n")
    (tree / "lib.py").chmod(0o664)  # group-writable on disk: the tarball says 644 (git's 100644)
    (tree / "odd").write_text("y\n")
    (tree / "odd").chmod(0o700)  # git records 100755: executable for all in the tarball
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", "-A")
    out = tmp_path / "out"
    out.mkdir()
    path, _ = write_tarball(tree, {}, out)
    with tarfile.open(path) as tar:
        modes = {m.name: stat.S_IMODE(m.mode) for m in tar.getmembers() if m.isfile()}
    assert modes == {"src/bin/run.sh": 0o755, "src/lib.py": 0o644, "src/odd": 0o755}, modes


def test_a_release_archive_keeps_the_exec_bit_and_only_that(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, mode in (("pkg/tool.sh", 0o755), ("pkg/mod.py", 0o644)):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, "x\n")
    tree = tmp_path / "tree"
    assert unpack_release(wheel, "wheel", "python/", tree) == {"python/pkg/tool.sh", "python/pkg/mod.py"}
    assert stat.S_IMODE((tree / "python/pkg/tool.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "python/pkg/mod.py").stat().st_mode) == 0o644


# -- a release wheel or sdist may not hold a path out of its place ----------------------------------------------


def make_wheel(path: Path, member: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        zf.writestr(zipfile.ZipInfo(member), "evil\n")  # ZipInfo keeps the name as given
    return path


def make_sdist(path: Path, member: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("pkg-1.0/setup.py", b""), (member, b"evil\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    "kind,member",
    [
        ("wheel", "../evil"),
        ("wheel", "pkg/../../evil"),
        ("wheel", "/tmp/evil"),
        ("sdist", "pkg-1.0/../evil"),
        ("sdist", "pkg-1.0/../../evil"),
        ("sdist", "pkg-1.0/a/../../../evil"),
        ("sdist", "pkg-1.0//tmp/evil"),
    ],
)
def test_a_release_archive_with_a_path_out_of_the_tree_is_refused(tmp_path, kind, member):
    make = make_wheel if kind == "wheel" else make_sdist
    archive = make(tmp_path / ("pkg-1.0-py3-none-any.whl" if kind == "wheel" else "pkg-1.0.tar.gz"), member)
    tree = tmp_path / "deep" / "er" / "tree"
    with pytest.raises(IntegrityError) as info:
        unpack_release(archive, kind, "python/", tree)
    line = one_printable_line(info.value)
    assert archive.name in line and "unsafe path" in line, line
    written = [p for p in tmp_path.rglob("evil")]
    assert written == [], written  # refused before anything was placed out of the tree
