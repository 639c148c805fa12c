"""Launch profiles parsed by the engine's own argument parser inside an image that is already built.

A build runs the same check in its profile-check stage (images/stages/runtime.j2); this runs it for
a recipe against another image of the same engine: the derived recipes (sglang-fused-fp4,
sglang-hgx-h200) against the SGLang image CI builds, or a profile edit before rebuilding. The
launchers are written exactly as a build writes them and run in a throwaway container without
network; tools/profile_check.py stops each right after the engine's parser has answered.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from servebuild.build.docker import DockerClient
from servebuild.errors import RecipeError, SmokeError
from servebuild.recipe.load import LoadedRecipe
from servebuild.render.launchers import argcheck_argv, write_launchers
from servebuild.render.payload import argcheck_files

MOUNT = "/opt/servebuild/argcheck-run"


def check_in_image(docker: DockerClient, image: str, loaded: LoadedRecipe) -> dict:
    """The record tools/profile_check.py writes ({engine, version, profiles}); a rejected profile is
    a RecipeError with the engine's own message."""
    recipe = loaded.recipe
    kind = recipe.engine.kind if recipe.engine else None
    if kind is None or kind.argcheck is None:
        raise RecipeError(
            f"recipe {recipe.name} has no engine whose parser servebuild can run", file=loaded.file, field="engine.name"
        )
    if not recipe.launch.profiles:
        raise RecipeError(f"recipe {recipe.name} has no launch profiles", file=loaded.file, field="launch.profiles")
    if docker.image_id(image) is None:
        raise SmokeError(f"image {image} is not in the engine; build it first (invoke build)", field="--image")
    with tempfile.TemporaryDirectory(prefix="servebuild-argcheck-") as tmp:
        work = Path(tmp)
        for name, src in argcheck_files(kind).items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, work / name)
        write_launchers(recipe, work / "launchers")
        (work / "out").mkdir()
        work.chmod(0o755)
        (work / "out").chmod(0o777)
        python, *command = argcheck_argv(recipe, MOUNT, f"{MOUNT}/launchers", f"{MOUNT}/out/record.json")
        proc = docker.run(
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            python,
            "-v",
            f"{work}:{MOUNT}",
            image,
            *command,
            check=False,
        )
        ours = [
            line.removeprefix("servebuild: ") for line in proc.stdout.splitlines() if line.startswith("servebuild: ")
        ]
        if ours:
            raise RecipeError(ours[0], file=loaded.file, field="launch.profiles")
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise SmokeError(f"the profile check could not run in {image}: {detail[:300]}", field="--image")
        return json.loads((work / "out" / "record.json").read_text())
