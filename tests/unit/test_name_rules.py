"""Name rules on every value that becomes a name (issue 19, part 2): a mirror map's values follow
the same length and character rules as its keys (an image reference is at most 255 characters).
Real files in tmp_path; each refusal is one line naming the file and field."""

from __future__ import annotations

import pytest
import yaml

from servebuild.errors import RecipeError
from servebuild.recipe.load import load_recipe
from support import copy_real


@pytest.fixture
def project(tmp_path):
    """A copy of the torch-cu130 recipe, its lock and the files it names."""
    root = tmp_path / "project"
    copy_real(root, "recipes/torch-cu130.yaml", "recipes/torch-cu130.lock.yaml", "constraints/torch-cu130")
    return root


# ------------------------------------------------------------------ values that become names


@pytest.mark.parametrize(
    "images",
    [
        {"nvidia/cuda:13.0.2-devel-ubuntu24.04": "registry.local/" + "a" * 5000},
        {"nvidia/cuda:13.0.2-devel-ubuntu24.04": "registry.local/" + "a/" * 200 + "b"},
        {"registry.local/" + "a" * 5000: "registry.local/cuda:13"},
    ],
)
def test_a_mirror_map_name_over_255_characters_is_refused(tmp_path, images):
    from servebuild.plan.config import load_mirror_map

    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump({"images": images}))
    with pytest.raises(RecipeError) as info:
        load_mirror_map(path)
    line = str(info.value)
    assert "\n" not in line and "map.yaml" in line and "255" in line and len(line) < 600, line


def test_image_mirrors_in_the_config_and_environment_follow_the_same_rule(tmp_path, monkeypatch):
    from servebuild.plan.config import load_config

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"image_mirrors": {"a/b:1": "r.local/" + "x" * 300}}))
    with pytest.raises(RecipeError, match="255"):
        load_config(path)
    path.write_text("{}\n")
    monkeypatch.setenv("SERVEBUILD_IMAGE_MIRRORS", "a/b:1=r.local/" + "x" * 300)
    with pytest.raises(RecipeError, match=r"\$SERVEBUILD_IMAGE_MIRRORS.*255"):
        load_config(path)


def test_a_git_mirror_value_is_bounded_like_its_key(tmp_path):
    from servebuild.plan.config import load_config

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"git_mirrors": {"https://github.com/a/b.git": "/srv/" + "x" * 5000}}))
    with pytest.raises(RecipeError) as info:
        load_config(path)
    assert "git_mirrors" in str(info.value) and len(str(info.value)) < 600


@pytest.mark.parametrize("rel", ["constraints/" + "a" * 5000 + ".txt", "constraints/" + "a/" * 1000 + "x.txt"])
def test_a_named_file_path_too_long_for_the_file_system_is_one_line(project, rel):
    """A map value that becomes a path (constraints, precompiled) hit ENAMETOOLONG: a traceback."""
    path = project / "recipes" / "torch-cu130.yaml"
    data = yaml.safe_load(path.read_text())
    data["constraints"] = {platform: rel for platform in data["constraints"]}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError) as info:
        load_recipe("torch-cu130", project)
    line = str(info.value)
    assert "\n" not in line and "constraints." in line and "at most 1024" in line and len(line) < 600, line


def test_a_recipe_base_ref_over_255_characters_is_refused(project):
    path = project / "recipes" / "torch-cu130.yaml"
    data = yaml.safe_load(path.read_text())
    data["bases"]["build"]["ref"] = "registry.local/" + "a" * 300
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match="bases.build.ref"):
        load_recipe("torch-cu130", project)
