"""An install mode defined here, in the test, and registered through the one registration call:
it renders, builds on the real engine and records its manifest inputs. No servebuild module is
edited to add it (the issue's measure of "a mode is one object")."""

from __future__ import annotations

import json
import subprocess

import pytest

from integration.conftest import build_fixture
from servebuild.modes import MODES, Fragment, InstallMode, register_mode
from support import fixture_recipe, make_project


class CopyTree(InstallMode):
    """Put the patched tree on sys.path as it is, with a marker file from the project."""

    name = "copy-tree"
    required_fields = ()

    def context_files(self, engine, platform):
        return {"copy-tree-marker.txt": "constraints/marker.txt"}

    def fragment(self, engine, platform):
        return Fragment(
            "COPY copy-tree-marker.txt /opt/engine/marker.txt\n"
            "RUN --mount=type=bind,source=source.tar,target=/mnt/source.tar tar -xf /mnt/source.tar -C /tmp \\\n"
            " && cp -a /tmp/src/{{ engine.source.subdir }}/. /opt/engine/site/\n"
        )


@pytest.fixture
def copy_tree_mode():
    register_mode(CopyTree())
    yield MODES["copy-tree"]
    MODES.pop("copy-tree")


def test_mode_defined_in_a_test_renders_builds_and_records_inputs(
    engine, base_images, upstream, tmp_path, copy_tree_mode
):
    recipe = fixture_recipe(upstream)
    recipe["engine"]["install"] = "copy-tree"
    root = make_project(tmp_path, upstream, recipe)
    (root / "constraints" / "marker.txt").write_text("copied by the copy-tree mode\n")
    result, _ = build_fixture(root, engine, "linux/amd64", "servebuild-test/copy-tree:amd64", tmp_path / "cache")
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest["engine"]["install"] == "copy-tree"
    recorded = manifest["engine"]["context_files"]["copy-tree-marker.txt"]
    assert recorded["path"] == "constraints/marker.txt" and len(recorded["sha256"]) == 64
    run = subprocess.run(
        [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "sh",
            result.tag,
            "-c",
            "cat /opt/engine/marker.txt && python -c 'import toyserve'",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and "copied by the copy-tree mode" in run.stdout, run.stderr


class AddToTmp(CopyTree):
    """The idiom of the modes before each step's /tmp became a tmpfs: ADD into /tmp, read it in the next RUN."""

    name = "add-to-tmp"

    def fragment(self, engine, platform):
        return Fragment(
            "ADD source.tar /tmp/\n"
            "RUN cp -a /tmp/src/{{ engine.source.subdir }}/. /opt/engine/site/ && rm -rf /tmp/src\n"
        )


def test_a_mode_that_adds_into_tmp_is_refused_at_render_in_one_line(upstream, tmp_path):
    """Every step's /tmp is a tmpfs, so the next RUN would see nothing: refused before any build, naming
    the mode and what to write instead."""
    from servebuild.errors import InputError
    from servebuild.plan import make
    from servebuild.render.context import render_dockerfile

    register_mode(AddToTmp())
    try:
        recipe = fixture_recipe(upstream)
        recipe["engine"]["install"] = "add-to-tmp"
        root = make_project(tmp_path, upstream, recipe)
        plan = make.make_plan(root, "toy", make.BuildOptions(platform="linux/amd64", dry_run=True, fetching=False))
        with pytest.raises(InputError) as err:
            render_dockerfile(
                plan.loaded.recipe, plan.loaded.sha256, "linux/amd64", {"build": "b", "runtime": "r"}, root
            )
    finally:
        MODES.pop("add-to-tmp")
    message = str(err.value)
    assert "\n" not in message and "engine.install (add-to-tmp)" in message, message
    assert "'ADD source.tar /tmp/' writes into /tmp" in message and "--mount=type=bind,source=source.tar" in message


def test_unknown_mode_is_a_field_error(upstream, tmp_path):
    from servebuild.errors import RecipeError
    from servebuild.recipe.load import load_recipe

    recipe = fixture_recipe(upstream)
    recipe["engine"]["install"] = "copy-tree"  # not registered here
    root = make_project(tmp_path, upstream, recipe)
    with pytest.raises(RecipeError, match=r"engine.install: unknown install mode 'copy-tree'; known: pip-source"):
        load_recipe("toy", root)
