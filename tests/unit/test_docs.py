"""Generated docs match what they are generated from: docs/architecture.md (the package docstrings and
servebuild.layers) and docs/recipe-reference.md (the recipe schema)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, doc", [("architecture", "docs/architecture.md"),
                                       ("recipe_reference", "docs/recipe-reference.md")])
def test_a_generated_doc_is_current(name, doc):
    assert (REPO_ROOT / doc).read_text() == script(name).render(), f"run: python scripts/{name}.py"


def test_every_package_says_what_goes_in_and_out():
    for init in sorted((REPO_ROOT / "servebuild").glob("*/__init__.py")):
        text = init.read_text()
        if init.parent.name in ("modes", "engines", "tools"):
            continue  # the extension points and the in-image scripts say what they are instead
        assert all(f"\n{word}:" in text for word in ("In", "Out", "Reads")), init


def test_the_reference_names_every_recipe_field():
    from servebuild.recipe.schema import Recipe
    text = (REPO_ROOT / "docs" / "recipe-reference.md").read_text()
    assert all(f"| `{name}` |" in text for name in Recipe.model_fields)


def test_the_readme_links_the_generated_docs():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "docs/architecture.md" in readme and "docs/recipe-reference.md" in readme
