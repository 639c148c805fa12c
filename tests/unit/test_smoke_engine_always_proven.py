"""An engine recipe whose `expect` says nothing still has its engine checked by the smoke suite
(issue 33: with `expect: {}` every engine check was a skip and the verdict PASS with nothing checked)."""

from __future__ import annotations

from servebuild.check.smoke import expectations
from servebuild.recipe.load import LoadedRecipe, load_recipe
from servebuild.recipe.schema import Expect
from support import REPO_ROOT


def _without_expect(name: str) -> LoadedRecipe:
    loaded = load_recipe(name, REPO_ROOT)
    return LoadedRecipe(loaded.recipe.model_copy(update={"expect": Expect()}), loaded.chain, loaded.root)


def test_an_engine_recipe_with_an_empty_expect_still_imports_and_versions_its_engine():
    for name, engine, version in (("vllm-dspark", "vllm", "0.26.0"), ("sglang-native-fp8", "sglang", "0.5.16")):
        got = expectations(_without_expect(name), None, image=True)
        assert got["imports"] == [engine] and got["versions"] == {engine: version}, got


def test_what_a_recipe_says_is_kept_and_not_repeated():
    loaded = load_recipe("vllm-dspark", REPO_ROOT)
    got = expectations(loaded, None, image=True)
    assert got["imports"] == loaded.recipe.expect.imports and got["versions"] == loaded.recipe.expect.versions


def test_a_recipe_without_an_engine_is_not_given_one():
    got = expectations(load_recipe("torch-cu130", REPO_ROOT), None, image=True)
    assert "vllm" not in got["imports"] and "sglang" not in got["imports"]


def test_the_manifest_path_proves_the_engine_too():
    manifest = {
        "expect": {"imports": [], "versions": {}},
        "recipe": {"name": "r"},
        "launch": {"profiles": [], "user": "root", "workdir": "/", "cache_dirs": []},
        "engine": {"name": "vllm", "version": "0.26.0", "source": {}},
    }
    got = expectations(None, manifest, image=True)
    assert got["imports"] == ["vllm"] and got["versions"] == {"vllm": "0.26.0"}
