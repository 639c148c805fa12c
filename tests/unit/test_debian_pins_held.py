"""The Debian side of a lock, the .debs and the base, each behaviour asserted on its own (issue 45, item 7:
the held-out mutants of lock/debian.py, sources/debs.py, sources/rootfs.py and build/bases.py). No mirror, no
apt run, no mmdebstrap: apt's answers and a .deb's control file are given as text (stand-ins, said where)."""

from __future__ import annotations

import tarfile

import pytest
from debian.deb822 import Deb822
from support import REPO_ROOT

from servebuild.build import bases
from servebuild.errors import HostError, IntegrityError, Refused, ServebuildError
from servebuild.lock import debian
from servebuild.lock.lockfile import load_lock_file
from servebuild.recipe.load import load_recipe
from servebuild.sources import debs, rootfs

RECIPE = "torch-cu130-bookworm"


def lock():
    return load_lock_file(load_recipe(RECIPE, REPO_ROOT))


def pins(arch="amd64") -> debian.LockedDebian:
    return lock().debian[f"linux/{arch}"]


# -- the lock's grammar: suite and mirror ---------------------------------------------------------------------------


@pytest.mark.parametrize("suite", ["bookworm/../../x", "bookworm x", "bookworm\n", "b", "Bookworm"])
def test_a_suite_is_matched_whole_not_as_a_prefix(suite):
    with pytest.raises(ValueError, match="is not a Debian suite name"):
        debian.LockedDebian.model_validate({**pins().model_dump(), "suite": suite})
    with pytest.raises(ServebuildError, match="is not a Debian suite name"):
        bases.check_suite(suite)
    assert debian.LockedDebian.model_validate({**pins().model_dump(), "suite": "bookworm-backports"})


def test_the_minbase_patterns_anchor_the_suite():
    """apt's ?archive(^bookworm) would also take bookworm-backports, bookworm-security: the pattern is whole."""
    patterns = debian.minbase("bookworm", "amd64")
    assert "?archive(^bookworm$)" in " ".join(patterns) and "?codename(^bookworm$)" in " ".join(patterns)


@pytest.mark.parametrize(
    "mirror",
    ["file:///srv/mirror", "file:///srv/http://deb.debian.org/debian", "ftp://deb.debian.org/debian",
     "http://deb.debian.org/debian x", "/srv/mirror", "http://deb.debian.org/debian\nX"],
)  # fmt: skip
def test_a_mirror_is_an_http_url_whole(mirror):
    with pytest.raises(ValueError, match="is not an http"):
        debian.LockedDebian.model_validate({**pins().model_dump(), "mirror": mirror})


# -- re-locking: the rollback check -----------------------------------------------------------------------------------


class AptStandIn:
    """Stands in for the host's apt (AptView): the mirror's Release is `release`; asking past it fails."""

    release = None

    def __init__(self, work, mirror, suite, arch):
        pass

    def update(self):
        return AptStandIn.release

    def simulate(self, packages):
        raise AssertionError("resolved past the rollback check")


def older(release):
    return release.model_copy(update={"epoch": release.epoch - 86400, "date": "Mon, 10 Jul 2026 10:16:37 UTC"})


def test_a_re_lock_against_a_rolled_back_mirror_is_refused_not_left_unresolved(tmp_path, monkeypatch):
    old = lock().debian
    AptStandIn.release = older(old["linux/amd64"].release)
    monkeypatch.setattr(debian, "AptView", AptStandIn)
    unresolved: list[str] = []
    with pytest.raises(Refused, match="older than the lock's"):
        debian.lock_platforms(load_recipe(RECIPE, REPO_ROOT).recipe, {}, tmp_path, old, unresolved)
    assert unresolved == []


def test_check_not_older_takes_the_same_release_and_refuses_an_older_one():
    release = pins().release
    debian.check_not_older(release, release, "m")
    debian.check_not_older(release, None, "m")
    with pytest.raises(Refused) as info:
        debian.check_not_older(older(release), release, "m bookworm")
    assert not isinstance(info.value, HostError)  # a refusal, never a host problem lock_platforms would pass over


# -- what apt answered: only what was asked ---------------------------------------------------------------------------


def paragraph(name, version="1.0-1", arch="amd64", **more):
    fields = {"Package": name, "Version": version, "Architecture": arch, "SHA256": "a" * 64, "Size": "10",
              "Filename": f"pool/main/{name[0]}/{name}/{name}_{version}_{arch}.deb", **more}  # fmt: skip
    return "".join(f"{k}: {v}\n" for k, v in fields.items())


