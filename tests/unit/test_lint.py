"""The repository passes `ruff check` and is as `ruff format` writes it: the rules, the line length and the
paths both leave alone are [tool.ruff] in pyproject.toml. A finding or a file the formatter would change
fails the suite with ruff's own report (`ruff format .` fixes the latter). The ruff run is the one pinned in
requirements-dev.txt, installed next to this interpreter (a missing ruff is a failure, not a skip)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import REPO_ROOT

RUFF = Path(sys.executable).with_name("ruff")  # not resolved: the venv's bin/, not the base interpreter's


def test_ruff_finds_nothing():
    assert RUFF.is_file(), f"no ruff next to {sys.executable}: install requirements-dev.txt (ruff is pinned there)"
    proc = subprocess.run(
        [str(RUFF), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"ruff check found something (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"


def test_ruff_format_would_change_nothing():
    assert RUFF.is_file(), f"no ruff next to {sys.executable}: install requirements-dev.txt (ruff is pinned there)"
    proc = subprocess.run(
        [str(RUFF), "format", "--check", "--no-cache", "."], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (
        f"ruff format would reformat (exit {proc.returncode}; run `ruff format .`):\n{proc.stdout}{proc.stderr}"
    )
