"""Unit fixtures shared across files."""

from __future__ import annotations

import pytest

from support import copy_real


@pytest.fixture
def project(tmp_path):
    """A project for the recipes of tests/unit/minimal_recipe.py: the constraints file BASE names and an
    empty recipes/. A file that needs another project defines its own `project`, which wins there."""
    copy_real(tmp_path, "constraints/torch-cu130/py3.12-linux-amd64.txt")
    (tmp_path / "recipes").mkdir()
    return tmp_path
