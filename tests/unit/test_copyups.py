"""build/copyups.py: a directory a layer holds only because a step copied it up (its mtime alone changed)
makes the layer depend on how the engine takes the diff; the scan names each such directory."""

from __future__ import annotations

from servebuild.build.copyups import copy_up_only

BASE = [
    ("tmp", 0o1777, 0, 0, True),
    ("var", 0o755, 0, 0, True),
    ("var/lib", 0o755, 0, 0, True),
    ("var/lib/dpkg", 0o755, 0, 0, True),
    ("var/lib/dpkg/updates", 0o755, 0, 0, True),
    ("var/lib/dpkg/status", 0o644, 0, 0, False),
]


def test_a_directory_with_nothing_under_it_and_its_old_mode_is_named():
    layer = [
        ("tmp", 0o1777, 0, 0, True),
        ("var/lib/dpkg", 0o755, 0, 0, True),
        ("var/lib/dpkg/updates", 0o755, 0, 0, True),
        ("var/lib/dpkg/status", 0o644, 0, 0, False),
    ]
    assert copy_up_only([BASE, layer]) == [(1, "tmp"), (1, "var/lib/dpkg/updates")]


def test_a_directory_with_a_change_under_it_a_new_one_or_a_new_mode_is_not():
    layer = [
        ("tmp", 0o1777, 0, 0, True),
        ("tmp/.wh.x", 0o644, 0, 0, False),  # a whiteout under it
        ("var/lib/dpkg/updates", 0o700, 0, 0, True),  # its mode changed
        ("opt", 0o755, 0, 0, True),
    ]  # new
    assert copy_up_only([BASE, layer]) == []


def test_the_base_layer_is_never_named():
    assert copy_up_only([BASE]) == []
