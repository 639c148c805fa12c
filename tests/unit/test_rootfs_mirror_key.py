"""The rootfs cache is keyed by the mirror too (issue 45, item 3): a lock pointed at another mirror asks
that mirror for what the artifact cache lacks, within its bounds, instead of taking the rootfs another
mirror's reads made; and the base's bytes never depend on the mirror (its sources.list is Debian's
line), so neither the image's key label nor any committed image id moves with it.

mmdebstrap, the flat repository and the normalisation are stand-ins here (they need root and minutes);
each records what it was given, which is what these tests assert."""

from __future__ import annotations

import pytest

from servebuild.build import bases
from servebuild.lock.lockfile import load_lock_file
from servebuild.recipe.load import load_recipe
from servebuild.sources import debs, rootfs
from support import REPO_ROOT

OTHER = "http://127.0.0.1:9/debian"


def _pins(mirror=None):
    pins = load_lock_file(load_recipe("torch-cu130-bookworm", REPO_ROOT)).debian["linux/amd64"]
    return pins if mirror is None else pins.model_copy(update={"mirror": mirror})


@pytest.fixture
def made(monkeypatch, tmp_path):
    """rootfs_tarball with the long steps stood in: records each mirror asked and each sources.list."""
    seen = {"mirrors": [], "sources": []}

    def fetch(pins, mirror, *a, **k):
        seen["mirrors"].append(mirror)
        return [tmp_path / f"{p.name}.deb" for p in pins]

    def normalise(src, dst, epoch, sources_list):
        seen["sources"].append(sources_list)
        dst.write_bytes(b"rootfs")

    monkeypatch.setattr(bases.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(debs, "fetch_debs", fetch)
    monkeypatch.setattr(debs, "flat_repo", lambda *a, **k: tmp_path / "repo")
    monkeypatch.setattr(rootfs, "mmdebstrap", lambda *a, **k: None)
    monkeypatch.setattr(rootfs, "normalise", normalise)
    monkeypatch.setattr(rootfs, "installed", lambda tar: sorted((p.name, p.version, p.arch) for p in _pins().base))
    return seen


def test_a_rootfs_made_from_one_mirror_is_not_taken_for_another(made, tmp_path):
    first = bases.rootfs_tarball(_pins(), "amd64", tmp_path, "r", "r.lock.yaml")
    assert bases.rootfs_tarball(_pins(), "amd64", tmp_path, "r", "r.lock.yaml") == first  # cached: not asked again
    assert made["mirrors"] == ["http://deb.debian.org/debian"]
    other = bases.rootfs_tarball(_pins(OTHER), "amd64", tmp_path, "r", "r.lock.yaml")
    assert made["mirrors"] == ["http://deb.debian.org/debian", OTHER] and other != first


def test_the_bases_bytes_and_label_do_not_depend_on_the_mirror(made, tmp_path):
    bases.rootfs_tarball(_pins(), "amd64", tmp_path, "r", "r.lock.yaml")
    bases.rootfs_tarball(_pins(OTHER), "amd64", tmp_path, "r", "r.lock.yaml")
    assert made["sources"] == ["deb http://deb.debian.org/debian bookworm main\n"] * 2
    assert _pins(OTHER).base_key() == _pins().base_key()  # the image's label, hence its id
    assert bases.cache_key(_pins(OTHER)) != bases.cache_key(_pins())
