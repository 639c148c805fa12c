"""The files a recipe names, listed once: validation, the lock and the manifest all use this list."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

from servebuild.recipe.grammar import shown
from servebuild.recipe.schema import Recipe

MAX_PATH, MAX_COMPONENT = 1024, 255  # a named file's path: far below PATH_MAX, a component within NAME_MAX


@dataclass(frozen=True)
class NamedFile:
    loc: tuple  # field path in the recipe, for error places
    path: str  # relative to the project root
    kind: str  # "requirements", "wheel", "patch" or "recording"
    platform: Optional[str] = None  # None: used for every platform
    sha256: Optional[str] = None  # the hash the recipe records (patches)
    entry: Optional[str] = None  # the patch entry's id


def named_files(recipe: Recipe) -> list[NamedFile]:
    out = [NamedFile(("constraints", p), rel, "requirements", p) for p, rel in sorted(recipe.constraints.items())]
    out += [NamedFile(("wheels", i), rel, "wheel") for i, rel in enumerate(recipe.wheels)]
    engine = recipe.engine
    if engine:
        out += [
            NamedFile(("engine", "precompiled", p), rel, "requirements", p)
            for p, rel in sorted(engine.precompiled.items())
        ]
        if engine.sdist:
            out.append(NamedFile(("engine", "sdist"), engine.sdist, "requirements"))
        for key in ("patches", "optional_patches"):
            out += [
                NamedFile(("engine", "source", key, i, "file"), e.file, "patch", sha256=e.sha256, entry=e.id)
                for i, e in enumerate(getattr(engine.source, key))
                if e.file
            ]
    out += [NamedFile(("aot", "recordings", i), rel, "recording") for i, rel in enumerate(recipe.aot.recordings)]
    return out


def files_for(recipe: Recipe, platform: str) -> list[NamedFile]:
    return [f for f in named_files(recipe) if f.platform in (None, platform)]


def escape_problem(rel: str, root: Path) -> Optional[str]:
    """A named file must be a relative path inside the project (no `..`, no absolute path, no link out)."""
    pure = PurePosixPath(rel)
    if len(rel) > MAX_PATH or any(len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for part in pure.parts):
        return (
            f"{shown(rel)} is not a path of at most {MAX_PATH} characters ({MAX_COMPONENT} bytes a component) "
            f"inside the project"
        )
    if pure.is_absolute() or ".." in pure.parts or any(ord(c) < 32 for c in rel):
        return f"{rel!r} must be a relative path inside the project, without '..'"
    resolved = (root / rel).resolve()
    if not resolved.is_relative_to(root.resolve()):
        return f"{rel} resolves outside the project ({resolved})"
    return None
