"""Lock files: RECIPE.lock.yaml next to the recipe, read, checked, applied and written here.

A lock pins what the recipe leaves floating (PR commits, diff hashes, base digests, the hashes of
the files it names; `lock.compute` makes one). `build --locked` refuses a missing, stale or
unresolved lock, naming the entry; a plain build uses a current lock and ignores a stale one.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import yaml
from pydantic import ValidationError

from servebuild.errors import RecipeError, SourceError
from servebuild.fsutil import atomic_write, sha256_file
from servebuild.recipe.load import LoadedRecipe
from servebuild.recipe.schema import PatchEntry
from servebuild.recipe.files import named_files
from servebuild.yamlfile import load_yaml

LOCK_VERSION = 1


def lock_path(loaded: LoadedRecipe) -> Path:
    path = loaded.chain[0].path
    return path.with_name(path.stem + ".lock.yaml")


def file_hashes(loaded: LoadedRecipe) -> dict[str, str]:
    return {rel: sha256_file(loaded.root / rel) for rel in file_names(loaded)}


# ------------------------------------------------------------------ base images



# ------------------------------------------------------------------ patches









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
