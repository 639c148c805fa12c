"""The engine's patched source for one platform: the install mode says where the tree comes from
(the pinned commit, or the tag's release artifact from PyPI, checked against the commit its version
file says it was cut from) and which changes it can carry; the source cache lays it out, applies the
stack and writes the tarball."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from servebuild.sources.artifacts import fetch_artifact
from servebuild.fsutil import canonical_json
from servebuild.recipe.load import LoadedRecipe
from servebuild.sources.stack import PreparedSource, SourceCache
from servebuild.sources.versionfile import check_sdist_commit


def fetch_release(loaded: LoadedRecipe, origin, platform: str, cache_root: Path, offline: bool, ca_bundle=None):
    """The engine's release artifact an origin of kind pypi names (its requirement file's pinned hash), from
    the cache or the index: (path, digest). Both the lock (the sdist's commit) and the preparation read it."""
    return fetch_artifact(
        loaded.root / origin.requirement,
        origin.requirement,
        origin.artifact,
        platform,
        loaded.recipe.python,
        cache_root,
        offline=offline,
        ca_bundle=ca_bundle,
    )


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
        path, digest = fetch_release(loaded, origin, platform, cache.root, offline, ca_bundle)
        release = (path, digest, origin.artifact, origin.package_prefix)
    # the rule depends on the mode and the engine's other fields: they key a remembered preparation
    rule_key = canonical_json(engine.model_dump(mode="json", exclude={"source"}))
    prepared = cache.prepare(
        engine.source,
        loaded.root,
        work,
        release=release,
        rule_key=rule_key,
        rule=lambda path, release_files: mode.patch_problem(path, release_files, engine),
        version_file=origin.version_file if origin.kind == "pypi" else None,
        python=loaded.recipe.python,
    )
    tree = prepared.tree
    if "version_file" in tree:  # checked on every use: the recipe's sdist_commit keys no remembered preparation
        check_sdist_commit(
            tree["sdist_commit"],
            tree["commit_id"],
            engine.source.commit,
            engine.source.sdist_commit,
            f"{tree['file']}:{tree['version_file']}",
            loaded.file,
        )
    return prepared
