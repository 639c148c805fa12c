"""The lock read with exact types (issue 19, part 2): every field of RECIPE.lock.yaml has one type
(a bool is not an int, a str is not an int), an unknown lock_version is refused; each refusal is one
line naming the lock file and the field. Real files in tmp_path."""

from __future__ import annotations

import pytest
import yaml

from servebuild.errors import ServebuildError
from servebuild.lock import lockfile as locking
from servebuild.recipe.load import load_recipe
from support import copy_real


@pytest.fixture
def project(tmp_path):
    """A copy of the torch-cu130 recipe, its lock and the files it names."""
    root = tmp_path / "project"
    copy_real(root, "recipes/torch-cu130.yaml", "recipes/torch-cu130.lock.yaml", "constraints/torch-cu130")
    return root


def lock_with(project, edit) -> str:
    path = project / "recipes" / "torch-cu130.lock.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ServebuildError) as info:
        locking.load_lock_file(load_recipe("torch-cu130", project))
    line = str(info.value)
    assert "\n" not in line and "recipes/torch-cu130.lock.yaml" in line, line
    return line


def test_the_unedited_lock_loads(project):
    assert locking.load_lock_file(load_recipe("torch-cu130", project)).lock_version == 1


@pytest.mark.parametrize("value", [2, 0, "1", True, 1.0, None])
def test_a_lock_version_other_than_1_is_refused(project, value):
    line = lock_with(project, lambda d: d.update(lock_version=value))
    assert "lock_version" in line, line


@pytest.mark.parametrize("field, value", [
    ("recipe_sha256", 1), ("recipe_sha256", "not-a-hash"), ("recipe", 5), ("recipe", "another-recipe"),
    ("unresolved", "one line"), ("files", {"constraints/torch-cu130/py3.12-linux-amd64.txt": 7}),
])
def test_top_level_lock_fields_have_exact_types(project, field, value):
    assert field in lock_with(project, lambda d: d.update({field: value}))


@pytest.fixture
def engine_project(tmp_path):
    root = tmp_path / "project"
    copy_real(root, "recipes/sglang-native-fp8.yaml", "recipes/sglang-native-fp8.lock.yaml", "recipes/torch-cu130.yaml",
              "constraints", "patches", "recordings")
    return root


@pytest.mark.parametrize("field, value", [("python_only", "true"), ("python_only", 1), ("optional", "no"),
                                          ("pr", True), ("pr", "33276"), ("requires", "x"), ("files", "a.py")])
def test_patch_entry_fields_have_exact_types(engine_project, field, value):
    path = engine_project / "recipes" / "sglang-native-fp8.lock.yaml"
    data = yaml.safe_load(path.read_text())
    data["patches"][0][field] = value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ServebuildError) as info:
        locking.load_lock_file(load_recipe("sglang-native-fp8", engine_project))
    line = str(info.value)
    assert "\n" not in line and "sglang-native-fp8.lock.yaml" in line and f"patches.0.{field}" in line, line
