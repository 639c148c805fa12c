"""A minimal recipe to break one field at a time: a vLLM pip-source engine over the torch-cu130 amd64
set, named `hostile`. BASE is the recipe, `merge` edits it, `load_with` writes an edited copy into a
project (the `project` fixture of tests/unit/conftest.py) and loads it."""

from __future__ import annotations

from pathlib import Path

import yaml

from servebuild.recipe.load import load_recipe

BASE = {
    "name": "hostile",
    "description": "d",
    "platforms": ["linux/amd64"],
    "python": "3.12",
    "bases": {
        "build": {"ref": "servebuild/debian:bookworm-{arch}"},
        "runtime": {"ref": "servebuild/debian:bookworm-{arch}"},
    },
    "constraints": {"linux/amd64": "constraints/torch-cu130/py3.12-linux-amd64.txt"},
    "engine": {
        "name": "vllm",
        "version": "0.26.0",
        "install": "pip-source",
        "source": {
            "url": "https://github.com/vllm-project/vllm.git",
            "commit": "568afb3a13806beb53bb2e6bd518269357b237c0",
        },
    },
    "launch": {"profiles": {"p": {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m"]}}},
}


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    return over


def load_with(project: Path, edit: dict):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edit)))
    return load_recipe("hostile", project)
