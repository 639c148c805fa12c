"""The engine's patched source for one platform: the install mode says where the tree comes from
(the pinned commit, or the release artifact of the same tag from PyPI) and which changes it can
carry; the source cache lays it out, applies the stack and writes the tarball."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from servebuild.sources.artifacts import fetch_artifact
from servebuild.fsutil import canonical_json
from servebuild.recipe.load import LoadedRecipe
from servebuild.sources.stack import PreparedSource, SourceCache


def prepare_engine_source(
    loaded: LoadedRecipe,
    platform: str,
    cache: SourceCache,
    work: Path,
    offline: bool = False,
    ca_bundle: Optional[Path] = None,
) -> Optional[PreparedSource]:
    engine = loaded.recipe.engine
    if engine is None:
        return None
    mode = engine.mode
    origin = mode.tree_origin(engine, platform)
    release = None
    if origin.kind == "pypi":
        path, digest = fetch_artifact(
            loaded.root / origin.requirement,
            origin.requirement,
            origin.artifact,
            platform,
            loaded.recipe.python,
            cache.root,
            offline=offline,
            ca_bundle=ca_bundle,
        )
        release = (path, digest, origin.artifact, origin.package_prefix)
    # the rule depends on the mode and the engine's other fields: they key a remembered preparation
    rule_key = canonical_json(engine.model_dump(mode="json", exclude={"source"}))
    return cache.prepare(
        engine.source,
        loaded.root,
        work,
        release=release,
        rule_key=rule_key,
        rule=lambda path, release_files: mode.patch_problem(path, release_files, engine),
        python=loaded.recipe.python,
    )
