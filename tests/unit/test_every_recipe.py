"""Every committed recipe, checked without an engine: it validates, renders for each of its
platforms (hadolint-clean, the profile-check stage present for engine recipes) and has a current
lock. The engine image tests (tests/integration/test_engine_images.py) parse each engine recipe's
launch profiles inside the built image of its engine; this file also proves that every engine a
committed recipe names is one of those images, so no recipe goes unparsed."""

from __future__ import annotations

import pytest

from servebuild.lock.lockfile import current_lock
from servebuild.recipe.load import load_recipe
from servebuild.render.context import render_dockerfile
from support import RECIPE_CHECKS, REPO_ROOT

RECIPES = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.yaml") if not p.stem.endswith((".lock", ".ids")))
# the engines whose images CI builds and parses every profile in (test_engine_images.CASES)
BUILT_ENGINES = {"sglang": "sglang-native-fp8-bookworm", "vllm": "vllm-dspark-bookworm"}


@pytest.mark.parametrize("name", RECIPES)
def test_committed_recipe_renders_and_has_a_current_lock(name):
    loaded = load_recipe(name, REPO_ROOT)
    recipe = loaded.recipe
    lock = current_lock(loaded)  # raises, one line, if missing or stale
    for platform in recipe.platforms:
        text = render_dockerfile(recipe, loaded.sha256, platform, {"build": "b", "runtime": "r"}, REPO_ROOT)
        assert f"recipe sha256: {loaded.sha256}" in text
        final = text.index("AS runtime\n")  # the last stage: what differs per profile, after every heavy layer
        assert text.index("--mount=type=bind,from=deps,source=/opt/venv,target=/mnt/src") < final
        if recipe.launch.profiles:
            assert "source=launchers,target=/mnt/launchers" in text[final:], "the launchers must come last"
            # the profile-check stage binds them too (one step with its check; only its record reaches the image)
            assert text[:final].count("source=launchers,target=/mnt/launchers") == (1 if recipe.engine else 0)
        if recipe.engine:
            assert "AS profile-check" in text and all(p in text for p in recipe.launch.profiles)
    engine = recipe.engine.name if recipe.engine else None
    assert engine is None or engine in BUILT_ENGINES, f"{name}: no CI image parses {engine} profiles"
    RECIPE_CHECKS.append(
        f"{name}: validated; rendered {', '.join(recipe.platforms)}; lock current "
        f"({len(lock.unresolved)} unresolved); profiles "
        + (f"parsed in the {BUILT_ENGINES[engine]} image (test_engine_images)" if engine else "none (no engine)")
    )
