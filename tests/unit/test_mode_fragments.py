"""Each install mode's engine-stage fragment and each stage template, per platform, as exact
text (like HPCCM's per-building-block tests): a change to one shows up here, named."""

from __future__ import annotations

import os

import pytest

from servebuild.recipe.load import load_recipe
from servebuild.modes import MODES
from servebuild.render.context import _environment, dockerfile_data, mode_fragment
from support import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "golden" / "fragments"
PLATFORMS = ["linux/amd64", "linux/arm64"]
# a recipe whose engine fields satisfy every mode; the mode is swapped in
RECIPE = "vllm-dspark"


def check(name: str, text: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden.name} differs; UPDATE_GOLDEN=1 after review"


def engine_with(mode: str):
    engine = load_recipe(RECIPE, REPO_ROOT).recipe.engine
    return engine.model_copy(update={"install": mode, "overlay_from": "vllm"})


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_mode_fragment(mode, platform):
    engine, env = engine_with(mode), _environment()
    text = mode_fragment(engine, platform, env) + "\n"
    runtime = mode_fragment(engine, platform, env, runtime=True)
    if runtime:
        text += "# -- runtime stage\n" + runtime + "\n"
    check(f"mode-{mode}.{platform.replace('/', '-')}", text)
    assert "${ENGINE_VERSION}" in text and "/opt/engine/site" in text
    assert ("ARG MAX_JOBS" in text) == MODES[mode].compiles


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("stage", ["build", "engine", "runtime"])
def test_stage_template(stage, platform):
    loaded = load_recipe("sglang-native-fp8", REPO_ROOT)
    bases = {"build": "base/build", "runtime": "base/runtime"}
    data = dockerfile_data(loaded.recipe, REPO_ROOT, platform, bases)
    text = _environment().get_template(f"stages/{stage}.j2").render(recipe_sha256="0" * 64, **data)
    check(f"stage-{stage}.{platform.replace('/', '-')}", text)
