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


def test_a_directory_whose_owner_changed_is_not_named():
    layer = [("var/lib/dpkg/updates", 0o755, 1000, 0, True), ("tmp", 0o1777, 0, 1000, True)]
    assert copy_up_only([BASE, layer]) == []


def test_a_change_deep_under_a_directory_keeps_it_off_the_list():
    """A file two levels under `tmp` (its parent not an entry of the layer) is a change under `tmp` too."""
    assert copy_up_only([BASE, [("tmp", 0o1777, 0, 0, True), ("tmp/a/b", 0o644, 0, 0, False)]]) == []


def test_what_a_directory_was_is_read_from_every_layer_below_not_the_last_alone():
    middle = [("opt", 0o755, 0, 0, True), ("opt/x", 0o644, 0, 0, False)]
    assert copy_up_only([BASE, middle, [("tmp", 0o1777, 0, 0, True)]]) == [(2, "tmp")]
