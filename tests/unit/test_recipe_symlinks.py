"""Recipes that are symlinks out of the project are refused (issue 19, part 2); symlinks inside it
stay allowed. Real files and links in tmp_path."""

from __future__ import annotations

import shutil

import pytest

from servebuild.errors import InputError
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT, copy_real


@pytest.fixture
def project(tmp_path):
    """A copy of the torch-cu130 recipe, its lock and the files it names."""
    root = tmp_path / "project"
    copy_real(root, "recipes/torch-cu130.yaml", "recipes/torch-cu130.lock.yaml", "constraints/torch-cu130")
    return root


# ------------------------------------------------------------------ recipes symlinked out of the project


def test_a_recipe_symlinked_outside_the_project_is_refused(project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(project / "recipes" / "torch-cu130.yaml", outside / "torch-cu130.yaml")
    (project / "recipes" / "torch-cu130.yaml").symlink_to(outside / "torch-cu130.yaml")
    with pytest.raises(InputError) as info:
        load_recipe("torch-cu130", project)
    line = str(info.value)
    assert "\n" not in line and "recipes/torch-cu130.yaml" in line and "outside the project" in line, line


def test_a_parent_recipe_symlinked_outside_the_project_is_refused(tmp_path):
    root = tmp_path / "project"
    copy_real(root, "recipes/sglang-native-fp8.yaml", "constraints", "patches", "recordings")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(REPO_ROOT / "recipes" / "torch-cu130.yaml", outside / "torch-cu130.yaml")
    (root / "recipes" / "torch-cu130.yaml").symlink_to(outside / "torch-cu130.yaml")
    with pytest.raises(InputError, match="outside the project"):
        load_recipe("sglang-native-fp8", root)


def test_a_recipe_symlinked_inside_the_project_is_allowed(project):
    (project / "shared").mkdir()
    shutil.move(project / "recipes" / "torch-cu130.yaml", project / "shared" / "torch-cu130.yaml")
    (project / "recipes" / "torch-cu130.yaml").symlink_to(project / "shared" / "torch-cu130.yaml")
    assert load_recipe("torch-cu130", project).recipe.name == "torch-cu130"


def test_a_lock_symlinked_outside_the_project_is_refused(project, tmp_path):
    from servebuild.lock import lockfile

    outside = tmp_path / "outside"
    outside.mkdir()
    lock = project / "recipes" / "torch-cu130.lock.yaml"
    shutil.move(lock, outside / lock.name)
    lock.symlink_to(outside / lock.name)
    with pytest.raises(InputError) as info:
        lockfile.load_lock_file(load_recipe("torch-cu130", project))
    assert "recipes/torch-cu130.lock.yaml" in str(info.value) and "outside the project" in str(info.value)
