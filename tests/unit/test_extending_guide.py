"""docs/extending.md is performed, not only read: its engine-kind example (the kind's module, the two
lines that register it, a recipe that uses it) is taken from the guide's code blocks, written into a
copy of the project, and that copy loads the kind, validates the recipe (and refuses a bad profile by
the kind's rule) and renders a Dockerfile, in a fresh interpreter. The guide also names every attribute
of `EngineKind` and only files that exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from servebuild.engines.base import EngineKind
from support import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "extending.md"
KIND = "tensorrtllm"  # the guide's example
BLOCK = re.compile(r"^( *)```[a-z]+\n(.*?)^\1```$", re.M | re.S)
KEY = re.compile(r"(from \S+ import|[A-Za-z_]\w* =)")


def guide_files() -> dict[str, str]:
    """The guide's code blocks that begin `# PATH`: PATH -> the block."""
    found = {}
    for indent, body in BLOCK.findall(GUIDE.read_text()):
        text = textwrap.dedent(body) if indent else body
        first = text.splitlines()[0]
        if first.startswith("# ") and "/" in first and " " not in first[2:]:
            found[first[2:]] = text
    return found


def perform(root: Path, rel: str, text: str) -> None:
    """A new file is written as the block; for a file of the project, each line of the block replaces the
    one line that starts the same way (`from X import`, `NAME =`)."""
    path = root / rel
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    lines = path.read_text().splitlines()
    for new in filter(None, text.splitlines()[1:]):
        key = KEY.match(new).group(1)
        at = [i for i, old in enumerate(lines) if old.startswith(key + " ")]
        assert len(at) == 1, f"the guide changes {rel}'s line {key!r}: it has {len(at)} such lines"
        lines[at[0]] = new
    path.write_text("\n".join(lines) + "\n")


CHECK = """
import contextlib, io, json, sys
from pathlib import Path
import servebuild
from servebuild.cli.build import render
from servebuild.engines import kind_for
from servebuild.errors import RecipeError
from servebuild.recipe.load import load_recipe

root = Path.cwd()
out = {"package": str(servebuild.PACKAGE_DIR)}
kind = kind_for("tensorrtllm")
out["kind"] = type(kind).__name__
loaded = load_recipe("tensorrtllm-demo", root)
out["recipe_kind"] = type(loaded.recipe.engine.kind).__name__
out["profiles"] = sorted(loaded.recipe.launch.profiles)
out["listen"] = kind.listen_args(loaded.recipe.launch.profiles["trtllm-serve"])
try:
    load_recipe("tensorrtllm-bad", root)
    out["bad"] = None
except RecipeError as exc:
    out["bad"] = str(exc)
text = io.StringIO()
with contextlib.redirect_stdout(text):
    render(root, "tensorrtllm-demo", "linux/arm64", None)
out["dockerfile"] = text.getvalue()
print(json.dumps(out))
"""


@pytest.fixture
def performed(tmp_path):
    """A copy of what the example needs, the guide performed in it, and what a fresh interpreter there
    says of the new kind."""
    skip = shutil.ignore_patterns("__pycache__", KIND)  # the example itself, should a reader have made it here
    shutil.copytree(REPO_ROOT / "servebuild", tmp_path / "servebuild", ignore=skip)
    shutil.copytree(REPO_ROOT / "images", tmp_path / "images")
    shutil.copytree(REPO_ROOT / "constraints" / "torch-cu130", tmp_path / "constraints" / "torch-cu130")
    (tmp_path / "recipes").mkdir()
    shutil.copyfile(REPO_ROOT / "recipes" / "torch-cu130.yaml", tmp_path / "recipes" / "torch-cu130.yaml")
    files = guide_files()
    assert sorted(files) == [
        "recipes/tensorrtllm-demo.yaml",
        "servebuild/engines/__init__.py",
        f"servebuild/engines/{KIND}/__init__.py",
    ], "the guide's engine-kind example is three blocks, each beginning `# PATH`"
    for rel, text in files.items():
        perform(tmp_path, rel, text)
    bad = {"name": "tensorrtllm-bad", "description": "d", "extends": "tensorrtllm-demo"}
    bad["launch"] = {"profiles": {"trtllm-serve": {"args": ["serve", "/m", "--tp_size", "0"]}}}
    (tmp_path / "recipes" / "tensorrtllm-bad.yaml").write_text(json.dumps(bad))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path, json.loads(proc.stdout)


def test_the_guides_engine_kind_loads_validates_and_renders(performed):
    root, out = performed
    assert out["package"] == str(root / "servebuild")  # the copy, not this checkout
    assert out["kind"] == out["recipe_kind"] == "TensorRTLLM"
    assert out["profiles"] == ["trtllm-serve"]
    assert out["listen"] == ["--host", "0.0.0.0", "--port", "8000"]  # the launcher's, at the kind's port
    # validated by the kind's own rule, named in one placed line
    assert (
        out["bad"].startswith("recipes/tensorrtllm-bad.yaml")
        and "--tp_size '0' is not a positive integer" in out["bad"]
    )
    runtime = out["dockerfile"].split(" AS runtime", 1)[1]
    assert re.search(r"^EXPOSE 8000$", runtime, re.M)  # the kind's port
    assert 'TLLM_LOG_LEVEL="INFO"' in runtime  # its env
    assert 'SERVEBUILD_HEALTH_URL="http://127.0.0.1:8000/health"' in runtime and "\nHEALTHCHECK " in runtime
    assert runtime.rstrip().endswith('CMD ["/usr/local/bin/trtllm-serve"]')  # the recipe's profile


def test_the_guide_names_every_attribute_of_an_engine_kind():
    text = GUIDE.read_text()
    names = [n for n in vars(EngineKind) if not n.startswith("_")]
    missing = [n for n in names if f"| `{n}` |" not in text and f"| `{n}(" not in text]
    assert not missing, f"docs/extending.md does not describe EngineKind's {missing}"


def test_every_module_the_guide_names_exists():
    """Backquoted or not (the stations picture is a code block): a `pkg/module.py` is a file of the
    checkout (from the root, servebuild/ or one of its packages), a bare `module.py` one of servebuild's
    (or `tasks.py` at the root)."""
    text = GUIDE.read_text()
    bases = [REPO_ROOT, REPO_ROOT / "servebuild", *[p for p in (REPO_ROOT / "servebuild").iterdir() if p.is_dir()]]
    known = {p.name for p in [*(REPO_ROOT / "servebuild").rglob("*.py"), *REPO_ROOT.glob("*.py")]}
    missing = []
    for token in sorted(set(re.findall(r"(?<![\w/<>.-])([a-z_]+(?:/[a-z_]+)*\.py)\b", text))):
        if KIND in token or "wheel_rebuild" in token:
            continue  # what the guide asks the reader to create
        if not (any((b / token).is_file() for b in bases) if "/" in token else token in known):
            missing.append(token)
    assert not missing, f"docs/extending.md names files that do not exist: {missing}"
