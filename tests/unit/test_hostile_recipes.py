"""Careless and hostile recipes fail in loading with one placed error: no Dockerfile line, shell
word or path outside the project can be smuggled in (unit level: no engine, no subprocess).
The recipe edited here is tests/unit/minimal_recipe.py's BASE, loaded in tests/unit/conftest.py's
`project`; the same rules on other inputs are with their readers (test_yaml_bounds.py, test_lockfile.py,
test_input_limits.py, test_depsets.py, test_plan.py, test_bisect.py)."""

from __future__ import annotations

import pytest
import yaml

from servebuild.errors import RecipeError
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT
from unit.minimal_recipe import BASE, merge

INJECT = "x\nRUN touch /pwned"
CASES = {
    "apt.build": ({"apt": {"build": [INJECT]}}, "apt.build"),
    "apt.runtime": ({"apt": {"runtime": ["ok; touch /pwned"]}}, "apt.runtime"),
    "launch.workdir": ({"launch": {"workdir": "/w" + INJECT}}, "launch.workdir"),
    "launch.user": ({"launch": {"user": "0\nUSER 1"}}, "launch.user"),
    "launch.cache_dirs": ({"launch": {"cache_dirs": ["/c $(touch /pwned)"]}}, "launch.cache_dirs"),
    "engine.version": ({"engine": {"version": "1.0\nRUN id"}}, "engine.version"),
    "engine.source.subdir": ({"engine": {"source": {"subdir": "py; touch /pwned"}}}, "engine.source.subdir"),
    "engine.overlay_from": ({"engine": {"overlay_from": "../../etc"}}, "engine.overlay_from"),
    "profile description": ({"launch": {"profiles": {"p": {"description": "a\ntouch /pwned"}}}}, "launch.profiles"),
    "commit with newline": (
        {"engine": {"source": {"commit": "568afb3a13806beb53bb2e6bd518269357b237c0\n"}}},
        "engine.source.commit",
    ),
    "python with newline": ({"python": "3.12\n"}, "python"),
    "arch list with newline": ({"cuda_arch_list": "9.0a\n"}, "cuda_arch_list"),
    "name with newline": ({"name": "hostile\n"}, "name"),
    "env name with newline": ({"launch": {"profiles": {"p": {"env": {"A\n": "1"}}}}}, "launch.profiles"),
    "import is code": ({"expect": {"imports": ["os; open('/tmp/pwned','w')"]}}, "expect.imports"),
    "constraints escape": ({"constraints": {"linux/amd64": "../../etc/passwd"}}, "constraints.linux/amd64"),
    "absolute constraints": ({"constraints": {"linux/amd64": "/etc/passwd"}}, "constraints.linux/amd64"),
    "unknown install mode": ({"engine": {"install": "curl-pipe-sh"}}, "engine.install"),
    "git tag with newline": ({"engine": {"source": {"tag": "v1\nRUN id"}}}, "engine.source.tag"),
    "expected version as code": ({"expect": {"versions": {"vllm": "$(id)"}}}, "expect.versions"),
    "expected dist name as path": ({"expect": {"versions": {"../x": "1.0"}}}, "expect.versions"),
    "cuda as code": ({"expect": {"cuda": "13.0; id"}}, "expect.cuda"),
    "arch with newline": ({"expect": {"archs": ["sm_90a\n"]}}, "expect.archs"),
    "description with escape": ({"description": "ok\x1b[2J"}, "description"),
    "base ref a:b:c": ({"bases": {"build": {"ref": "a:b:c"}}}, "bases.build.ref"),
    "base ref x//y": ({"bases": {"runtime": {"ref": "x//y"}}}, "bases.runtime.ref"),
    "base ref empty tag": ({"bases": {"runtime": {"ref": "a/b:"}}}, "bases.runtime.ref"),
    "version not PEP 440": ({"engine": {"version": "1!!"}}, "engine.version"),
    "profile named like a command": (
        {"launch": {"profiles": {"cat": {"module": "vllm.entrypoints.cli.main"}}}},
        "launch.profiles.cat",
    ),
    "variant description newline": (
        {"variants": {"v": {"description": "a\nb", "patches": []}}},
        "variants.v.description",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_field_is_one_placed_error(project, case):
    edits, field = CASES[case]
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edits)))
    with pytest.raises(RecipeError) as info:
        load_recipe("hostile", project)
    line = str(info.value)
    assert "\n" not in line and line.startswith("recipes/hostile.yaml") and field in line, line


