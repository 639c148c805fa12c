"""User-level configuration: git and image mirrors for air-gapped sites.

Read from $SERVEBUILD_CONFIG, else ~/.config/servebuild/config.yaml. SERVEBUILD_GIT_MIRRORS
("URL=MIRROR;URL=MIRROR") and SERVEBUILD_IMAGE_MIRRORS ("REF=REF;...") add to it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from servebuild.errors import RecipeError
from servebuild.recipe.grammar import IMAGE_REF, MAX_REFERENCE, shown
from servebuild.yamlfile import load_yaml


@dataclass(frozen=True)
class Config:
    git_mirrors: dict[str, str] = field(default_factory=dict)
    image_mirrors: dict[str, str] = field(default_factory=dict)


def _pairs(text: str, var: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        if "=" not in item:
            raise RecipeError(f"entry {item!r} is not FROM=TO", file=f"${var}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


GIT_REMOTE = re.compile(r"^((https?|git|ssh|file)://[^\s-][^\s]*|/[^\s]*)\Z")
MAX_REMOTE = 1024  # characters of a git URL or mirror path, key or value


def _git_remotes(mapping: dict[str, str], file: str, field: str) -> dict[str, str]:
    """Mirror values reach git as its remote argument: a URL or an absolute path, never an option."""
    for key, value in mapping.items():
        for what, text in (("URL", key), ("mirror", value)):
            if len(text) > MAX_REMOTE or not GIT_REMOTE.match(text):
                raise RecipeError(
                    f"{what} {shown(text)} is not a git URL (https://, git://, ssh://, file://) "
                    f"or an absolute path of at most {MAX_REMOTE} characters",
                    file=file,
                    field=f"{field}.{str(key)[:120]}",
                )
    return mapping


def _image_refs(mapping: dict[str, str], file: str, field: str) -> dict[str, str]:
    """Mapped references land in FROM lines: each must be an image reference and nothing else."""
    for key, value in mapping.items():
        if not isinstance(key, str) or not IMAGE_REF.match(key) or not IMAGE_REF.match(value):
            raise RecipeError(
                f"{shown(value)} (for {shown(key)}) is not an image reference name[:tag][@sha256:...] "
                f"of at most {MAX_REFERENCE} characters",
                file=file,
                field=f"{field}.{str(key)[:120]}",
            )
    return mapping


def load_config(path: Optional[Path] = None) -> Config:
    path = path or Path(os.environ.get("SERVEBUILD_CONFIG", Path.home() / ".config/servebuild/config.yaml"))
    data: dict = {}
    if path.exists():
        data = load_yaml(path)[0] or {}
        if not isinstance(data, dict) or set(data) - {"git_mirrors", "image_mirrors"}:
            raise RecipeError("expected a mapping with git_mirrors and/or image_mirrors", file=str(path))
        for key in ("git_mirrors", "image_mirrors"):
            value = data.get(key) or {}
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise RecipeError("must map strings to strings", file=str(path), field=key)
            data[key] = value
    git = _git_remotes(data.get("git_mirrors", {}), str(path), "git_mirrors")
    git.update(
        _git_remotes(
            _pairs(os.environ.get("SERVEBUILD_GIT_MIRRORS", ""), "SERVEBUILD_GIT_MIRRORS"),
            "$SERVEBUILD_GIT_MIRRORS",
            "git_mirrors",
        )
    )
    images = _image_refs(data.get("image_mirrors", {}), str(path), "image_mirrors")
    images.update(
        _image_refs(
            _pairs(os.environ.get("SERVEBUILD_IMAGE_MIRRORS", ""), "SERVEBUILD_IMAGE_MIRRORS"),
            "$SERVEBUILD_IMAGE_MIRRORS",
            "image_mirrors",
        )
    )
    return Config(git_mirrors=git, image_mirrors=images)


def load_mirror_map(path: Path) -> dict[str, str]:
    """A mirror map file (`images:` section) that rewrites recipe base references."""
    data = load_yaml(path)[0] or {}
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in images.items()):
        raise RecipeError(
            "a mirror map needs an `images:` mapping of reference to reference", file=str(path), field="images"
        )
    return _image_refs(images, str(path), "images")
