"""`invoke lock`: resolve what a recipe leaves floating (PR commits, base digests), hash every patch
diff as it applies, and prove the stack applies, so a lock records only what was really checked.
Anything that cannot be resolved here (an unreachable GitHub or registry) stays explicitly
unresolved with the reason; nothing is guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from servebuild.errors import HostError, Refused, ServebuildError, ToolError
from servebuild.fsutil import sha256_bytes
from servebuild.lock import debian
from servebuild.lock.basedigest import registry_digest
from servebuild.lock.lockfile import LOCK_VERSION, Lock, file_hashes
from servebuild.patchfiles import is_native
from servebuild.recipe.aptsteps import apt_steps
from servebuild.recipe.load import LoadedRecipe
from servebuild.recipe.schema import PatchEntry
from servebuild.sources.prepare import fetch_release, prepare_engine_source
from servebuild.sources.prs import find_pr_commit
from servebuild.sources.stack import SourceCache
from servebuild.sources.versionfile import check_sdist_commit, commit_in_sdist


def resolve_base(ref: str, local_id: Optional[str]) -> dict:
    if "{arch}" in ref:
        return {
            "ref": ref,
            "digest": None,
            "resolved": True,
            "note": "per-arch local image; its id is recorded in each build manifest",
        }
    try:
        return {"ref": ref, "digest": registry_digest(ref), "resolved": True}
    except Exception as exc:  # unreachable registry, DNS, TLS, auth: all mean "not resolved here"
        reason = f"registry unreachable from here ({type(exc).__name__}: {str(exc)[:120]})"
        if local_id:
            return {"ref": ref, "digest": None, "resolved": True, "local_id": local_id, "note": reason}
        return {"ref": ref, "digest": None, "resolved": False, "reason": reason}


def compute_lock(
    loaded: LoadedRecipe,
    cache: SourceCache,
    engine_ids: dict[str, Optional[str]],
    work: Path,
    old: Optional[Lock] = None,
) -> Lock:
    r = loaded.recipe
    unresolved: list[str] = []
    bases = {}
    for stage in ("build", "runtime"):
        base = getattr(r.bases, stage)
        entry = (
            {"ref": base.ref, "digest": base.digest, "resolved": True, "note": "pinned in recipe"}
            if base.digest
            else resolve_base(base.ref, engine_ids.get(base.ref))
        )
        if not entry["resolved"]:
            unresolved.append(f"bases.{stage}: {entry['reason']}")
        bases[stage] = entry
    lock: dict = {
        "lock_version": LOCK_VERSION,
        "recipe": r.name,
        "recipe_sha256": loaded.sha256,
        "files": file_hashes(loaded),
        "bases": bases,
        "source": None,
    }
    if r.engine:
        lock["source"], lock["patches"] = _lock_stack(loaded, cache, work, unresolved)
        lock["source"].update(_sdist_commit(loaded, cache, unresolved))
    if debian.bootstrapped_suite(r):
        lock["debian"] = debian.lock_platforms(r, apt_steps(r), work / "debian", old.debian if old else {}, unresolved)
    lock["unresolved"] = unresolved
    return Lock.model_validate(lock)


def _lock_stack(loaded: LoadedRecipe, cache: SourceCache, work: Path, unresolved: list[str]):
    """(source, patches) of the lock: every entry, optional ones too, found upstream and hashed;
    the default stack applied in order to prove it applies."""
    src = loaded.recipe.engine.source
    everything = src.patches + src.optional_patches
    try:
        repo = cache.mirror(src.url, [src.commit], prs=tuple(e.pr for e in everything if e.pr is not None))
    except ToolError:  # git itself failed on this host: not an unreachable upstream
        raise
    except ServebuildError as exc:  # unreachable, offline, not in the cache: recorded as unresolved, with why
        unresolved += [
            f"engine.source.patches.{e.id}: {exc.problem}" for e in everything if e.pr is not None and not e.resolved
        ]
        patches = [
            _entry_dict(e, e.commit, e.base, e.sha256, "local file" if e.file else "unresolved: upstream unreachable")
            for e in everything
        ]
        return {"url": src.url, "commit": src.commit, "tarball_sha256": None}, patches
    resolved, hows = {}, {}
    for e in everything:
        if e.pr is None:
            resolved[e.id], hows[e.id] = e, "local file"
            continue
        commit, base, how = find_pr_commit(cache, repo, e)
        resolved[e.id], hows[e.id] = e.model_copy(update={"commit": commit, "base": base}), how
    work.mkdir(parents=True, exist_ok=True)
    patches = []
    for e in resolved.values():
        diff = cache.entry_diff(repo, e, loaded.root)
        files = cache.diff_files(e, diff)
        resolved[e.id] = e = e.model_copy(update={"sha256": sha256_bytes(diff)})
        d = _entry_dict(e, e.commit, e.base, e.sha256, hows[e.id])
        d.update(
            {
                "files": files,
                "python_only": not any(is_native(f) for f in files),
                "optional": e.id not in {p.id for p in src.patches},
            }
        )
        patches.append(d)
    stack = [resolved[e.id] for e in src.patches]
    engine = loaded.recipe.engine.model_copy(update={"source": src.model_copy(update={"patches": stack})})
    pinned = loaded.replace(loaded.recipe.model_copy(update={"engine": engine}))
    tarballs = {
        p: prepare_engine_source(pinned, p, cache, work / p.replace("/", "-")).tarball_sha256
        for p in loaded.recipe.platforms
    }
    return {"url": src.url, "commit": src.commit, "tarball_sha256": tarballs}, patches


def _sdist_commit(loaded: LoadedRecipe, cache: SourceCache, unresolved: list[str]) -> dict:
    """{"sdist_commit": ...} where the tree is a release sdist with a version file: the commit it says it
    was cut from, checked against the recipe (refused if neither its commit nor its sdist_commit); {}
    otherwise. Read from the hash-pinned sdist itself (PyPI, or the artifact cache): GitHub is not needed."""
    engine = loaded.recipe.engine
    platform = loaded.recipe.platforms[0]  # an sdist is the same file for every platform
    origin = engine.mode.tree_origin(engine, platform)
    if origin.kind != "pypi" or origin.version_file is None:
        return {}
    try:
        path, _ = fetch_release(loaded, origin, platform, cache.root, cache.offline)
    except (HostError, Refused) as exc:  # unreachable index, or --offline with an empty cache
        unresolved.append(f"engine.source.sdist_commit: {exc.problem}")
        return {"sdist_commit": None}
    written, commit = commit_in_sdist(path, origin.version_file)
    check_sdist_commit(
        commit,
        written,
        engine.source.commit,
        engine.source.sdist_commit,
        f"{path.name}:{origin.version_file}",
        loaded.file,
    )
    return {"sdist_commit": commit}


def _entry_dict(e: PatchEntry, commit, base, sha256, how) -> dict:
    return {
        "id": e.id,
        "pr": e.pr,
        "file": e.file,
        "commit": commit,
        "commit_hint": e.commit_hint,
        "base": base,
        "sha256": sha256,
        "requires": e.requires,
        "resolved_by": how,
    }
