"""Render a resolved recipe into a build context: Dockerfile, requirement sets, source, launchers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

import jinja2

from .launch import launcher_script
from .recipe import LoadedRecipe, Recipe
from .sources import TAR_MTIME

TEMPLATES = Path(__file__).resolve().parent.parent / "images"
BUILD_APT = ["python3", "python3-venv"]
RUNTIME_APT = ["python3"]


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=True, lstrip_blocks=True, autoescape=False)


def render_dockerfile(recipe: Recipe, recipe_sha256: str, platform: str, bases: dict[str, str]) -> str:
    """Pure function of its inputs: the same recipe, platform and bases give the same bytes."""
    text = _environment().get_template("Dockerfile.j2").render(
        recipe=recipe, recipe_sha256=recipe_sha256, platform=platform, bases=bases,
        engine=recipe.engine, profiles=sorted(recipe.launch.profiles),
        build_apt=sorted(set(BUILD_APT + recipe.apt.build)),
        runtime_apt=sorted(set(RUNTIME_APT + recipe.apt.runtime)))
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:  # collapse blank runs left by template control blocks
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip() + "\n"


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_context(loaded: LoadedRecipe, platform: str, bases: dict[str, str], context: Path,
                  manifest_inputs: dict, source_tarball: Optional[Path]) -> Path:
    """Write a fresh build context directory and return it."""
    recipe = loaded.recipe
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(render_dockerfile(recipe, loaded.sha256, platform, bases))
    shutil.copyfile(loaded.root / recipe.constraints[platform], context / "requirements.txt")
    if recipe.wheels:
        (context / "wheels").mkdir()
        for rel in recipe.wheels:
            shutil.copyfile(loaded.root / rel, context / "wheels" / Path(rel).name)
    if recipe.engine and recipe.engine.install != "pip-source":
        shutil.copyfile(loaded.root / recipe.engine.precompiled[platform], context / "precompiled.txt")
    if recipe.engine:
        assert source_tarball is not None, "an engine recipe needs its source tarball"
        shutil.copyfile(source_tarball, context / "source.tar")
    if recipe.launch.profiles:
        launchers = context / "launchers"
        launchers.mkdir()
        for name, profile in sorted(recipe.launch.profiles.items()):
            script = launchers / name
            script.write_text(launcher_script(name, profile))
            script.chmod(0o755)
    write_json(context / "manifest.json", manifest_inputs)
    for path in sorted(context.rglob("*")):  # fixed mtimes: COPY layers are the same bytes every build
        os.utime(path, (TAR_MTIME, TAR_MTIME), follow_symlinks=False)
    return context
