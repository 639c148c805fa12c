"""The typed lock: the committed locks read into `Lock` and write back to the same bytes; shapes it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from servebuild.lock.lockfile import Lock

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


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(surprise=1), "extra"),
    (lambda d: d["bases"]["build"].update(resolved="yes"), "bool"),
    (lambda d: d["patches"][0].update(pr="33276"), "int"),
    (lambda d: d["patches"][0].pop("sha256"), "missing"),
    (lambda d: d.update(files=[1, 2]), "dict"),
])
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
    proc = subprocess.run([str(Path(sys.executable).parent / "invoke"), "build", "--locked", "--dry-run", "--recipe",
                           "vllm-dspark-bookworm"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    line = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in line, proc.stderr
    assert line.count("run `invoke") == 1 and "--offline" not in line, line
