"""Lock files: what a recipe leaves floating, resolved and hashed, next to the recipe.

`lock` resolves PR numbers and short SHAs to full commits, hashes every diff, records base
image digests and the hashes of the requirement sets. What cannot be resolved here (an
unreachable GitHub or registry) stays explicitly unresolved with the reason; nothing is guessed.
`build --locked` refuses a missing, stale or unresolved lock, naming the entry.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import yaml
from pydantic import ValidationError

from servebuild.engine_source import prepare_engine_source
from servebuild.errors import RecipeError, SourceError
from servebuild.fsutil import atomic_write, sha256_bytes, sha256_file
from servebuild.loading import LoadedRecipe
from servebuild.patchfiles import is_native
from servebuild.recipe import PatchEntry
from servebuild.recipe_files import named_files
from servebuild.registry import registry_digest
from servebuild.sources import SourceCache
from servebuild.yamlfile import load_yaml

LOCK_VERSION = 1


def lock_path(loaded: LoadedRecipe) -> Path:
    path = loaded.chain[0].path
    return path.with_name(path.stem + ".lock.yaml")


def file_hashes(loaded: LoadedRecipe) -> dict[str, str]:
    return {rel: sha256_file(loaded.root / rel) for rel in file_names(loaded)}


# ------------------------------------------------------------------ base images

def resolve_base(ref: str, local_id: Optional[str]) -> dict:
    if "{arch}" in ref:
        return {"ref": ref, "digest": None, "resolved": True,
                "note": "per-arch local image; its id is recorded in each build manifest"}
    try:
        return {"ref": ref, "digest": registry_digest(ref), "resolved": True}
    except Exception as exc:  # unreachable registry, DNS, TLS, auth: all mean "not resolved here"
        reason = f"registry unreachable from here ({type(exc).__name__}: {str(exc)[:120]})"
        if local_id:
            return {"ref": ref, "digest": None, "resolved": True, "local_id": local_id, "note": reason}
        return {"ref": ref, "digest": None, "resolved": False, "reason": reason}


# ------------------------------------------------------------------ patches

def find_pr_commit(cache: SourceCache, repo: Path, entry: PatchEntry) -> tuple[Optional[str], Optional[str], str]:
    """(commit, base, how) for a PR entry, from the mirrored upstream."""
    if entry.commit:
        return entry.commit, entry.base, "pinned in recipe"
    if entry.commit_hint:
        full = cache.resolve(repo, entry.commit_hint)
        if full is None:
            raise SourceError(f"commit_hint {entry.commit_hint} of {entry.id} (PR #{entry.pr}) is not in the "
                              f"upstream", field=f"engine.source.patches.{entry.id}.commit_hint")
        return full, entry.base, f"commit_hint {entry.commit_hint}"
    from servebuild.gitmirror import git
    log = git("log", "--all", "--format=%H %s", "-E", f"--grep=\\(#{entry.pr}\\)$", cwd=repo, check=False)
    for line in log.stdout.decode().splitlines():
        sha, subject = line.split(" ", 1)
        if subject.endswith(f"(#{entry.pr})") and not git("rev-parse", f"{sha}^2", cwd=repo,
                                                             check=False).returncode == 0:
            branch = cache.resolve(repo, "HEAD")
            merged = branch and git("merge-base", "--is-ancestor", sha, branch, cwd=repo,
                                    check=False).returncode == 0
            if merged:
                return sha, None, "squash-merge commit on the default branch"
    head = cache.resolve(repo, f"refs/pull/{entry.pr}/head")
    if head:
        base = git("merge-base", "HEAD", head, cwd=repo).stdout.decode().strip()
        return head, base, f"refs/pull/{entry.pr}/head against its merge-base"
    raise SourceError(f"PR #{entry.pr} ({entry.id}) found neither as a squash-merge commit nor as "
                      f"refs/pull/{entry.pr}/head upstream", field=f"engine.source.patches.{entry.id}")


def compute_lock(loaded: LoadedRecipe, cache: SourceCache, engine_ids: dict[str, Optional[str]],
                 work: Path) -> dict:
    r = loaded.recipe
    unresolved: list[str] = []
    bases = {}
    for stage in ("build", "runtime"):
        base = getattr(r.bases, stage)
        entry = ({"ref": base.ref, "digest": base.digest, "resolved": True, "note": "pinned in recipe"}
                 if base.digest else resolve_base(base.ref, engine_ids.get(base.ref)))
        if not entry["resolved"]:
            unresolved.append(f"bases.{stage}: {entry['reason']}")
        bases[stage] = entry
    lock: dict = {"lock_version": LOCK_VERSION, "recipe": r.name, "recipe_sha256": loaded.sha256,
                  "files": file_hashes(loaded), "bases": bases, "source": None, "unresolved": []}
    if r.engine:
        lock["source"], lock["patches"] = _lock_stack(loaded, cache, work, unresolved)
    lock["unresolved"] = unresolved
    return lock


def _lock_stack(loaded: LoadedRecipe, cache: SourceCache, work: Path, unresolved: list[str]):
    """(source, patches) of the lock: every entry, optional ones too, found upstream and hashed;
    the default stack applied in order to prove it applies."""
    src = loaded.recipe.engine.source
    everything = src.patches + src.optional_patches
    try:
        repo = cache.mirror(src.url, [src.commit], prs=tuple(e.pr for e in everything if e.pr is not None))
    except SourceError as exc:
        unresolved += [f"engine.source.patches.{e.id}: {exc.problem}" for e in everything
                       if e.pr is not None and not e.resolved]
        patches = [_entry_dict(e, e.commit, e.base, e.sha256,
                               "local file" if e.file else "unresolved: upstream unreachable") for e in everything]
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
        d.update({"files": files, "python_only": not any(is_native(f) for f in files),
                  "optional": e.id not in {p.id for p in src.patches}})
        patches.append(d)
    stack = [resolved[e.id] for e in src.patches]
    engine = loaded.recipe.engine.model_copy(update={"source": src.model_copy(update={"patches": stack})})
    pinned = loaded.replace(loaded.recipe.model_copy(update={"engine": engine}))
    tarballs = {p: prepare_engine_source(pinned, p, cache, work / p.replace("/", "-")).tarball_sha256
                for p in loaded.recipe.platforms}
    return {"url": src.url, "commit": src.commit, "tarball_sha256": tarballs}, patches


def _entry_dict(e: PatchEntry, commit, base, sha256, how) -> dict:
    return {"id": e.id, "pr": e.pr, "file": e.file, "commit": commit, "commit_hint": e.commit_hint, "base": base,
            "sha256": sha256, "requires": e.requires, "resolved_by": how}


def write_lock(path: Path, lock: dict) -> None:
    header = ("# Written by `invoke lock`; do not edit. Entries under `unresolved` could not be resolved\n"
              "# where this lock was made; run `invoke lock` where GitHub and the registries are reachable.\n")
    atomic_write(path, header + yaml.safe_dump(lock, sort_keys=True, width=120))


def load_lock_file(loaded: LoadedRecipe) -> Optional[dict]:
    """The lock file next to the recipe, read and checked for shape (None if there is none). Its
    file list may name only files the recipe names: nothing else is read or hashed."""
    path, display = lock_path(loaded), lock_display(loaded)
    if not path.exists():
        return None
    try:
        lock = load_yaml(path, display)[0]
    except RecipeError as exc:
        raise SourceError(f"{exc.problem}; run `invoke lock` again", file=display, line=exc.line) from None
    named = set(file_names(loaded))
    problem = None
    if not isinstance(lock, dict):
        problem = ("(top level)", "a lock is a mapping")
    elif not isinstance(lock.get("recipe_sha256"), str):
        problem = ("recipe_sha256", "must be a sha256")
    elif not isinstance(lock.get("files") or {}, dict) or any(
            not isinstance(k, str) or k not in named or not isinstance(v, str) for k, v in (lock.get("files") or {}).items()):
        problem = ("files", "must map files the recipe names to their sha256")
    elif not isinstance(lock.get("unresolved") or [], list) or not all(isinstance(u, str) for u in lock.get("unresolved") or []):
        problem = ("unresolved", "must be a list of strings")
    elif not isinstance(lock.get("bases"), dict) or any(not isinstance(lock["bases"].get(s), dict) for s in ("build", "runtime")):
        problem = ("bases", "must hold build and runtime entries")
    elif any(not _str_or_none(lock["bases"][s].get("digest")) for s in ("build", "runtime")):
        problem = ("bases", "each digest must be a string or null")
    elif not isinstance(lock.get("patches") or [], list) or not all(
            isinstance(p, dict) and isinstance(p.get("id"), str) for p in lock.get("patches") or []):
        problem = ("patches", "must be a list of entries with an id")
    else:
        for p in lock.get("patches") or []:  # apply_lock reads these three: each present, a string or null
            bad = next((k for k in ("commit", "base", "sha256") if k not in p or not _str_or_none(p[k])), None)
            if bad:
                problem = (f"patches.{p['id']}.{bad}", "must be given, as a string or null")
                break
    if problem:
        raise SourceError(f"malformed lock: {problem[1]}; run `invoke lock` again", file=display, field=problem[0])
    lock["unresolved"] = lock.get("unresolved") or []
    return lock


def _str_or_none(value) -> bool:
    return value is None or isinstance(value, str)


def file_names(loaded: LoadedRecipe) -> list[str]:
    return sorted({f.path for f in named_files(loaded.recipe)})


def read_lock(loaded: LoadedRecipe) -> dict:
    """The lock for `loaded`, checked: present, current and fully resolved."""
    lock = current_lock(loaded)
    if lock.get("unresolved"):
        raise SourceError(f"lock has unresolved entries, first: {lock['unresolved'][0]}", file=lock_display(loaded),
                          field="unresolved")
    return lock


def current_lock(loaded: LoadedRecipe) -> dict:
    """The lock for `loaded`, checked: present and current (it may leave entries unresolved)."""
    display = lock_display(loaded)
    lock = load_lock_file(loaded)
    if lock is None:
        raise SourceError(f"no lock file; run `invoke lock --recipe {loaded.recipe.name}`", file=display)
    if lock.get("recipe_sha256") != loaded.sha256:
        raise SourceError(f"lock is stale: recipe {loaded.recipe.name} changed since it was locked; "
                          f"run `invoke lock` again", file=display, field="recipe_sha256")
    missing = [rel for rel in file_names(loaded) if rel not in (lock.get("files") or {})]
    if missing:  # a lock that omits a file would let that file change unnoticed
        raise SourceError(f"lock is stale: it does not record {missing[0]}, a file the recipe names; "
                          f"run `invoke lock` again", file=display, field=f"files.{missing[0]}")
    for rel, digest in (lock.get("files") or {}).items():
        actual = sha256_file(loaded.root / rel) if (loaded.root / rel).exists() else "missing"
        if actual != digest:
            raise SourceError(f"lock is stale: {rel} hashes to {actual}, the lock says {digest}",
                              file=display, field=f"files.{rel}")
    return lock


def apply_lock(loaded: LoadedRecipe, lock: dict, partial: bool = False) -> LoadedRecipe:
    """A copy of the recipe with the lock's commits, bases and diff hashes filled in."""
    r = loaded.recipe
    update: dict = {}
    bases = {}
    for stage in ("build", "runtime"):
        base = getattr(r.bases, stage)
        digest = lock["bases"][stage].get("digest")
        bases[stage] = base.model_copy(update={"digest": digest}) if digest else base
    update["bases"] = r.bases.model_copy(update=bases)
    if r.engine:
        by_id = {p["id"]: p for p in lock.get("patches") or []}

        def pinned(e: PatchEntry) -> PatchEntry:
            p = by_id.get(e.id)
            if p is None and partial:
                return e
            if p is None:
                raise SourceError(f"lock has no entry for patch {e.id}; run `invoke lock` again",
                                  file=loaded.file, field=f"patches.{e.id}")
            if partial and not (p.get("commit") and p.get("sha256")):
                return e
            return e.model_copy(update={"commit": p.get("commit"), "base": p.get("base"), "sha256": p.get("sha256")})

        source = r.engine.source.model_copy(update={
            "patches": [pinned(e) for e in r.engine.source.patches],
            "optional_patches": [pinned(e) for e in r.engine.source.optional_patches]})
        update["engine"] = r.engine.model_copy(update={"source": source})
    try:  # lock values fill recipe fields: they pass the same validation (model_copy alone skips it)
        with warnings.catch_warnings():  # a wrong-typed value is the one error line below, not a warning too
            warnings.simplefilter("ignore")
            pinned_recipe = type(r).model_validate(r.model_copy(update=update).model_dump(mode="python"))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SourceError(f"lock value refused: {err['msg'].removeprefix('Value error, ')}; run `invoke lock` again",
                          file=lock_display(loaded), field=".".join(map(str, err["loc"]))) from None
    return loaded.replace(pinned_recipe)


