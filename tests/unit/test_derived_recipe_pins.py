"""A test recipe derived from an engine recipe in a temp folder (the engine-image tests' bad-value and
bad-aot) gets its parent's Debian pins only when support.copy_recipe_chain has put the parent's committed
lock beside it; written without it, its apt steps resolve unpinned and the whole venv is built again
(9 GB and minutes per build: the CI disk failure of 2026-12-06)."""

from __future__ import annotations

import pytest

from servebuild.lock.lockfile import debian_pins
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT, copy_recipe_chain


@pytest.mark.parametrize("base", ["sglang-native-fp8-bookworm", "vllm-dspark-bookworm"])
def test_a_derived_recipe_borrows_the_pins_only_with_the_parents_lock(tmp_path, base):
    parent = load_recipe(base, REPO_ROOT)
    bare, locked = tmp_path / "bare", tmp_path / "locked"
    bare.mkdir()
    locked.mkdir()
    for rf in parent.chain:  # the recipes alone, as the tests once copied them
        (bare / rf.path.name).write_text(rf.path.read_text())
    copy_recipe_chain(parent.chain, locked)
    for folder in (bare, locked):
        (folder / "derived.yaml").write_text(f"name: derived\nextends: {base}\n")
    want = debian_pins(parent, "linux/amd64")[0]
    assert want is not None
    assert debian_pins(load_recipe(str(bare / "derived.yaml"), REPO_ROOT), "linux/amd64")[0] is None
    got, pinned_by = debian_pins(load_recipe(str(locked / "derived.yaml"), REPO_ROOT), "linux/amd64")
    assert got == want and pinned_by.endswith(f"{base}.lock.yaml"), pinned_by
