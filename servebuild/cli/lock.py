"""lock, deps: pinning what a recipe leaves floating, and the hashed requirement sets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from servebuild.build import bases
from servebuild.errors import InputError, IntegrityError, ServebuildError
from servebuild.fsutil import no_link_below
from servebuild.lock import compute, depsets, lockfile
from servebuild.plan.config import load_config
from servebuild.plan.make import checked_cache_dir
from servebuild.recipe.load import load_recipe
from servebuild.sources.stack import SourceCache


def lock(root: Path, recipe: str, offline: bool = False) -> None:
    loaded = load_recipe(recipe, root)
    ids = bases.local_ids(loaded)
    cache = SourceCache(checked_cache_dir(), load_config().git_mirrors, offline=offline, recipe=loaded.file)
    start = time.monotonic()
    try:
        old = lockfile.load_lock_file(loaded)
    except ServebuildError:  # a malformed old lock pins nothing: it is replaced
        old = None
    work = no_link_below(root / "build" / loaded.recipe.name / "lock-work", "the lock's work folder", root / "build")
    data = compute.compute_lock(loaded, cache, ids, work, old=old)
    path = lockfile.lock_path(loaded)
    lockfile.write_lock(path, data)
    print(f"wrote {path.relative_to(root) if path.is_relative_to(root) else path} in {time.monotonic() - start:.1f}s")
    for platform, deb in sorted(data.debian.items()):
        print(
            f"  debian {platform}: {deb.suite} Release of {deb.release.date}, base {len(deb.base)} packages, "
            + ", ".join(f"{stage} step {len(step.packages)}" for stage, step in sorted(deb.apt.items()))
        )
    for item in data.unresolved:
        print(f"  unresolved: {item}")


def deps(root: Path, stack: Optional[str], targets: Optional[list[str]], check: bool = False) -> None:
    if not stack:
        raise InputError(f"give one of {', '.join(depsets.stacks(root))}", field="--stack")
    if check:
        problems = depsets.check(root, stack, targets or None)
        if problems:
            more = f" (and {len(problems) - 1} more files)" if len(problems) > 1 else ""
            raise IntegrityError(f"{problems[0]}{more}")
        print(f"{stack}: committed sets match their inputs")
        return
    for path in depsets.generate(root, stack, targets or None):
        print(path.relative_to(root))
