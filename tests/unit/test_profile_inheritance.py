"""Launch profiles: inherited by one rule (servebuild/recipe/inherit.py), whether from the recipe a
recipe `extends` or from a `from:`, and their flags parsed once, as the engine reads them, for every
rule and renderer (engines/profiles.profile_flags)."""

from __future__ import annotations

from typing import Optional

import pytest
import yaml
from pydantic import Field

from servebuild.engines import profiles as profiles_module
from servebuild.errors import RecipeError
from servebuild.recipe.load import load_recipe
from unit.minimal_recipe import BASE, merge

SERVE = {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m"]}


def write(project, name: str, data: dict) -> None:
    (project / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(data))


def child_of_base(project, profiles: dict, base_profiles: dict) -> dict:
    write(project, "hostile", merge(BASE, {"launch": {"profiles": base_profiles}}))
    write(project, "child", {"name": "child", "extends": "hostile", "launch": {"profiles": profiles}})
    return load_recipe("child", project).recipe.launch.profiles


def test_extends_and_from_inherit_a_profile_by_the_same_rule(project):
    parent = {**SERVE, "env": {"A": "1", "B": "1"}, "extra_args": ["--x"]}
    over = {"env": {"B": "2"}, "extra_args": ["--y"]}
    by_extends = child_of_base(project, {"p": over}, {"p": parent})["p"]
    by_from = child_of_base(project, {"q": {"from": "p", **over}}, {"p": parent})["q"]
    for got in (by_extends, by_from):
        assert got.env == {"A": "1", "B": "2"}
        assert got.extra_args == ["--x", "--y"]  # appended: a child adds flags (extends replaced them before)
        assert got.args == ["serve", "/m"]


def test_a_child_profile_replaces_args_whole(project):
    got = child_of_base(project, {"p": {"args": ["serve", "/other"]}}, {"p": SERVE})["p"]
    assert got.args == ["serve", "/other"] and got.module == SERVE["module"]


def test_from_reaches_a_profile_of_the_recipe_extended_and_null_removes_one(project):
    got = child_of_base(project, {"p": None, "q": {"from": "r", "extra_args": ["--z"]}}, {"p": SERVE, "r": SERVE})
    assert sorted(got) == ["q", "r"]
    assert got["q"].extra_args == ["--z"] and got["q"].args == SERVE["args"]


def test_from_a_removed_profile_is_one_placed_line(project):
    with pytest.raises(RecipeError) as info:
        child_of_base(project, {"p": None, "q": {"from": "p"}}, {"p": SERVE})
    line = str(info.value)
    assert line.startswith("recipes/child.yaml") and "launch.profiles.q.from" in line
    assert "`from` names unknown profile 'p'" in line and "\n" not in line


def test_a_cyclic_from_is_refused(project):
    with pytest.raises(RecipeError, match="cyclic `from`: a -> b -> a"):
        child_of_base(project, {"a": {"from": "b"}, "b": {"from": "a"}}, {"p": SERVE})


def test_a_typo_in_an_inherited_profile_is_still_named(project):
    with pytest.raises(RecipeError, match=r"launch\.profiles\.p\.argz: unknown field"):
        child_of_base(project, {"p": {"env": {"B": "2"}}}, {"p": {**SERVE, "argz": ["--x"]}})


def test_profile_flags_are_parsed_once_for_every_rule_and_renderer(project, monkeypatch):
    calls = []
    real = profiles_module.canonical_flags
    monkeypatch.setattr(profiles_module, "canonical_flags", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    profiles_module._parsed.cache_clear()
    args = ["serve", "/m", "--port", "8123", "--max-model-len", "4096"]
    write(project, "hostile", merge(BASE, {"launch": {"profiles": {"p": {**SERVE, "args": args}}}}))
    recipe = load_recipe("hostile", project).recipe
    kind, profile = recipe.engine.kind, recipe.launch.profiles["p"]
    assert kind.listen_args(profile) == ["--host", "0.0.0.0"]
    assert kind.profile_port(profile) == 8123
    assert calls == [args]  # the recipe's rules, the listen flags and the port: one parse


def test_the_common_rules_read_the_flags_as_the_engine_does(project):
    """vLLM's parser reads `--max_model_len` as `--max-model-len`: given both ways, it is given twice."""
    args = ["serve", "/m", "--max_model_len", "1", "--max-model-len", "2"]
    write(project, "hostile", merge(BASE, {"launch": {"profiles": {"p": {**SERVE, "args": args}}}}))
    with pytest.raises(RecipeError, match="flag --max-model-len is given 2 times"):
        load_recipe("hostile", project)


def test_a_recipe_without_an_engine_gets_the_common_rules(project):
    data = {k: v for k, v in BASE.items() if k != "engine"}
    data["launch"] = {"profiles": {"p": {"module": "http.server", "args": ["--port", "99999"]}}}
    write(project, "hostile", data)
    with pytest.raises(RecipeError, match="--port '99999' is not a TCP port"):
        load_recipe("hostile", project)


def test_a_new_profile_field_survives_extends_and_from(project, monkeypatch):
    """A field added to the LaunchProfile model is inherited with no other edit: the fields `from:`
    carries over are the model's own, not a hand-kept list beside it (which dropped a new one)."""
    from servebuild.recipe import load as load_module
    from servebuild.recipe.schema import Launch, Recipe

    class Sized(profiles_module.LaunchProfile):
        gpus: Optional[int] = Field(default=None, ge=1)  # a field the model did not have

    class SizedLaunch(Launch):
        profiles: dict[str, Sized] = {}

    class SizedRecipe(Recipe):
        launch: SizedLaunch = SizedLaunch()

    monkeypatch.setattr(profiles_module, "LaunchProfile", Sized)
    monkeypatch.setattr(load_module, "Recipe", SizedRecipe)
    got = child_of_base(project, {"p": {"env": {"B": "2"}}, "q": {"from": "p"}}, {"p": {**SERVE, "gpus": 4}})
    assert isinstance(got["p"], Sized) and isinstance(got["q"], Sized)
    assert got["p"].gpus == 4  # by `extends`
    assert got["q"].gpus == 4  # by `from:`
    assert got["q"].env == {"B": "2"} and got["q"].args == SERVE["args"]