def test_paragraphs_apt_cache_shows_that_were_not_asked_for_are_not_pins(tmp_path):
    view = debian.AptView(tmp_path, debian.DEFAULT_MIRROR, "bookworm", "amd64")
    view.run = lambda args: "\n".join(  # stands in for `apt-cache show` (it shows every version and arch asked of)
        [paragraph("libfoo"), paragraph("libfoo", "2.0-1"), paragraph("evil"), paragraph("libfoo", arch="arm64")]
    )
    found = view.stanzas([("libfoo", "1.0-1", "amd64")])
    assert list(found) == [("libfoo", "1.0-1", "amd64")]
    assert [p.spec for p in view.pins([("libfoo", "1.0-1", "amd64")])] == ["libfoo:amd64=1.0-1"]


# -- the .debs ----------------------------------------------------------------------------------------------------------


def test_a_deb_whose_own_version_is_not_the_pin_is_refused(tmp_path, monkeypatch):
    pin = pins().base[0]
    deb = tmp_path / "cache" / "x.deb"
    deb.parent.mkdir()
    deb.write_bytes(b"stands in for a .deb")
    said = {"Package": pin.name, "Version": pin.version + "+evil", "Architecture": pin.arch}
    monkeypatch.setattr(debs, "control", lambda path: Deb822(said))  # stands in for dpkg-deb --field
    with pytest.raises(IntegrityError, match=r"says it is .*\+evil.*the lock pins"):
        debs.flat_repo([pin], [deb], tmp_path / "repo", "bookworm", "d", "l.yaml", "debian.linux/amd64.base")
    said["Version"] = pin.version
    debs.flat_repo([pin], [deb], tmp_path / "repo2", "bookworm", "d")


def test_a_deb_of_more_than_1_gib_is_not_a_pin():
    pin = pins().base[0]
    assert debs.DEB_LIMIT == 1 << 30
    debs.DebPackage.model_validate({**pin.model_dump(), "size": 1 << 30})
    with pytest.raises(ValueError, match="a .deb's size is 0 to 1073741824 bytes"):
        debs.DebPackage.model_validate({**pin.model_dump(), "size": (1 << 30) + 1})


def test_a_download_is_bounded_at_1_gib(tmp_path, monkeypatch):
    pin = pins().base[0]
    asked = {}

    def get(url, limit, sink=None, **k):  # stands in for the bounded mirror read
        asked["limit"] = limit
        raise HostError("stop here")

    monkeypatch.setattr(debs.mirror_reads, "get", get)
    with pytest.raises(HostError):
        debs.fetch_debs([pin], debian.DEFAULT_MIRROR, tmp_path, RECIPE, "l.yaml")
    assert asked == {"limit": 1 << 30}


# -- the base: dpkg's status, var/log ----------------------------------------------------------------------------------


def test_only_packages_dpkg_says_are_installed_count():
    status = "\n".join(
        paragraph(name, Status=state)
        for name, state in [
            ("ok", "install ok installed"),
            ("half", "install ok half-installed"),
            ("unpacked", "install ok unpacked"),
            ("conf", "deinstall ok config-files"),
            ("gone", "purge ok not-installed"),
            ("held", "hold ok installed"),
        ]
    )
    assert rootfs.installed_from_status(status) == [("held", "1.0-1", "amd64"), ("ok", "1.0-1", "amd64")]


def member(name, kind, size=0):
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info


@pytest.mark.parametrize(
    "name,kind,size,dropped",
    [
        ("var/log/apt/", tarfile.DIRTYPE, 0, False),
        ("var/log/empty.log", tarfile.REGTYPE, 0, False),
        ("var/log/dpkg.log", tarfile.REGTYPE, 5, True),
        ("var/log/link", tarfile.SYMTYPE, 0, True),
        ("var/log/hard", tarfile.LNKTYPE, 0, True),
        ("var/log/dev", tarfile.CHRTYPE, 0, True),
        ("var/log/blk", tarfile.BLKTYPE, 0, True),
        ("var/log/fifo", tarfile.FIFOTYPE, 0, True),
    ],
)
def test_var_log_keeps_its_folders_and_empty_files_only(name, kind, size, dropped):
    assert rootfs._dropped(name, member(name.rstrip("/"), kind, size)) is dropped


# -- the base's pins: the lock's suite only ----------------------------------------------------------------------------


def test_a_lock_for_another_suite_is_not_used(monkeypatch):
    loaded = load_recipe(RECIPE, REPO_ROOT)
    assert bases.pins_for(loaded, "linux/amd64", offline=True) == pins()
    with pytest.raises(Refused, match="pins no Debian trixie packages for linux/amd64"):
        bases.pins_for(loaded, "linux/amd64", suite="trixie", offline=True)
