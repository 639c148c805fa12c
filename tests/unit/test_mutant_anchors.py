"""scripts/mutants.py's mutants can still be made: each one's text occurs exactly once in its file. A mutant
whose text a reformat or a refactor moved is reported STALE and not counted, so the promise it guards goes
unchecked without a failure (nine were found so on 2026-12-07, after a ruff format and two refactors). The mutation
run itself is minutes; this check of its table is a second."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from support import REPO_ROOT


def load_mutants():
    spec = importlib.util.spec_from_file_location("servebuild_mutants_table", REPO_ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("servebuild_mutants_table", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


TABLE = load_mutants()
MUTANTS = TABLE.MUTANTS


def test_the_table_is_there_and_ids_are_unique():
    assert len(MUTANTS) > 100
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_each_mutant_can_be_made(mutant):
    text = (REPO_ROOT / mutant.file).read_text()
    assert TABLE.can_be_made(mutant, text), (
        f"{mutant.id}: {mutant.old!r} occurs {text.count(mutant.old)} times in {mutant.file}"
    )
    assert mutant.new != mutant.old and mutant.tests, mutant.id
