"""Lock files: RECIPE.lock.yaml next to the recipe, as a typed `Lock`: read, checked, applied, written.

A lock pins what the recipe leaves floating (PR commits, diff hashes, base digests, the hashes of
the files it names; `lock.compute` makes one). `build --locked` refuses a missing, stale or
unresolved lock, naming the entry; a plain build uses a current lock and ignores a stale one.
The YAML on disk is the model's fields as written (`exclude_unset`), sorted: the bytes do not
depend on this module's defaults.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from servebuild.errors import InputError, IntegrityError, RecipeError, Refused, ServebuildError
from servebuild.fsutil import atomic_write, sha256_file
from servebuild.lock.debian import LockedDebian, bootstrapped_suite, check_platforms
from servebuild.recipe.aptsteps import apt_steps
from servebuild.recipe.files import named_files
from servebuild.recipe.grammar import SHA256
from servebuild.recipe.load import LoadedRecipe, check_link_inside, load_recipe
from servebuild.recipe.schema import BaseImage, PatchEntry
from servebuild.yamlfile import load_yaml

LOCK_VERSION = 1


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LockedBase(_Entry):
    """One base image: its registry digest, or why there is none."""

    digest: Optional[str]  # sha256:<64 hex>, checked by the recipe's BaseImage when applied
    ref: Optional[str] = None
    resolved: Optional[bool] = None
    note: Optional[str] = None  # how it was pinned without a registry digest (per-arch local image, pinned in recipe)
    reason: Optional[str] = None  # why it is unresolved
    local_id: Optional[str] = None  # the local engine's image id, where the registry could not be asked


class LockedBases(_Entry):
    build: LockedBase
    runtime: LockedBase


class LockedPatch(_Entry):
    """One patch entry as resolved: the commit (and base) its diff came from and the diff's sha256."""

    id: str
    commit: Optional[str]
    base: Optional[str]
    sha256: Optional[str]
    pr: Optional[int] = None
    file: Optional[str] = None
    commit_hint: Optional[str] = None
    requires: list[str] = []
    resolved_by: Optional[str] = None
    files: Optional[list[str]] = None  # what the diff touches (recorded where it was resolved)
    python_only: Optional[bool] = None
    optional: Optional[bool] = None


class LockedSource(_Entry):
    url: str
    commit: str
    tarball_sha256: Optional[dict[str, str]] = None  # platform -> the source tarball's sha256, where it was made
    # the commit the release sdist was cut from, as its version file states it (short): beside the tag's `commit`
    sdist_commit: Optional[str] = None


