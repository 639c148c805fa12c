"""Mirrors fetch branches, tags and only the pull refs a stack names, never every refs/pull/*.

A local upstream (a real bare git repository; GitHub cannot be reached here) carries 40 PR heads
of 256 KiB of incompressible data each; the mirror for a one-PR stack is measured against what
fetching every pull ref (the old behaviour) brings in.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from servebuild.sources.stack import SourceCache
from support import git, make_upstream

PRS = 40


def objects_bytes(repo: Path) -> int:
    return sum(p.stat().st_size for p in (repo / "objects").rglob("*") if p.is_file())


def test_mirror_fetches_only_the_named_pull_refs(tmp_path):
    up = make_upstream(tmp_path)
    for n in range(100, 100 + PRS):
        git(up.path, "checkout", "-q", "-b", f"pr-{n}", up.base)
        (up.path / f"blob-{n}.bin").write_bytes(os.urandom(256 * 1024))
        git(up.path, "add", "-A")
        git(up.path, "commit", "-q", "-m", f"PR {n} (#{n})")
        git(up.bare, "fetch", "-q", str(up.path), f"pr-{n}:refs/pull/{n}/head")
    cache = SourceCache(tmp_path / "cache", recipe="toy")
    lean = cache.mirror(up.url, [up.base], prs=(100,))
    assert cache.resolve(lean, "refs/pull/100/head") is not None
    assert cache.resolve(lean, "refs/pull/101/head") is None
    everything = tmp_path / "all.git"
    subprocess.run(["git", "init", "-q", "--bare", str(everything)], check=True)
    subprocess.run(
        ["git", "fetch", "-q", up.url, "+refs/heads/*:refs/heads/*", "+refs/pull/*/head:refs/pull/*/head"],
        cwd=everything,
        check=True,
    )
    lean_bytes, all_bytes = objects_bytes(lean), objects_bytes(everything)
    print(f"\nmirror objects: one named PR {lean_bytes:,} bytes; every pull ref {all_bytes:,} bytes")
    assert lean_bytes * 10 < all_bytes
    # a PR number the upstream lacks does not fail the fetch of the others
    cache._fetch_into(lean, up.url, (102, 99999))
    assert cache.resolve(lean, "refs/pull/102/head") is not None
