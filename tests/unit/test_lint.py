"""The repository passes `ruff check`: its rules and the paths it leaves alone are [tool.ruff] in
pyproject.toml. A finding fails the suite with ruff's own report. The ruff run is the one pinned in
requirements-dev.txt, installed next to this interpreter (a missing ruff is a failure, not a skip)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import REPO_ROOT

RUFF = Path(sys.executable).with_name("ruff")  # not resolved: the venv's bin/, not the base interpreter's


def test_ruff_finds_nothing():
    assert RUFF.is_file(), f"no ruff next to {sys.executable}: install requirements-dev.txt (ruff is pinned there)"
    proc = subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"ruff check found something (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