def test_the_unedited_base_loads(project):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(BASE))
    assert load_recipe("hostile", project).recipe.engine.kind.name == "vllm"


def test_trailing_newline_commit_sha_in_a_patch_entry(project):
    edits = {"engine": {"source": {"patches": [{"id": "p", "pr": 1, "commit": "a" * 40 + "\n"}]}}}
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edits)))
    with pytest.raises(RecipeError, match="full 40-hex"):
        load_recipe("hostile", project)


def test_the_real_recipes_still_load_under_the_hostile_input_rules():
    for name in ("sglang-native-fp8", "vllm-dspark", "sglang-fused-fp4"):
        assert load_recipe(name, REPO_ROOT).recipe.name == name


@pytest.mark.parametrize(
    "text,message",
    [
        ("extends: /tmp/outside.yaml\n", "is not a recipe name"),
        ("extends: ../../x\n", "is not a recipe name"),
        ("? [a, b]\n: 1\n", "keys are plain names"),
        ({"launch": {"profiles": {"a": 5, "b": {"from": "a"}}}}, "inheriting .* needs mapping profiles"),
        ({"launch": {"profiles": {"a": {"module": "x"}, "b": {"from": ["a"]}}}}, "`from` names unknown profile"),
        (
            {"launch": {"profiles": {"a": {"module": "x", "extra_args": 5}, "b": {"from": "a"}}}},
            "needs mapping profiles with an `env` mapping",
        ),
        ({"bad\nkey": 1}, r"bad\\nkey: unknown field"),
    ],
)
def test_hostile_structure_is_one_line(project, text, message):
    if isinstance(text, dict):
        text = yaml.safe_dump(merge(BASE, text))
    (project / "recipes" / "hostile.yaml").write_text(text)
    with pytest.raises(RecipeError, match=message) as info:
        load_recipe("hostile", project)
    assert "\n" not in str(info.value)


def test_duplicate_keys_and_wheel_names_are_refused(project):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(BASE) + "python: '3.11'\n")
    with pytest.raises(RecipeError, match=r"python: key 'python' is given twice"):
        load_recipe("hostile", project)
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump({**BASE, "wheels": ["a/x.whl", "b/x.whl"]}))
    with pytest.raises(RecipeError, match="wheels: two wheels are named x.whl"):
        load_recipe("hostile", project)


@pytest.mark.parametrize(
    "edit,field",
    [
        ({"build": {"max_jobs": True}}, "build.max_jobs"),
        ({"expect": {"torchvision_pair": "yes"}}, "expect.torchvision_pair"),
        ({"python": "3.\u0661\u0662"}, "python"),
    ],
)
def test_loose_types_and_unicode_digits_are_refused(project, edit, field):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edit)))
    with pytest.raises(RecipeError, match=field):
        load_recipe("hostile", project)


def test_a_recipe_must_be_named_as_its_file(project, tmp_path):
    """A file elsewhere that borrows another recipe's name would share its build directory,
    default tag and verdicts (publish would take its image for the real recipe's)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "other.yaml").write_text(yaml.safe_dump({**BASE, "name": "torch-cu130"}))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(outside / "other.yaml"), project)
    line = str(info.value)
    assert "\n" not in line and "name" in line and "must be named 'other'" in line


def test_release_artifact_must_be_the_engine_version(tmp_path):
    """wheel-overlay relabels the installed dist-info from engine.version: 0.5.17 over the pinned
    0.5.16 wheel would publish a false version."""
    data = yaml.safe_load((REPO_ROOT / "recipes/sglang-native-fp8.yaml").read_text())
    data["engine"]["version"] = "0.5.17"
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "torch-cu130.yaml").write_text((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())
    (tmp_path / "recipes" / "sglang-native-fp8.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(tmp_path / "recipes" / "sglang-native-fp8.yaml"), REPO_ROOT)
    line = str(info.value)
    assert (
        "\n" not in line
        and "pins sglang==0.5.16, but engine.version is 0.5.17" in line
        and "engine.precompiled" in line
    )
