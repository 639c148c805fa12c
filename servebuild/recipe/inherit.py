"""Recipe inheritance, one rule in one place: a recipe's `extends` and a launch profile's `from`.

A recipe that `extends` another gets the parent's fields with its own on top: mappings merge key by
key, lists and scalars are replaced. Launch profiles inherit by the profile rule, whether from the
same-named profile of the recipe extended or from the profile a `from` names in the merged recipe:
the parent's fields, the child's on top, `env` merged key by key and `extra_args` appended (a child
adds flags; `args` it replaces whole). `launch.profiles.NAME: null` removes an inherited profile.
`extends` is applied first (parent recipe, then child), then `null`, then each `from`.
"""

from __future__ import annotations

from typing import Any

from servebuild.engines.profiles import profile_fields
from servebuild.errors import PlacedValueError

PROFILES = ("launch", "profiles")


def deep_merge(parent: Any, child: Any) -> Any:
    """Child overrides parent; mappings merge key by key, everything else is replaced."""
    if isinstance(parent, dict) and isinstance(child, dict):
        out = dict(parent)
        for key, value in child.items():
            out[key] = deep_merge(parent[key], value) if key in parent else value
        return out
    return child


def merge_profile(name: str, base: Any, child: Any, only_fields: bool = False) -> dict:
    """The profile rule: BASE's fields, CHILD's on top, env merged key by key, extra_args appended.
    ONLY_FIELDS (`from`: the base is a profile of its own, validated as such) takes the base's
    profile fields only; under `extends` every key carries over, so a wrong one is still named."""
    for part in (base, child):  # the merge needs the right shapes; field validation comes after
        if (
            not isinstance(part, dict)
            or not isinstance(part.get("env") or {}, dict)
            or not isinstance(part.get("extra_args") or [], list)
        ):
            raise PlacedValueError(
                (*PROFILES, name),
                "inheriting (`extends`, `from`) needs mapping profiles with an `env` mapping and an `extra_args` list",
            )
    fields = profile_fields()  # the model's, so a new field needs no edit here
    merged = {k: v for k, v in base.items() if k in fields or not only_fields}
    merged.update({k: v for k, v in child.items() if k not in ("env", "extra_args")})
    merged["env"] = {**(base.get("env") or {}), **(child.get("env") or {})}
    merged["extra_args"] = list(base.get("extra_args") or []) + list(child.get("extra_args") or [])
    return merged


def _profiles(data: dict) -> Any:
    launch = data.get("launch")
    return launch.get("profiles") if isinstance(launch, dict) else None


def merged_recipe(chain: list[dict]) -> dict:
    """The recipe CHAIN (child first, as read) describes, every inheritance applied. Raises
    PlacedValueError naming the profile whose inheritance cannot be applied."""
    merged: dict = {}
    profiles: Any = None  # the launch profiles so far, by the profile rule
    for data in reversed(chain):
        merged = deep_merge(merged, data)
        launch = data.get("launch", {})
        if not isinstance(launch, dict):
            profiles = None  # replaced whole: the schema names what is wrong with it
        elif "profiles" in launch:
            own = launch["profiles"]
            if isinstance(profiles, dict) and isinstance(own, dict):
                profiles = {
                    **profiles,
                    **{
                        name: merge_profile(name, profiles[name], value)
                        if value is not None and profiles.get(name) is not None
                        else value
                        for name, value in own.items()
                    },
                }
            else:
                profiles = own
    if isinstance(profiles, dict) and isinstance(merged.get("launch"), dict):
        kept = {name: value for name, value in profiles.items() if value is not None}
        merged["launch"] = {**merged["launch"], "profiles": expand_from(kept)}
    return merged


def expand_from(profiles: dict) -> dict:
    """Each profile with `from: OTHER` is OTHER's fields (expanded first) under the profile rule."""

    def expand(name: str, trail: tuple) -> Any:
        raw = profiles[name]
        if not isinstance(raw, dict) or "from" not in raw:
            return raw
        parent = raw["from"]
        if not isinstance(parent, str) or parent not in profiles:
            raise PlacedValueError((*PROFILES, name, "from"), f"`from` names unknown profile {parent!r}")
        if parent in trail:
            raise PlacedValueError((*PROFILES, name, "from"), f"cyclic `from`: {' -> '.join(trail + (parent,))}")
        child = {k: v for k, v in raw.items() if k != "from"}
        return merge_profile(name, expand(parent, trail + (parent,)), child, only_fields=True)

    return {name: expand(name, (name,)) for name in profiles}
