"""Unpacked release artifacts, kept as git objects: a release wheel or sdist is unpacked and hashed
into git once, and every patch stack on it checks that tree out (`git read-tree -u`) instead of
unzipping and hashing it again (issue 30: about 1.5 s of a new variant's 2.2 s of sources).

The cache entry is keyed by the artifact's sha256 and the prefix it is unpacked under; it holds a
git object store and `layout.json` (the tree's id and the files the artifact holds). It is made in a
temporary folder and renamed into place, so an interrupted build leaves no half entry; an entry
whose tree cannot be read back (objects lost) is made again. The tree checked out is the one the
artifact gives: the tarball made from it is the same bytes either way (tests/unit/test_release_trees.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from servebuild.errors import IntegrityError
from servebuild.fsutil import atomic_write, sha256_bytes
from servebuild.sources.archives import unpack_release
from servebuild.sources.gitmirror import git

LAYOUT_VERSION = 1


def entry_dir(cache_root: Path, digest: str, prefix: str) -> Path:
    return cache_root / "release-trees" / f"{digest}-{sha256_bytes(prefix.encode())[:12]}-v{LAYOUT_VERSION}"


def _read(entry: Path) -> tuple[str, set[str]] | None:
    try:
        data = json.loads((entry / "layout.json").read_text())
        tree, files = data["tree"], set(data["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if git("cat-file", "-e", f"{tree}^{{tree}}", cwd=entry, check=False).returncode != 0:
        return None  # objects lost or damaged: make it again
    return tree, files


def _make(entry: Path, path: Path, kind: str, prefix: str) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=entry.parent))
    try:
        git("init", "--quiet", cwd=tmp)
        files = unpack_release(path, kind, prefix, tmp)
        git("add", "-A", ".", cwd=tmp)
        tree = git("write-tree", cwd=tmp).stdout.decode().strip()
        atomic_write(tmp / "layout.json", json.dumps({"tree": tree, "files": sorted(files)}) + "\n")
        for child in tmp.iterdir():  # the objects stay; the unpacked files are checked out on use
            if child.name not in (".git", "layout.json"):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        if _read(entry) is not None:  # a concurrent build made it meanwhile
            return
        if entry.exists():  # damaged: replace it whole
            shutil.rmtree(entry, ignore_errors=True)
        try:
            tmp.rename(entry)
        except OSError:
            if _read(entry) is None:  # not a concurrent build's good entry
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_out(cache_root: Path, path: Path, digest: str, kind: str, prefix: str, tree: Path, env: dict) -> set[str]:
    """Put the release artifact `path` (sha256 `digest`) under `prefix` of the fresh git work tree
    `tree`, staged in its index; return the files it holds. `env` gains the entry's object store as
    an alternate (every later git command on `tree` must be given it)."""
    entry = entry_dir(cache_root, digest, prefix)
    objects = str(entry / ".git" / "objects")
    if ":" in objects:  # git's alternates list is colon-separated: unpack here, as with no cache
        files = unpack_release(path, kind, prefix, tree)
        git("add", "-A", ".", cwd=tree, env=env)
        return files
    found = _read(entry)
    if found is None:
        _make(entry, path, kind, prefix)
        found = _read(entry)
        if found is None:
            raise IntegrityError(f"{entry}: the unpacked {path.name} cannot be read back from git", field="engine")
    oid, files = found
    alternates = env.get("GIT_ALTERNATE_OBJECT_DIRECTORIES")
    env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = f"{objects}:{alternates}" if alternates else objects
    git("read-tree", "--reset", "-u", oid, cwd=tree, env=env)
    return files
