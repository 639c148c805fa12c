"""A wheel-overlay build context carries only what the patch stack changes (render/context.py): overlay.tar
holds the source tarball's own entries of the files changed or added (headers and bytes as there), and
overlay-deleted.txt the tree paths deleted; the whole patched tree (source.tar, 56 MB for SGLang) is not in
the context. Unit level: git is real, no engine."""

from __future__ import annotations

import tarfile

import pytest

from servebuild.errors import IntegrityError
from servebuild.recipe.load import load_recipe
from servebuild.render.context import write_context
from servebuild.render.reuse import Overlay
from servebuild.sources.archives import write_tarball
from support import REPO_ROOT, git

BASES = {"build": "b", "runtime": "r"}
PKG = "python/sglang/srt"


@pytest.fixture
def tarball(tmp_path):
    tree = tmp_path / "tree"
    (tree / PKG / "managers").mkdir(parents=True)
    (tree / PKG / "managers" / "scheduler.py").write_text("PATCHED = True\n")
    (tree / PKG / "managers" / "new_policy.py").write_text("NEW = True\n")
    (tree / PKG / "managers" / "run.sh").write_text("#!/bin/sh\n")
    (tree / PKG / "managers" / "run.sh").chmod(0o755)
    (tree / PKG / "untouched.py").write_text("SAME = True\n")
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    (tmp_path / "out").mkdir()
    return write_tarball(tree, {}, tmp_path / "out")[0]


def members(path) -> dict[str, tuple[int, bytes]]:
    with tarfile.open(path) as tar:
        return {m.name: (m.mode, tar.extractfile(m).read()) for m in tar if m.isfile()}


def test_the_context_carries_the_changed_files_not_the_tree(tmp_path, tarball):
    loaded = load_recipe("sglang-native-fp8-bookworm", REPO_ROOT)
    overlay = Overlay(
        changed=(f"{PKG}/managers/scheduler.py", f"{PKG}/managers/run.sh", f"{PKG}/gone.py"),
        created=(f"{PKG}/managers/new_policy.py",),
        deleted=(f"{PKG}/gone.py",),
    )
    context = write_context(loaded, "linux/amd64", BASES, tmp_path / "ctx", {}, tarball, overlay_files=overlay)
    assert not (context / "source.tar").exists()
    whole = members(tarball)
    got = members(context / "overlay.tar")
    assert sorted(got) == sorted(
        f"src/{f}"
        for f in ("%s/managers/scheduler.py" % PKG, f"{PKG}/managers/run.sh", f"{PKG}/managers/new_policy.py")
    )
    assert all(got[name] == whole[name] for name in got)  # the tarball's own headers' modes and bytes
    assert got[f"src/{PKG}/managers/run.sh"][0] == 0o755
    assert (context / "overlay-deleted.txt").read_text() == f"{PKG}/gone.py\n"
    assert "--mount=type=bind,source=overlay.tar" in (context / "Dockerfile").read_text()


def test_no_stack_gives_an_empty_overlay(tmp_path, tarball):
    loaded = load_recipe("sglang-native-fp8-bookworm", REPO_ROOT)
    context = write_context(loaded, "linux/amd64", BASES, tmp_path / "ctx", {}, tarball, overlay_files=Overlay(()))
    assert members(context / "overlay.tar") == {} and (context / "overlay-deleted.txt").read_text() == ""


def test_a_changed_file_the_tarball_lacks_is_an_integrity_error(tmp_path, tarball):
    loaded = load_recipe("sglang-native-fp8-bookworm", REPO_ROOT)
    overlay = Overlay(changed=(f"{PKG}/managers/missing.py",))
    with pytest.raises(IntegrityError, match="lacks src/python/sglang/srt/managers/missing.py"):
        write_context(loaded, "linux/amd64", BASES, tmp_path / "ctx", {}, tarball, overlay_files=overlay)


def test_a_mode_that_installs_the_tree_still_gets_the_whole_tarball(tmp_path, tarball):
    loaded = load_recipe("vllm-dspark-bookworm", REPO_ROOT)
    context = write_context(loaded, "linux/amd64", BASES, tmp_path / "ctx", {}, tarball, overlay_files=Overlay(()))
    assert (context / "source.tar").read_bytes() == tarball.read_bytes() and not (context / "overlay.tar").exists()