def lock_display(loaded: LoadedRecipe) -> str:
    path = lock_path(loaded)
    return str(path.relative_to(loaded.root)) if path.is_relative_to(loaded.root) else str(path)


def pin_for_build(loaded: LoadedRecipe) -> tuple[LoadedRecipe, Optional[dict]]:
    """A plain build: apply the committed lock when it is current (whatever it resolved), so
    locked PR commits and diff hashes are used; anything still unresolved is refused later,
    entry by entry, only if the stack being built needs it."""
    lock = load_lock_file(loaded)
    if lock is None or lock.get("recipe_sha256") != loaded.sha256:
        return loaded, None
    return apply_lock(loaded, lock, partial=True), lock


def unpinned_problem(loaded: LoadedRecipe, lock: Optional[dict]) -> Optional[SourceError]:
    """The first PR entry of the stack to build that has no full commit: one line that names it,
    why it is not pinned and the command that pins it on a machine that reaches the upstream."""
    engine = loaded.recipe.engine
    if engine is None:
        return None
    entry = next((e for e in engine.source.patches if e.pr is not None and e.commit is None), None)
    if entry is None:
        return None
    where = lock_display(loaded)
    if lock is None:
        why = f"there is no current lock ({where} is missing or was made for another version of the recipe)"
    else:  # the reason recorded where the lock was made is history, not this host's state: not quoted
        why = f"{where} leaves it unresolved (the host that wrote it could not resolve it)"
    hint = f"only the short SHA {entry.commit_hint} is known; " if entry.commit_hint else ""
    return SourceError(f"patch entry {entry.id} (PR #{entry.pr}) is not pinned to a full commit: {hint}{why}; "
                       f"run `invoke lock --recipe {loaded.recipe.name}` now on a host that reaches "
                       f"{engine.source.url} (this one, if it does), then build",
                       file=loaded.file, field=f"engine.source.patches.{entry.id}")
