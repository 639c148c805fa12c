"""The typed lock: the committed locks read into `Lock` and write back to the same bytes; shapes it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from servebuild.lock.lockfile import Lock
from servebuild.recipe.load import load_recipe
from unit.minimal_recipe import BASE, merge

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCKS = sorted((REPO_ROOT / "recipes").glob("*.lock.yaml"))


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name)
def test_a_committed_lock_round_trips_byte_for_byte(path):
    text = path.read_text()
    lock = Lock.model_validate(yaml.safe_load(text))
    assert lock.yaml_text() == text
    assert lock.recipe == path.name.removesuffix(".lock.yaml")


def test_every_recipe_with_an_engine_has_a_typed_stack():
    engines = [Lock.model_validate(yaml.safe_load(p.read_text())) for p in LOCKS]
    with_stack = [lock for lock in engines if lock.source is not None]
    assert len(with_stack) >= 6 and all(lock.patches for lock in with_stack)
    assert all(len(p.sha256) == 64 for lock in with_stack for p in lock.patches if p.file)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda d: d.update(surprise=1), "extra"),
        (lambda d: d["bases"]["build"].update(resolved="yes"), "bool"),
        (lambda d: d["patches"][0].update(pr="33276"), "int"),
        (lambda d: d["patches"][0].pop("sha256"), "missing"),
        (lambda d: d.update(files=[1, 2]), "dict"),
    ],
)
def test_a_lock_of_the_wrong_shape_is_refused(edit, words):
    data = yaml.safe_load((REPO_ROOT / "recipes" / "sglang-native-fp8.lock.yaml").read_text())
    edit(data)
    with pytest.raises(ValidationError) as info:
        Lock.model_validate(data)
    assert words in info.value.errors()[0]["type"]


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name)
def test_a_stored_reason_is_a_fact_not_advice(path):
    """What the lock's host could not resolve is history; what to do about it is the reader's hint, given
    when the lock is used (a stored 'build with --offline' contradicted `build --locked`'s own advice)."""
    lock = Lock.model_validate(yaml.safe_load(path.read_text()))
    for reason in lock.unresolved:
        assert "run `invoke" not in reason and "build with" not in reason and "git_mirrors" not in reason, reason


def test_the_locked_refusal_gives_one_piece_of_advice():
    import subprocess
    import sys

    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "invoke"),
            "build",
            "--locked",
            "--dry-run",
            "--recipe",
            "vllm-dspark-bookworm",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in line, proc.stderr
    assert line.count("run `invoke") == 1 and "--offline" not in line, line


def test_committed_locks_survive_schema_growth(monkeypatch):
    """A lock hashes the recipe files as written: loading the committed recipes through a schema
    with one more defaulted field (a subclass swapped in where loading validates) leaves every
    committed lock current, as the build's own lock check sees it."""
    from pydantic import Field

    from servebuild.recipe import load as recipe_load
    from servebuild.lock.lockfile import pin_for_build
    from servebuild.recipe.schema import Recipe

    class GrownRecipe(Recipe):
        new_knob: int = Field(default=7)

    before = {name: load_recipe(name, REPO_ROOT).sha256 for name in REAL_LOCKED}
    monkeypatch.setattr(recipe_load, "Recipe", GrownRecipe)
    for name in REAL_LOCKED:
        loaded = load_recipe(name, REPO_ROOT)
        assert isinstance(loaded.recipe, GrownRecipe) and loaded.recipe.new_knob == 7
        assert loaded.sha256 == before[name]
        _, lock = pin_for_build(loaded)
        assert lock is not None, f"{name}: the committed lock went stale with the grown schema"
        assert lock.recipe_sha256 == loaded.sha256


REAL_LOCKED = sorted(p.name.removesuffix(".lock.yaml") for p in (REPO_ROOT / "recipes").glob("*.lock.yaml"))


LOCK_BASE = {
    "lock_version": 1,
    "recipe": "hostile",
    "files": {},
    "unresolved": [],
    "source": None,
    "bases": {"build": {"ref": "x", "digest": None}, "runtime": {"ref": "y", "digest": None}},
}


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            {"bases": {"build": {"digest": "sha256:" + "a" * 64 + "\nRUN touch /pwned"}, "runtime": {}}},
            "lock value refused",
        ),
        ({"bases": 5}, "bases: malformed lock"),
        ({"files": {"/etc/hostname": "x"}}, "files: malformed lock"),
        ({"files": {"/dev/zero": "x"}}, "files: malformed lock"),
        ({"unresolved": 5}, "unresolved: malformed lock"),
        ({"patches": [1]}, r"patches\.0: malformed lock: must be a mapping"),
        ("- a list", r"\(top level\): malformed lock"),
    ],
)
def test_hostile_lock_is_one_line_and_reaches_no_dockerfile(project, edit, message):
    from servebuild.errors import ServebuildError
    from servebuild.plan.make import BuildOptions, make_plan

    path = project / "recipes" / "hostile.yaml"
    path.write_text(yaml.safe_dump({**BASE, "engine": None}))
    loaded = load_recipe("hostile", project)
    from servebuild.lock.lockfile import file_hashes  # a lock records every file the recipe names (else it is stale)

    current = {**LOCK_BASE, "recipe_sha256": loaded.sha256, "files": file_hashes(loaded)}
    lock = yaml.safe_dump(merge(current, edit)) if isinstance(edit, dict) else edit
    (project / "recipes" / "hostile.lock.yaml").write_text(lock)
    for locked in (False, True):
        with pytest.raises(ServebuildError, match=message) as info:
            make_plan(project, "hostile", BuildOptions(platform="linux/amd64", locked=locked, dry_run=True))
        assert "\n" not in str(info.value)
