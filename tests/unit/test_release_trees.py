"""sources/releases.py: a release artifact is unpacked and hashed into git once, and each patch stack on it
checks that tree out. The tarball made from a checked-out tree is the same bytes as one made from a fresh
unpack (the images cannot tell), an entry whose objects are lost is made again, and a cache that holds an
entry for another prefix is not taken for this one. Unit level: git is real, no engine."""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path

from servebuild.sources import releases
from servebuild.sources.archives import unpack_release, write_tarball
from support import git

PREFIX = "python/"


def make_wheel(path: Path) -> tuple[Path, str]:
    with zipfile.ZipFile(path, "w") as zf:
        for name, mode, data in (
            ("pkg/__init__.py", 0o644, "from .mod import x\n"),
            ("pkg/mod.py", 0o644, "x = 1\n"),
            ("pkg/bin/tool.sh", 0o755, "#!/bin/sh\necho hi\n"),
            ("pkg-1.0.dist-info/RECORD", 0o644, "not unpacked\n"),
        ):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, data)
    return path, "0" * 64  # the key only: the cache does not hash the artifact itself


def fresh_tree(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    return path


def tarball(tree: Path, env: dict, out: Path) -> bytes:
    out.mkdir(exist_ok=True)
    return write_tarball(tree, env, out)[0].read_bytes()


def test_a_checked_out_release_gives_the_tarball_of_a_fresh_unpack(tmp_path):
    wheel, digest = make_wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    plain = fresh_tree(tmp_path / "plain")
    want_files = unpack_release(wheel, "wheel", PREFIX, plain)
    git(plain, "add", "-A", ".")
    want = tarball(plain, {}, tmp_path / "out-plain")

    cache = tmp_path / "cache"
    for n in range(2):  # the first stack makes the entry, the second only checks it out
        env: dict = {}
        tree = fresh_tree(tmp_path / f"stack{n}")
        assert releases.check_out(cache, wheel, digest, "wheel", PREFIX, tree, env) == want_files
        assert "GIT_ALTERNATE_OBJECT_DIRECTORIES" in env
        assert tarball(tree, env, tmp_path / f"out{n}") == want
        assert stat.S_IMODE((tree / "python/pkg/bin/tool.sh").stat().st_mode) & 0o100
    entry = releases.entry_dir(cache, digest, PREFIX)
    assert sorted(p.name for p in entry.iterdir()) == [".git", "layout.json"]  # objects, not a second copy
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temporary folder left


def test_an_entry_whose_objects_are_lost_is_made_again(tmp_path):
    wheel, digest = make_wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    cache = tmp_path / "cache"
    releases.check_out(cache, wheel, digest, "wheel", PREFIX, fresh_tree(tmp_path / "a"), {})
    entry = releases.entry_dir(cache, digest, PREFIX)
    shutil.rmtree(entry / ".git" / "objects")
    (entry / ".git" / "objects").mkdir()
    env: dict = {}
    tree = fresh_tree(tmp_path / "b")
    releases.check_out(cache, wheel, digest, "wheel", PREFIX, tree, env)
    assert (tree / "python/pkg/mod.py").read_text() == "x = 1\n"


def test_another_prefix_is_another_entry(tmp_path):
    wheel, digest = make_wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    cache = tmp_path / "cache"
    releases.check_out(cache, wheel, digest, "wheel", PREFIX, fresh_tree(tmp_path / "a"), {})
    tree = fresh_tree(tmp_path / "b")
    files = releases.check_out(cache, wheel, digest, "wheel", "", tree, {})
    assert "pkg/mod.py" in files and (tree / "pkg/mod.py").is_file() and not (tree / "python").exists()