class Lock(_Entry):
    """RECIPE.lock.yaml."""

    recipe_sha256: str
    bases: LockedBases
    lock_version: int = LOCK_VERSION
    recipe: Optional[str] = None
    files: dict[str, str] = {}  # project-relative file the recipe names -> its sha256
    source: Optional[LockedSource] = None
    patches: list[LockedPatch] = []
    unresolved: list[str] = []  # one line each: what could not be resolved where the lock was made, and why
    debian: dict[str, LockedDebian] = {}  # platform -> its Release, base packages and apt steps (bootstrapped bases)

    @field_validator("files", "patches", "unresolved", mode="before")
    @classmethod
    def _null_is_empty(cls, v, info):
        if v is None:  # `unresolved:` with nothing after it is an empty list
            return {} if info.field_name == "files" else []
        return v

    @field_validator("lock_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != LOCK_VERSION:  # strict: already an int, not a bool, str or float
            raise ValueError(f"is {v}; this servebuild reads lock version {LOCK_VERSION} only")
        return v

    @field_validator("recipe_sha256")
    @classmethod
    def _recipe_sha256(cls, v: str) -> str:
        if not SHA256.match(v):
            raise ValueError("is not a sha256 (64 lowercase hex digits)")
        return v

    @field_validator("files")
    @classmethod
    def _file_sha256(cls, v: dict[str, str]) -> dict[str, str]:
        bad = next((k for k, digest in v.items() if not SHA256.match(digest)), None)
        if bad is not None:
            raise ValueError(f"the hash of {bad} is not a sha256 (64 lowercase hex digits)")
        return v

    def patch(self, entry_id: str) -> Optional[LockedPatch]:
        return next((p for p in self.patches if p.id == entry_id), None)

    def yaml_text(self) -> str:
        return HEADER + yaml.safe_dump(self.model_dump(mode="json", exclude_unset=True), sort_keys=True, width=120)


HEADER = (
    "# Written by `invoke lock`; do not edit. Entries under `unresolved` could not be resolved\n"
    "# where this lock was made; run `invoke lock` where GitHub and the registries are reachable.\n"
)
STRING_OR_NULL = {"digest", "commit", "base", "sha256"}


def _shape_problem(err: dict) -> tuple[str, str]:
    """(field, what is wrong) for the first problem pydantic found in a lock's data."""
    loc = tuple(str(x) for x in err["loc"])
    field = ".".join(loc) or "(top level)"
    nullable = bool(loc) and loc[-1] in STRING_OR_NULL and loc[0] != "debian"  # the Debian side has no nulls
    if err["type"] == "missing":
        return field, "must be given" + (", as a string or null" if nullable else "")
    if nullable and err["type"] == "string_type":
        return field, "must be a string or null"
    if err["type"] == "extra_forbidden":
        return field, "is not a field of a lock"
    if not loc:
        return field, "a lock is a mapping"
    return field, KINDS.get(err["type"]) or err["msg"].removeprefix("Value error, ")


KINDS = {
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "bool_type": "must be true or false",
}


def lock_path(loaded: LoadedRecipe) -> Path:
    path = loaded.chain[0].path
    return path.with_name(path.stem + ".lock.yaml")


def file_hashes(loaded: LoadedRecipe) -> dict[str, str]:
    return {rel: sha256_file(loaded.root / rel) for rel in file_names(loaded)}


# ------------------------------------------------------------------ base images


# ------------------------------------------------------------------ patches


def write_lock(path: Path, lock: Lock) -> None:
    atomic_write(path, lock.yaml_text())


def load_lock_file(loaded: LoadedRecipe) -> Optional[Lock]:
    """The lock file next to the recipe, read and checked for shape (None if there is none). Its
    file list may name only files the recipe names: nothing else is read or hashed."""
    path, display = lock_path(loaded), lock_display(loaded)
    if not path.exists():
        return None
    check_link_inside(path, loaded.root)
    try:
        data = load_yaml(path, display)[0]
    except RecipeError as exc:
        raise InputError(exc.problem, hint="run `invoke lock` again", file=display, line=exc.line) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lock = Lock.model_validate(data)
    except ValidationError as exc:
        field, what = _shape_problem(exc.errors()[0])
        raise InputError(f"malformed lock: {what}", hint="run `invoke lock` again", file=display, field=field) from None
    check_platforms(lock.debian, display)  # each package's arch against its platform, before any download
    if lock.recipe is not None and lock.recipe != loaded.recipe.name:
        raise InputError(
            f"malformed lock: it is the lock of recipe {lock.recipe!r}, not {loaded.recipe.name!r}",
            hint="run `invoke lock` again",
            file=display,
            field="recipe",
        )
    named = set(file_names(loaded))
    stray = next((k for k in lock.files if k not in named), None)
    if stray is not None:
        raise InputError(
            f"malformed lock: {stray!r} is not a file the recipe names",
            hint="run `invoke lock` again",
            file=display,
            field="files",
        )
    return lock


def file_names(loaded: LoadedRecipe) -> list[str]:
    return sorted({f.path for f in named_files(loaded.recipe)})


def read_lock(loaded: LoadedRecipe) -> Lock:
    """The lock for `loaded`, checked: present, current and fully resolved."""
    lock = current_lock(loaded)
    if lock.unresolved:
        raise Refused(
            f"lock has {len(lock.unresolved)} unresolved {'entry' if len(lock.unresolved) == 1 else 'entries'}, "
            f"first: {lock.unresolved[0]}",
            hint=f"run `invoke lock --recipe {loaded.recipe.name}` on a host that reaches GitHub and the "
            f"registries, or build without --locked",
            file=lock_display(loaded),
            field="unresolved",
        )
    return lock


def current_lock(loaded: LoadedRecipe) -> Lock:
    """The lock for `loaded`, checked: present and current (it may leave entries unresolved)."""
    display = lock_display(loaded)
    lock = load_lock_file(loaded)
    if lock is None:
        raise Refused(f"no lock file; run `invoke lock --recipe {loaded.recipe.name}`", file=display)
    again = "run `invoke lock` again"
    if lock.recipe_sha256 != loaded.sha256:
        raise IntegrityError(
            f"lock is stale: recipe {loaded.recipe.name} changed since it was locked",
            hint=again,
            file=display,
            field="recipe_sha256",
        )
    missing = [rel for rel in file_names(loaded) if rel not in lock.files]
    if missing:  # a lock that omits a file would let that file change unnoticed
        raise IntegrityError(
            f"lock is stale: it does not record {missing[0]}, a file the recipe names",
            hint=again,
            file=display,
            field=f"files.{missing[0]}",
        )
    for rel, digest in lock.files.items():
        actual = sha256_file(loaded.root / rel) if (loaded.root / rel).exists() else "missing"
        if actual != digest:
            raise IntegrityError(
                f"lock is stale: {rel} hashes to {actual}, the lock says {digest}", file=display, field=f"files.{rel}"
            )
    return lock


def apply_lock(loaded: LoadedRecipe, lock: Lock, partial: bool = False) -> LoadedRecipe:
    """A copy of the recipe with the lock's commits, bases and diff hashes filled in. The recipe was
    validated when it was loaded; each value the lock fills in is validated here by the model of
    the field it fills (BaseImage, PatchEntry), so the whole recipe is not validated a second time."""
    r = loaded.recipe
    update: dict = {}
    bases = {}
    for stage in ("build", "runtime"):
        base = getattr(r.bases, stage)
        digest = getattr(lock.bases, stage).digest
        bases[stage] = _validated(BaseImage, base, {"digest": digest}, loaded, f"bases.{stage}") if digest else base
    update["bases"] = r.bases.model_copy(update=bases)
    if r.engine:

        def pinned(e: PatchEntry) -> PatchEntry:
            p = lock.patch(e.id)
            if p is None and partial:
                return e
            if p is None:
                raise IntegrityError(
                    f"lock has no entry for patch {e.id}",
                    hint="run `invoke lock` again",
                    file=loaded.file,
                    field=f"patches.{e.id}",
                )
            if partial and not (p.commit and p.sha256):
                return e
            return _validated(
                PatchEntry,
                e,
                {"commit": p.commit, "base": p.base, "sha256": p.sha256},
                loaded,
                f"engine.source.patches.{e.id}",
            )

        source = r.engine.source.model_copy(
            update={
                "patches": [pinned(e) for e in r.engine.source.patches],
                "optional_patches": [pinned(e) for e in r.engine.source.optional_patches],
            }
        )
        update["engine"] = r.engine.model_copy(update={"source": source})
    return loaded.replace(r.model_copy(update=update))


def _validated(model: type, current, values: dict, loaded: LoadedRecipe, where: str):
    """`current` with the lock's `values`, through `model`'s own validation (one line if refused)."""
    try:
        with warnings.catch_warnings():  # a wrong-typed value is the one error line below, not a warning too
            warnings.simplefilter("ignore")
            return model.model_validate({**current.model_dump(mode="python"), **values})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join([where, *map(str, err["loc"])]) if err["loc"] else where
        raise InputError(
            f"lock value refused: {err['msg'].removeprefix('Value error, ')}",
            hint="run `invoke lock` again",
            file=lock_display(loaded),
            field=field,
        ) from None


def lock_display(loaded: LoadedRecipe) -> str:
    path = lock_path(loaded)
    return str(path.relative_to(loaded.root)) if path.is_relative_to(loaded.root) else str(path)


def pin_for_build(loaded: LoadedRecipe) -> tuple[LoadedRecipe, Optional[Lock]]:
    """A plain build: apply the committed lock when it is current (whatever it resolved), so
    locked PR commits and diff hashes are used; anything still unresolved is refused later,
    entry by entry, only if the stack being built needs it."""
    lock = load_lock_file(loaded)
    if lock is None or lock.recipe_sha256 != loaded.sha256:
        return loaded, None
    return apply_lock(loaded, lock, partial=True), lock


def unpinned_problem(loaded: LoadedRecipe, lock: Optional[Lock]) -> Optional[Refused]:
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
    short = f"only the short SHA {entry.commit_hint} is known; " if entry.commit_hint else ""
    return Refused(
        f"patch entry {entry.id} (PR #{entry.pr}) is not pinned to a full commit: {short}{why}",
        hint=f"run `invoke lock --recipe {loaded.recipe.name}` now on a host that reaches "
        f"{engine.source.url} (this one, if it does), then build",
        file=loaded.file,
        field=f"engine.source.patches.{entry.id}",
    )


def debian_pins(loaded: LoadedRecipe, platform: str) -> tuple[Optional[LockedDebian], str]:
    """The Debian side a build of `loaded` for `platform` installs, and the lock it comes from: the
    recipe's own current lock's; for a recipe with no lock file of its own (one a user derives from
    a locked recipe to change, say, its aot kernels), the nearest recipe it extends whose current
    lock pins the platform, when its suite and apt steps are the ones this recipe renders (else
    nothing: the build resolves apt as an unlocked one does)."""
    _, lock = pin_for_build(loaded)
    if lock is not None or lock_path(loaded).exists():
        return (lock.debian.get(platform) if lock else None), lock_display(loaded)
    suite, steps = bootstrapped_suite(loaded.recipe), apt_steps(loaded.recipe)
    for rf in loaded.chain[1:]:
        try:  # a parent that is not a whole recipe alone (a fragment others extend) has no lock to lend
            parent = load_recipe(str(rf.path), loaded.root)
            _, parent_lock = pin_for_build(parent)
        except ServebuildError:
            continue
        pins = parent_lock.debian.get(platform) if parent_lock else None
        if pins is None:
            continue
        same = pins.suite == suite and all(
            stage in pins.apt and pins.apt[stage].requested == sorted(pkgs) for stage, pkgs in steps.items()
        )
        return (pins if same else None), lock_display(parent)
    return None, lock_display(loaded)
