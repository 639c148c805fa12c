"""Error kinds: every error servebuild raises says what went wrong (input, host, integrity, refused), and
its one line keeps the problem and the hint apart."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from servebuild import errors
from servebuild.layers import in_image, module_name

PACKAGE = Path(__file__).resolve().parents[2] / "servebuild"
KINDS = (errors.InputError, errors.HostError, errors.IntegrityError, errors.Refused)


def error_classes() -> dict[str, type]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path, PACKAGE)
        if in_image(name) or name == "servebuild.layers":
            continue
        for attr, value in vars(importlib.import_module(name)).items():
            if inspect.isclass(value) and issubclass(value, errors.ServebuildError) and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def test_every_error_class_is_a_kind():
    classes = error_classes()
    assert len(classes) >= 15, classes  # the walk found the package's errors
    loose = [name for name, cls in classes.items() if cls is not errors.ServebuildError and not issubclass(cls, KINDS)]
    assert not loose, f"errors without a kind: {loose}"
    assert {cls.kind for cls in classes.values()} >= {"input", "host", "integrity", "refused"}


def test_the_hint_follows_the_problem_on_one_line():
    exc = errors.Refused(
        "lock has 1 unresolved entry,\n first: x",
        hint="run `invoke lock`\n again",
        file="recipes/a.lock.yaml",
        field="unresolved",
    )
    assert str(exc) == "recipes/a.lock.yaml: unresolved: lock has 1 unresolved entry, first: x; run `invoke lock` again"
    assert exc.problem.startswith("lock has") and exc.hint.startswith("run")


def test_a_moved_error_keeps_its_kind_and_hint():
    exc = errors.IntegrityError("stale", hint="lock again", file="a.yaml", field="files.x")
    moved = exc.moved("stale (and 2 more)", field="files")
    assert type(moved) is errors.IntegrityError and moved.hint == "lock again" and moved.file == "a.yaml"
    assert str(moved) == "a.yaml: files: stale (and 2 more); lock again"
