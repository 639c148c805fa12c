"""Committed image ids: RECIPE.ids.yaml next to the recipe records, per platform, the image id (and its
layers and base) that a build of this recipe and lock gives on any machine. `invoke build --record-id`
writes it (generated, like the locks); every build and `invoke main` say whether the image they made
equals it, or name the first layer that differs; `invoke rebuild --committed` rebuilds against it
without a registry.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from servebuild.build.docker import DockerClient
from servebuild.build.imageconfig import image_config, layers_in
from servebuild.errors import InputError
from servebuild.fsutil import atomic_write
from servebuild.platforms import PLATFORMS
from servebuild.recipe.grammar import NAME
from servebuild.recipe.load import LoadedRecipe, check_link_inside
from servebuild.yamlfile import load_yaml

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
HEADER = (
    "# Written by `invoke build --record-id`; do not edit. The image id a build of this recipe and its\n"
    "# lock gives on any machine (bases bootstrapped from the lock's Debian packages); builds compare with it.\n"
)


class CommittedImage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    image: str
    base: Optional[str] = None
    layers: list[str]

    @field_validator("image", "base")
    @classmethod
    def _digest(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not DIGEST.fullmatch(v):
            raise ValueError("is not sha256:<64 hex digits>")
        return v

    @field_validator("layers")
    @classmethod
    def _layers(cls, v: list[str]) -> list[str]:
        bad = next((x for x in v if not DIGEST.fullmatch(x)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not sha256:<64 hex digits>")
        return v


def ids_path(loaded: LoadedRecipe) -> Path:
    path = loaded.chain[0].path
    return path.with_name(path.stem + ".ids.yaml")


def display(loaded: LoadedRecipe) -> str:
    path = ids_path(loaded)
    return str(path.relative_to(loaded.root)) if path.is_relative_to(loaded.root) else str(path)


def load_committed(loaded: LoadedRecipe) -> dict[str, CommittedImage]:
    """platform -> the committed image (empty when the recipe has no ids file); malformed: one line."""
    path, where = ids_path(loaded), display(loaded)
    if not path.exists():
        return {}
    check_link_inside(path, loaded.root)
    data = load_yaml(path, where)[0] or {}
    if not isinstance(data, dict):
        raise InputError("malformed ids file: a mapping of platform to image", file=where)
    out = {}
    for platform in data:
        if not _entry_key(platform):
            raise InputError(
                f"malformed ids file: {str(platform)[:80]!r} is not PLATFORM or PLATFORM:VARIANT "
                f"(platforms {', '.join(PLATFORMS)})",
                hint=f"run `invoke build --recipe {loaded.recipe.name} --record-id` again",
                file=where,
            )
    for platform, entry in sorted(data.items()):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[str(platform)] = CommittedImage.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join([str(platform), *map(str, err["loc"])])
            raise InputError(
                f"malformed ids file: {err['msg'].removeprefix('Value error, ')}",
                hint=f"run `invoke build --recipe {loaded.recipe.name} --record-id` again",
                file=where,
                field=field,
            ) from None
    return out


def _entry_key(key: object) -> bool:
    """An ids file's key is what `key` writes: a platform servebuild builds, or one of its A/B variants."""
    if not isinstance(key, str):
        return False
    platform, colon, variant = key.partition(":")
    return platform in PLATFORMS and (not colon or bool(NAME.match(variant)))


def layers_of(docker: DockerClient, image_id: str, platform: str) -> tuple[list[str], list[str]]:
    """(diff_ids, the history's created_by of each layer) of a local image."""
    return layers_in(image_config(docker, image_id, platform))


def key(platform: str, variant: Optional[str] = None) -> str:
    """The entry of a platform's build (`linux/amd64`), or of one A/B variant of it (`linux/amd64:release`)."""
    return f"{platform}:{variant}" if variant else platform


def record(loaded: LoadedRecipe, platform: str, entry: CommittedImage, variant: Optional[str] = None) -> Path:
    path = ids_path(loaded)
    data = {p: e.model_dump(exclude_none=True) for p, e in load_committed(loaded).items()}
    data[key(platform, variant)] = entry.model_dump(exclude_none=True)
    atomic_write(path, HEADER + yaml.safe_dump(data, sort_keys=True, width=120))
    return path


def verdict(
    loaded: LoadedRecipe,
    platform: str,
    image_id: str,
    layers: list[str],
    steps: list[str],
    variant: Optional[str] = None,
) -> tuple[bool, str]:
    """(whether it matches, the one line to print) for an image built from `loaded` for `platform`."""
    committed = load_committed(loaded).get(key(platform, variant))
    where = display(loaded)
    if committed is None:
        return False, (
            f"no committed id for {key(platform, variant)} in {where} (`invoke build --record-id` writes one)"
        )
    if committed.image == image_id:
        return True, f"matches the committed digest {image_id} ({where})"
    for i, (ours, theirs) in enumerate(zip(layers, committed.layers)):
        if ours != theirs:
            step = steps[i] if i < len(steps) else "?"
            step = re.sub(r"\s+", " ", step)[:160]
            return False, (
                f"differs from the committed digest {committed.image} ({where}): first differing layer "
                f"{i + 1} of {len(layers)} ({ours[:19]}… vs {theirs[:19]}…), made by: {step}"
            )
    if len(layers) != len(committed.layers):
        return False, (
            f"differs from the committed digest {committed.image} ({where}): {len(layers)} layers, "
            f"the committed image has {len(committed.layers)}"
        )
    return False, (
        f"differs from the committed digest {committed.image} ({where}): every layer is the same, the config differs"
    )
