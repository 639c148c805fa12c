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


@pytest.mark.parametrize(
    "name, doc", [("architecture", "docs/architecture.md"), ("recipe_reference", "docs/recipe-reference.md")]
)
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


# what a guide asks the reader to create (the engine kind: tensorrtllm, or trtllm)
EXAMPLES = ("NAME", "trtllm", "tensorrtllm", "wheel-rebuild", "wheel_rebuild", "<kind>")


@pytest.mark.parametrize(
    "doc", ["docs/architecture.md", "docs/extending.md", "docs/recipe-reference.md", "docs/input-validation.md"]
)
def test_every_path_a_doc_names_exists(doc):
    """A path in backquotes (`servebuild/render/context.py`, `images/stages/runtime.j2`,
    `build/docker.DockerClient`) names a file or folder of the checkout, from the root, servebuild/ or
    one of its packages; the examples a guide asks the reader to create are left out."""
    import re

    text = (REPO_ROOT / doc).read_text()
    bases = [REPO_ROOT, REPO_ROOT / "servebuild", REPO_ROOT / "servebuild" / "render", REPO_ROOT / "images"]
    bases += [p for p in (REPO_ROOT / "servebuild").iterdir() if p.is_dir()]
    missing = []
    for token in sorted(set(re.findall(r"`([A-Za-z0-9_.<>-]+/[A-Za-z0-9_./<>-]*)`", text))):
        if any(e in token for e in EXAMPLES) or token.startswith(("linux/", "python/", "src/")):
            continue
        candidates = {token, re.sub(r"\.[A-Za-z_]+$", ".py", token)}  # module.Name -> module.py
        if not any((base / c).exists() for base in bases for c in candidates):
            missing.append(token)
    assert not missing, f"{doc} names paths that do not exist: {missing}"
