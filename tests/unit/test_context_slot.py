"""The build context's folder is one per recipe and platform, shared by the variants, one slot per build
running at once (servebuild/build/contextslot.py)."""

from __future__ import annotations

import pytest

from servebuild.build import contextslot
from servebuild.build.contextslot import context_slot
from servebuild.errors import ServebuildError


def test_variants_built_one_after_another_use_one_folder(tmp_path):
    """The docker CLI names the file-sync session after the folder's path: the same path, the diff only."""
    with context_slot(tmp_path, "toy", "linux/amd64") as first:
        pass
    with context_slot(tmp_path, "toy", "linux/amd64") as second:
        pass
    assert first == second == tmp_path / "toy" / "_context" / "linux-amd64" / "0"


def test_builds_at_once_take_slots_of_their_own_and_free_them(tmp_path):
    with context_slot(tmp_path, "toy", "linux/amd64") as a, context_slot(tmp_path, "toy", "linux/amd64") as b:
        assert a != b and a.parent == b.parent
        with context_slot(tmp_path, "toy", "linux/arm64") as other_platform:
            assert other_platform.name == "0" and other_platform.parent.name == "linux-arm64"
    with context_slot(tmp_path, "toy", "linux/amd64") as again:
        assert again == a  # the first slot, free again


def test_every_slot_taken_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(contextslot, "SLOTS", 2)
    with context_slot(tmp_path, "toy", "linux/amd64"), context_slot(tmp_path, "toy", "linux/amd64"):
        with pytest.raises(ServebuildError) as caught:
            with context_slot(tmp_path, "toy", "linux/amd64"):
                pass
    assert "2 builds of toy for linux/amd64 are running here" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_link_planted_at_a_slot_lock_is_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    base = tmp_path / "build" / "toy" / "_context" / "linux-amd64"
    base.mkdir(parents=True)
    (base / "0.lock").symlink_to(victim)
    with pytest.raises(ServebuildError) as caught:
        with context_slot(tmp_path / "build", "toy", "linux/amd64"):
            pass
    assert victim.read_text() == "precious\n"
    assert "symbolic link" in str(caught.value) and "\n" not in str(caught.value)
