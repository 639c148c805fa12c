"""A lock's Debian pins against the real mirror (deb.debian.org, as CI reaches it): a package the mirror
does not serve, a .deb whose bytes differ from the lock's sha256, and an empty cache offline are each
one line with exit 2, naming the package (and `invoke lock` where re-locking is the fix), and leave no
file in the artifact cache. No engine is needed: the .debs are fetched before anything is built."""

from __future__ import annotations

import pytest

from servebuild.errors import IntegrityError, Refused
from servebuild.lock.lockfile import load_lock_file
from servebuild.recipe.load import load_recipe
from servebuild.sources.debs import cached_deb, fetch_debs
from support import REPO_ROOT

MIRROR = "http://deb.debian.org/debian"


def small_pin():
    """The lock's smallest pinned base package for amd64 (a few kB)."""
    pins = load_lock_file(load_recipe("torch-cu130-bookworm", REPO_ROOT)).debian["linux/amd64"]
    return min(pins.base, key=lambda p: p.size)


def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and exc.value.exit_code == 2, text
    return text


def test_the_pinned_package_is_fetched_checked_and_reused_offline(tmp_path):
    pin = small_pin()
    [path] = fetch_debs([pin], MIRROR, tmp_path, "torch-cu130-bookworm", "recipes/torch-cu130-bookworm.lock.yaml")
    assert path == cached_deb(tmp_path, pin) and path.stat().st_size == pin.size
    again = fetch_debs([pin], "http://127.0.0.1:9/unreachable", tmp_path, "r", "r.lock.yaml", offline=True)
    assert again == [path]  # from the artifact cache: no mirror asked


def test_a_package_the_mirror_does_not_serve_names_it_and_the_lock_command(tmp_path):
    pin = small_pin().model_copy(
        update={
            "name": "servebuild-no-such-package",
            "filename": "pool/main/s/servebuild-no-such-package/x_1.0_amd64.deb",
        }
    )
    with pytest.raises(Refused) as info:
        fetch_debs([pin], MIRROR, tmp_path, "torch-cu130-bookworm", "recipes/torch-cu130-bookworm.lock.yaml")
    text = one_line(info)
    assert "the mirror no longer serves servebuild-no" in text and "404" in text
    assert "run `invoke lock --recipe torch-cu130-bookworm`" in text
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_deb_whose_bytes_differ_from_the_locks_hash_is_refused_and_not_kept(tmp_path):
    pin = small_pin().model_copy(update={"sha256": "0" * 64})
    with pytest.raises(IntegrityError) as info:
        fetch_debs([pin], MIRROR, tmp_path, "torch-cu130-bookworm", "recipes/torch-cu130-bookworm.lock.yaml")
    text = one_line(info)
    assert f"{pin.spec} from {MIRROR}/{pin.filename} hashes to " in text and "the lock pins 0000" in text
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_cached_deb_that_was_altered_is_not_used_offline(tmp_path):
    pin = small_pin()
    [path] = fetch_debs([pin], MIRROR, tmp_path, "r", "r.lock.yaml")
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(Refused) as info:
        fetch_debs([pin], MIRROR, tmp_path, "r", "r.lock.yaml", offline=True)
    assert f"{pin.spec} is not in the artifact cache" in one_line(info)


def test_bootstrap_base_offline_without_pins_for_the_suite_is_one_line():
    from tests.cli.test_cli_bad_input import assert_one_line, cli

    proc = cli(
        "bootstrap-base", "--arch", "amd64", "--suite", "trixie", "--offline", "--tag", "servebuild-test/never:1"
    )
    assert_one_line(
        proc, "--offline", "pins no Debian trixie packages for linux/amd64", "invoke lock --recipe torch-cu130-bookworm"
    )


@pytest.mark.parametrize(
    "args, words",
    [
        (("--arch", "s390x"), ["--arch", "unknown arch 's390x'"]),
        (("--suite", "../../x"), ["--suite", "is not a Debian suite name"]),
        (("--recipe", "no-such-recipe"), ["no-such-recipe"]),
    ],
)
def test_bootstrap_base_bad_input_is_one_line(args, words):
    from tests.cli.test_cli_bad_input import assert_one_line, cli

    assert_one_line(cli("bootstrap-base", *args, "--tag", "servebuild-test/never:1"), *words)
