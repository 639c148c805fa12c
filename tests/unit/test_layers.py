"""The layering rule of servebuild.layers, on the real tree and on copies of it with one bad import."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servebuild import layers
from servebuild.engines import KINDS
from servebuild.modes.base import RELABEL_TOOL
from servebuild.render import context, payload

PACKAGE = Path(__file__).resolve().parents[2] / "servebuild"


def test_the_tree_keeps_the_order():
    assert layers.problems(PACKAGE) == []


def test_every_top_level_entry_has_a_place():
    """A new module or package must be placed in LAYERS (or be code that runs inside images)."""
    names = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    unplaced = names - set(layers.RANK) - {"tools"}
    assert not unplaced, f"not in servebuild.layers.LAYERS: {sorted(unplaced)}"


def test_the_in_image_rule_holds_exactly_the_modules_the_payload_table_puts_in_images():
    """render/payload.py lists what goes into an image; the modules layers.in_image holds to the in-image
    rules (the standard library, the image's packages, nothing of servebuild) are those, plus the install
    modes' tools (the engine stage's relabelling): a new in-image file outside the rule fails here."""
    sources = payload.in_image_sources(KINDS.values()) | {Path(p) for p in RELABEL_TOOL.values()}
    carried = {layers.module_name(p, PACKAGE) for p in sources}
    ruled = {
        layers.module_name(p, PACKAGE)
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and layers.in_image(layers.module_name(p, PACKAGE))
    }
    assert carried == ruled, (sorted(carried - ruled), sorted(ruled - carried))
    assert "servebuild.tools.servebuild_cache" in carried and "servebuild.engines.sglang.argcheck" in carried


def copy_with(tmp_path: Path, module: str, text: str, at_top: bool = True) -> Path:
    tree = tmp_path / "servebuild"
    shutil.copytree(PACKAGE, tree, ignore=shutil.ignore_patterns("__pycache__"))
    path = tree / module
    body = path.read_text()
    if at_top:  # after `from __future__ ...`, else before the first import
        lines = body.splitlines(keepends=True)
        first = next((i for i, line in enumerate(lines) if line.startswith(("import ", "from "))), len(lines))
        first += first < len(lines) and lines[first].startswith("from __future__")
        path.write_text("".join(lines[:first] + [text + "\n"] + lines[first:]))
    else:
        path.write_text(body + "\n\ndef _late():\n    " + text + "\n")
    return tree


@pytest.mark.parametrize(
    "module, line, expect",
    [
        (
            "recipe/schema.py",
            "from servebuild.release.publish import publish",
            "servebuild.recipe.schema (line 4) imports servebuild.release.publish.publish: release is above recipe",
        ),
        (
            "lock/lockfile.py",
            "from servebuild.release import registry",
            "imports servebuild.release.registry: release is above lock",
        ),
        ("errors.py", "import servebuild.build.docker", "imports servebuild.build.docker: build is above errors"),
        ("modes/base.py", "from servebuild.engines import kind_for", "modes and engines are siblings"),
        ("sources/stack.py", "from servebuild.plan.make import make_plan", "plan is above sources"),
        (
            "tools/profile_check.py",
            "from servebuild.errors import ServebuildError",
            "code that runs inside an image imports nothing from servebuild",
        ),
        ("tools/profile_check.py", "import yaml", "tools/ runs inside images and imports only the standard library"),
        (
            "engines/vllm/argcheck.py",
            "from servebuild.engines import kind_for",
            "inside an image imports nothing from servebuild",
        ),
        ("plan/make.py", "import servebuild", "`import servebuild` reaches every package"),
    ],
)
def test_an_upward_import_is_caught(tmp_path, module, line, expect):
    found = layers.problems(copy_with(tmp_path, module, line))
    assert len(found) == 1 and expect in found[0], found


def test_a_relative_upward_import_is_caught(tmp_path):
    found = layers.problems(copy_with(tmp_path, "sources/stack.py", "from ..check import smoke"))
    assert len(found) == 1 and "imports servebuild.check.smoke: check is above sources" in found[0], found


def test_a_new_engine_kinds_hook_runs_inside_images(tmp_path):
    """Not a hand-kept list: any engines/<kind>/argcheck.py is in-image code."""
    tree = copy_with(tmp_path, "errors.py", "import json")
    probe = tree / "engines" / "layers_probe_kind"  # a name no reader picks for a real kind (the guide's is free)
    probe.mkdir()
    (probe / "__init__.py").write_text("")
    (probe / "argcheck.py").write_text("import tensorrt_llm\nfrom servebuild.errors import X\n")
    found = layers.problems(tree)
    assert len(found) == 1 and "engines.layers_probe_kind.argcheck" in found[0] and "inside an image" in found[0], found


def test_an_import_inside_a_function_is_caught(tmp_path):
    found = layers.problems(copy_with(tmp_path, "build/run.py", "from servebuild.lock import compute", at_top=False))
    assert len(found) == 1 and "servebuild.build.run" in found[0] and "inside a function" in found[0], found
    # even a downward one, and a standard-library one: the reader of the module's head sees every dependency
    found = layers.problems(copy_with(tmp_path / "b", "plan/make.py", "import json", at_top=False))
    assert len(found) == 1 and "imports json inside a function" in found[0], found


def test_an_optional_heavy_library_may_load_late(tmp_path):
    assert layers.problems(copy_with(tmp_path, "release/verify.py", "import cryptography", at_top=False)) == []


def test_a_module_without_a_place_is_named(tmp_path):
    tree = copy_with(tmp_path, "plan/make.py", "from servebuild.newthing import x")
    (tree / "newthing.py").write_text("x = 1\n")
    found = layers.problems(tree)
    assert found and "newthing has no place in servebuild.layers.LAYERS" in found[0], found


def test_no_import_cycle_inside_a_package():
    graph: dict[str, set[str]] = {}
    found = layers.imports(PACKAGE)
    modules = {imp.module for imp in found}
    for imp in found:
        if not imp.nested and imp.target.startswith("servebuild."):
            target = imp.target if imp.target in modules else imp.target.rpartition(".")[0]
            graph.setdefault(imp.module, set()).add(target)
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            assert state.get(dep) != 1, f"import cycle: {' -> '.join(stack + [dep])}"
            if dep in graph and not state.get(dep):
                visit(dep, stack + [dep])
        state[node] = 2

    for module in sorted(graph):
        if not state.get(module):
            visit(module, [module])
    assert len(graph) > 40  # the walk saw the package, not an empty tree


def test_the_image_definitions_live_in_images_at_the_top():
    """The project's layout: the Dockerfile templates are in images/ beside recipes/ and patches/, and the
    renderer reads them there; inside servebuild only an install mode's fragment sits beside its module."""
    root = PACKAGE.parent
    assert context.TEMPLATES == root / "images"
    assert {p.relative_to(root / "images").as_posix() for p in (root / "images").rglob("*.j2")} >= {
        "Dockerfile.j2",
        "stages/build.j2",
        "stages/engine.j2",
        "stages/runtime.j2",
        "macros/pip.j2",
    }
    stray = [p.relative_to(root).as_posix() for p in PACKAGE.rglob("*.j2") if p.parent.name != "modes"]
    assert stray == [], f"templates outside images/ and modes/: {stray}"
