"""The lock read with exact types (issue 19, part 2): every field of RECIPE.lock.yaml has one type
(a bool is not an int, a str is not an int), an unknown lock_version is refused; each refusal is one
line naming the lock file and the field. Real files in tmp_path."""

from __future__ import annotations

import pytest
import yaml

from servebuild.errors import ServebuildError
from servebuild.lock import lockfile
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
        lockfile.load_lock_file(load_recipe("torch-cu130", project))
    line = str(info.value)
    assert "\n" not in line and "recipes/torch-cu130.lock.yaml" in line, line
    return line


def test_the_unedited_lock_loads(project):
    assert lockfile.load_lock_file(load_recipe("torch-cu130", project)).lock_version == 1


@pytest.mark.parametrize("value", [2, 0, "1", True, 1.0, None])
def test_a_lock_version_other_than_1_is_refused(project, value):
    line = lock_with(project, lambda d: d.update(lock_version=value))
    assert "lock_version" in line, line


@pytest.mark.parametrize(
    "field, value",
    [
        ("recipe_sha256", 1),
        ("recipe_sha256", "not-a-hash"),
        ("recipe", 5),
        ("recipe", "another-recipe"),
        ("unresolved", "one line"),
        ("files", {"constraints/torch-cu130/py3.12-linux-amd64.txt": 7}),
    ],
)
def test_top_level_lock_fields_have_exact_types(project, field, value):
    assert field in lock_with(project, lambda d: d.update({field: value}))


@pytest.fixture
def engine_project(tmp_path):
    root = tmp_path / "project"
    copy_real(
        root,
        "recipes/sglang-native-fp8.yaml",
        "recipes/sglang-native-fp8.lock.yaml",
        "recipes/torch-cu130.yaml",
        "constraints",
        "patches",
        "recordings",
    )
    return root


@pytest.mark.parametrize(
    "field, value",
    [
        ("python_only", "true"),
        ("python_only", 1),
        ("optional", "no"),
        ("pr", True),
        ("pr", "33276"),
        ("requires", "x"),
        ("files", "a.py"),
    ],
)
def test_patch_entry_fields_have_exact_types(engine_project, field, value):
    path = engine_project / "recipes" / "sglang-native-fp8.lock.yaml"
    data = yaml.safe_load(path.read_text())
    data["patches"][0][field] = value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ServebuildError) as info:
        lockfile.load_lock_file(load_recipe("sglang-native-fp8", engine_project))
    line = str(info.value)
    assert "\n" not in line and "sglang-native-fp8.lock.yaml" in line and f"patches.0.{field}" in line, line


# ------------------------------------------------------------------ issue 31, point 10: the lock's own checks


def edit_lock(project, name, edit) -> None:
    path = project / "recipes" / f"{name}.lock.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def test_a_lock_naming_a_file_the_recipe_does_not_name_is_refused(project):
    """Nothing the recipe does not name is read or hashed because a lock lists it."""
    (project / "README.md").write_text("not the recipe's\n")
    line = lock_with(project, lambda d: d["files"].update({"README.md": "0" * 64}))
    assert "'README.md' is not a file the recipe names" in line and "files" in line, line


@pytest.mark.parametrize("digest", ["A" * 64, "0" * 63, "sha256:" + "0" * 64, "0" * 64 + "\n"])
def test_a_lock_file_hash_that_is_not_a_sha256_is_refused(project, digest):
    def edit(d):
        name = next(iter(d["files"]))
        d["files"][name] = digest

    line = lock_with(project, edit)
    assert "is not a sha256 (64 lowercase hex digits)" in line and "files" in line, line


@pytest.mark.parametrize("field", ["unresolved", "files"])
def test_a_lock_with_an_empty_unresolved_or_files_loads(project, field):
    """`unresolved:` (or `files:`) with nothing after it is YAML null: an empty list (mapping), not an error."""
    edit_lock(project, "torch-cu130", lambda d: d.update({field: None}))
    lock = lockfile.load_lock_file(load_recipe("torch-cu130", project))
    assert getattr(lock, field) == ([] if field == "unresolved" else {})


def test_a_lock_with_unresolved_entries_is_refused_for_a_locked_build(project):
    from servebuild.errors import Refused

    loaded = load_recipe("torch-cu130", project)
    with pytest.raises(Refused, match="lock has 2 unresolved entries, first: bases.build") as info:
        lockfile.read_lock(loaded)
    assert info.value.field == "unresolved" and "\n" not in str(info.value)
    edit_lock(project, "torch-cu130", lambda d: d.update(unresolved=[]))
    assert lockfile.read_lock(loaded).unresolved == []


@pytest.mark.parametrize(
    "change, words, field",
    [
        ("recipe", "lock is stale: recipe torch-cu130 changed since it was locked", "recipe_sha256"),
        (
            "file",
            "lock is stale: constraints/torch-cu130/py3.12-linux-amd64.txt hashes to",
            "files.constraints/torch-cu130/py3.12-linux-amd64.txt",
        ),
        (
            "omitted",
            "lock is stale: it does not record constraints/torch-cu130/py3.12-linux-amd64.txt",
            "files.constraints/torch-cu130/py3.12-linux-amd64.txt",
        ),
    ],
)
def test_a_stale_lock_is_an_integrity_error_naming_what_changed(project, change, words, field):
    """A stale lock is bytes that are not what they claim (IntegrityError), not bad input or a refusal."""
    from servebuild.errors import IntegrityError

    rel = "constraints/torch-cu130/py3.12-linux-amd64.txt"
    if change == "recipe":
        recipe = project / "recipes" / "torch-cu130.yaml"
        data = yaml.safe_load(recipe.read_text())
        data["description"] = "changed after it was locked"
        recipe.write_text(yaml.safe_dump(data))
    elif change == "file":
        with (project / rel).open("a") as fh:
            fh.write("# edited\n")
    else:
        edit_lock(project, "torch-cu130", lambda d: d["files"].pop(rel))
    with pytest.raises(IntegrityError) as info:
        lockfile.current_lock(load_recipe("torch-cu130", project))
    assert type(info.value) is IntegrityError and words in str(info.value) and info.value.field == field, str(
        info.value
    )


def test_an_unresolved_lock_entry_leaves_the_recipes_own_pin(engine_project):
    """A plain build applies what the lock resolved; an entry it left unresolved (no commit, no diff hash)
    never overwrites the commit the recipe itself pins."""

    def unresolve(d):
        first = next(p for p in d["patches"] if p["id"] == "sglang-pr-33276")
        first.update(commit=None, sha256=None)

    edit_lock(engine_project, "sglang-native-fp8", unresolve)
    loaded = load_recipe("sglang-native-fp8", engine_project)
    pinned, lock = lockfile.pin_for_build(loaded)
    assert lock is not None and lock.patch("sglang-pr-33276").commit is None
    entry = next(e for e in pinned.recipe.engine.source.patches if e.id == "sglang-pr-33276")
    assert entry.commit == "ec741e4161b8c25b575a36f87b781c3d35ededc9"
