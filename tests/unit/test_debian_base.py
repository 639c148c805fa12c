"""The base as a function of the lock's Debian side (issue 29): each source of difference between two
bootstraps that debootstrap left in the layer is put right by rootfs.normalise, the image's created time
and the rootfs cache key come from the pins and never from the clock or the (suite, arch) alone, and the
lock's Debian side is refused in one line when it is malformed or older than the mirror's.

The tarballs here are made by the test with tarfile (no mmdebstrap, no root): what mmdebstrap and its
maintainer scripts write is reproduced member by member, host- and clock-dependent values included.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from servebuild.build import bases, committed
from servebuild.errors import IntegrityError, Refused, ServebuildError
from servebuild.lock.debian import DebRelease, LockedDebian, check_against, check_not_older, release_of
from servebuild.lock.lockfile import load_lock_file
from servebuild.recipe.aptsteps import apt_steps
from servebuild.recipe.load import load_recipe
from servebuild.sources import rootfs
from servebuild.sources.debs import DebPackage
from support import REPO_ROOT

EPOCH = 1783764997  # bookworm's Release of 2026-07-11
DAY = EPOCH // 86400


def _tar(path: Path, members: list[tuple[str, bytes | None, int]]) -> Path:
    """A rootfs tarball: (name, content or None for a directory, mtime)."""
    with tarfile.open(path, "w:", format=tarfile.GNU_FORMAT) as tar:
        for name, data, mtime in members:
            info = tarfile.TarInfo("./" + name)
            info.mtime, info.uname, info.gname = mtime, "root", "root"
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return path


def _raw(path: Path, clock: int, host: str, shadow_day: int, inode: bytes) -> Path:
    """What a bootstrap at `clock` on host `host` writes (mmdebstrap's members plus debootstrap's leftovers)."""
    return _tar(
        path,
        [
            ("", None, EPOCH),
            ("etc", None, EPOCH),
            ("etc/hostname", host.encode() + b"\n", clock),
            ("etc/resolv.conf", b"nameserver 10.255.255.53\n" if host == "vm" else b"nameserver 1.1.1.1\n", clock),
            ("etc/hosts", b"127.0.0.1 " + host.encode() + b"\n", clock),
            ("etc/machine-id", host.encode() * 4, clock),
            ("etc/shadow", f"root:*:{shadow_day}:0:99999:7:::\ndaemon:*:{shadow_day}:0:99999:7:::\n".encode(), clock),
            ("etc/apt", None, EPOCH),
            ("etc/apt/sources.list", b"deb [trusted=yes] copy:///tmp/repo.X1 ./\n", clock),
            ("usr", None, EPOCH),
            ("usr/bin", None, EPOCH),
            ("usr/bin/true", b"\x7fELF", 1671456780),
            ("usr/lib/made-by-a-maintainer-script", b"x", clock),
            ("var", None, EPOCH),
            ("var/log", None, clock),
            ("var/log/apt", None, clock),
            ("var/log/dpkg.log", f"{time.strftime('%F %T', time.gmtime(clock))} install x\n".encode(), clock),
            ("var/log/alternatives.log", f"update-alternatives {clock}\n".encode(), clock),
            ("var/log/wtmp", b"", EPOCH),
            ("var/cache", None, EPOCH),
            ("var/cache/ldconfig", None, EPOCH),
            ("var/cache/ldconfig/aux-cache", inode, clock),
            ("var/cache/apt", None, EPOCH),
            ("var/cache/apt/pkgcache.bin", inode * 3, clock),
            ("var/cache/apt/archives", None, EPOCH),
            ("var/cache/apt/archives/partial", None, EPOCH),
            ("var/cache/apt/archives/bash_5.2.15-2+b9_amd64.deb", b"!<arch>" + inode, clock),
            ("var/lib", None, EPOCH),
            ("var/lib/apt", None, EPOCH),
            ("var/lib/apt/lists", None, EPOCH),
            ("var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease", b"Date: " + inode, clock),
            ("debootstrap", None, clock),
            ("debootstrap/debootstrap.log", f"/tmp/tmp.{host}\n".encode(), clock),
        ],
    )


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name.removeprefix("./"): m for m in tar.getmembers()}


def _read(path: Path, name: str) -> bytes:
    with tarfile.open(path) as tar:
        return tar.extractfile("./" + name).read()


@pytest.fixture
def normalised(tmp_path) -> Path:
    raw = _raw(tmp_path / "raw.tar", EPOCH + 5_000_000, "vm", DAY + 60, b"\x01\x02")
    out = tmp_path / "out.tar"
    rootfs.normalise(raw, out, EPOCH, "deb http://deb.debian.org/debian bookworm main\n")
    return out


def test_two_bootstraps_on_other_hosts_other_days_normalise_to_the_same_bytes(tmp_path):
    outs = []
    for i, (clock, host, day, inode) in enumerate(
        [(EPOCH + 100, "vm", DAY, b"\x01"), (EPOCH + 9_000_000, "gh200-17", DAY + 104, b"\x99\x98")]
    ):
        raw = _raw(tmp_path / f"raw{i}.tar", clock, host, day, inode)
        rootfs.normalise(raw, tmp_path / f"out{i}.tar", EPOCH, "deb http://deb.debian.org/debian bookworm main\n")
        outs.append((tmp_path / f"out{i}.tar").read_bytes())
    assert outs[0] == outs[1]


def test_no_log_with_content_stays_but_the_empty_ones_and_the_directories_do(normalised):
    names = _members(normalised)
    assert "var/log/dpkg.log" not in names and "var/log/alternatives.log" not in names
    assert {"var/log", "var/log/apt", "var/log/wtmp"} <= set(names)


def test_the_ldconfig_aux_cache_goes_and_its_directory_stays(normalised):
    names = _members(normalised)
    assert "var/cache/ldconfig/aux-cache" not in names and "var/cache/ldconfig" in names


def test_no_deb_apt_list_package_cache_or_debootstrap_leftover_stays(normalised):
    names = set(_members(normalised))
    assert not [
        n
        for n in names
        if n.endswith(".deb") or "InRelease" in n or n.endswith("pkgcache.bin") or n.startswith("debootstrap")
    ], names
    assert {"var/cache/apt/archives", "var/cache/apt/archives/partial", "var/lib/apt/lists"} <= names


def test_every_mtime_is_at_most_the_release_date_and_older_ones_are_kept(normalised):
    members = _members(normalised)
    assert max(m.mtime for m in members.values()) == EPOCH
    assert members["usr/bin/true"].mtime == 1671456780  # a file of a package keeps the package's mtime
    assert members["usr/lib/made-by-a-maintainer-script"].mtime == EPOCH


def test_the_shadow_day_is_the_release_day(normalised):
    assert _read(normalised, "etc/shadow") == f"root:*:{DAY}:0:99999:7:::\ndaemon:*:{DAY}:0:99999:7:::\n".encode()


def test_the_hosts_names_and_resolver_are_not_in_the_base(normalised):
    for name in ("etc/hostname", "etc/hosts", "etc/resolv.conf"):
        assert _read(normalised, name) == b"", name
    assert "etc/machine-id" not in _members(normalised)
    assert _read(normalised, "etc/apt/sources.list") == b"deb http://deb.debian.org/debian bookworm main\n"


def test_owner_names_are_dropped_and_ids_kept(normalised):
    assert {(m.uname, m.gname, m.uid) for m in _members(normalised).values()} == {("", "", 0)}


def test_a_missing_mount_target_is_added_empty(tmp_path):
    raw = _tar(tmp_path / "raw.tar", [("", None, EPOCH), ("etc", None, EPOCH)])
    rootfs.normalise(raw, tmp_path / "out.tar", EPOCH, "x\n")
    assert {n: _read(tmp_path / "out.tar", n) for n in rootfs.MOUNT_TARGETS} == {n: b"" for n in rootfs.MOUNT_TARGETS}


def copy_project(tmp_path: Path) -> Path:
    """The repository's recipes, locks and the files they name, copied (a test edits the copy)."""
    root = tmp_path / "project"
    for sub in ("recipes", "constraints", "patches", "recordings"):
        shutil.copytree(REPO_ROOT / sub, root / sub)
    return root


def _pins(arch: str = "amd64") -> LockedDebian:
    return load_lock_file(load_recipe("torch-cu130-bookworm", REPO_ROOT)).debian[f"linux/{arch}"]


def test_the_base_image_is_created_at_the_release_date_not_now():
    assert bases.created_of(_pins()) == "2026-07-11T10:16:37Z"


def test_the_rootfs_cache_key_is_what_the_rootfs_is_made_of_not_the_suite():
    pins = _pins()
    other_release = pins.model_copy(update={"release": pins.release.model_copy(update={"sha256": "0" * 64})})
    first = pins.base[0]
    other_package = pins.model_copy(update={"base": [first.model_copy(update={"sha256": "1" * 64}), *pins.base[1:]]})
    keys = {pins.base_key(), other_release.base_key(), other_package.base_key(), _pins("arm64").base_key()}
    assert len(keys) == 4
    assert pins.base_key() == _pins().base_key()  # and a function of them: the same pins, the same key


def test_the_rootfs_tarball_is_cached_under_its_key(tmp_path):
    pins = _pins()
    cached = tmp_path / "rootfs" / f"bookworm-amd64-{bases.cache_key(pins)[:16]}.tar"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"made before")
    assert bases.rootfs_tarball(pins, "amd64", tmp_path, "r", "r.lock.yaml") == cached
    stale = tmp_path / "rootfs" / "bookworm-amd64.v2.tar"  # a tarball keyed by (suite, arch) only is never used
    cached.rename(stale)
    other = pins.model_copy(update={"release": pins.release.model_copy(update={"epoch": EPOCH + 1})})
    assert other.base_key()[:16] not in stale.name


def test_the_committed_lock_pins_every_apt_step_the_renderer_installs():
    for name in ("torch-cu130-bookworm", "sglang-native-fp8-bookworm", "vllm-dspark-bookworm"):
        loaded = load_recipe(name, REPO_ROOT)
        lock = load_lock_file(loaded)
        for platform in loaded.recipe.platforms:
            check_against(lock.debian[platform], apt_steps(loaded.recipe), name)


def test_a_lock_whose_apt_step_is_not_what_is_rendered_is_stale_in_one_line():
    pins = _pins()
    with pytest.raises(IntegrityError) as info:
        check_against(pins, {"build": ["python3", "python3-venv"], "runtime": ["python3", "tini"]}, "x.lock.yaml")
    assert "\n" not in str(info.value) and "lock is stale: the runtime apt step installs python3 tini" in str(
        info.value
    )


def test_a_release_older_than_the_locks_is_refused_in_one_line():
    locked = DebRelease(date="Sat, 11 Jul 2026 10:16:37 UTC", epoch=EPOCH, sha256="a" * 64)
    older = release_of(b"Origin: Debian\nDate: Sat, 10 Jan 2026 10:00:00 UTC\n", "InRelease")
    with pytest.raises(Refused) as info:
        check_not_older(older, locked, "http://deb.debian.org/debian bookworm")
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    assert "older than the lock's Sat, 11 Jul 2026" in str(info.value)
    check_not_older(locked, locked, "same")  # the same Release is fine
    check_not_older(release_of(b"Date: Sun, 12 Jul 2026 00:00:00 UTC\n", "x"), locked, "newer")


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("name", "Bash", "is not a Debian package name"),
        ("version", "1.0;rm -rf /", "is not a Debian version"),
        ("sha256", "abc", "is not a sha256"),
        ("filename", "pool/../../etc/passwd.deb", "is not a pool path"),
        ("filename", "http://evil/x.deb", "is not a pool path"),
    ],
)
def test_a_malformed_debian_pin_is_refused(field, value, message):
    good = _pins().base[0].model_dump()
    with pytest.raises(ValueError, match=message):
        DebPackage.model_validate({**good, field: value})


def test_a_lock_with_a_malformed_debian_entry_is_one_line(tmp_path):
    root = copy_project(tmp_path)
    path = root / "recipes" / "torch-cu130-bookworm.lock.yaml"
    path.write_text(path.read_text().replace("filename: pool/main/", "filename: /etc/", 1))
    with pytest.raises(ServebuildError) as info:
        load_lock_file(load_recipe("torch-cu130-bookworm", root))
    assert "\n" not in str(info.value) and "malformed lock" in str(info.value) and "debian" in str(info.value)


@pytest.mark.parametrize(
    "edit",
    [
        ("mirror: http://deb.debian.org/debian", "mirror: file:///etc"),
        ("mirror: http://deb.debian.org/debian", "mirror: /srv/mirror"),
        ("suite: bookworm", "suite: ../../x"),
    ],
)
def test_a_lock_whose_debian_mirror_or_suite_is_not_one_is_refused(tmp_path, edit):
    root = copy_project(tmp_path)
    path = root / "recipes" / "torch-cu130-bookworm.lock.yaml"
    path.write_text(path.read_text().replace(*edit, 1))
    with pytest.raises(ServebuildError) as info:
        load_lock_file(load_recipe("torch-cu130-bookworm", root))
    assert "\n" not in str(info.value) and "malformed lock" in str(info.value) and "debian" in str(info.value)


def test_a_malformed_ids_file_is_one_line(tmp_path):
    root = copy_project(tmp_path)
    (root / "recipes" / "torch-cu130-bookworm.ids.yaml").write_text("linux/amd64: {image: sha256:abc, layers: []}\n")
    with pytest.raises(ServebuildError) as info:
        committed.load_committed(load_recipe("torch-cu130-bookworm", root))
    assert "\n" not in str(info.value) and "linux/amd64.image" in str(info.value)


def test_the_verdict_names_the_first_differing_layer(tmp_path):
    root = copy_project(tmp_path)
    (root / "recipes" / "torch-cu130-bookworm.ids.yaml").unlink()  # the test records its own
    loaded = load_recipe("torch-cu130-bookworm", root)
    layers = ["sha256:" + c * 64 for c in "abc"]
    committed.record(loaded, "linux/amd64", committed.CommittedImage(image="sha256:" + "f" * 64, layers=layers))
    same, line = committed.verdict(loaded, "linux/amd64", "sha256:" + "f" * 64, layers, ["a", "b", "c"])
    assert same and line.startswith("matches the committed digest sha256:ffff")
    same, line = committed.verdict(
        loaded,
        "linux/amd64",
        "sha256:" + "e" * 64,
        layers[:1] + ["sha256:" + "d" * 64, layers[2]],
        ["a", "RUN pip", "c"],
    )
    assert not same and "first differing layer 2 of 3" in line and "RUN pip" in line
    same, line = committed.verdict(loaded, "linux/arm64", "sha256:" + "e" * 64, layers, [])
    assert not same and line.startswith("no committed id for linux/arm64")
    same, line = committed.verdict(loaded, "linux/amd64", "sha256:" + "f" * 64, layers, [], variant="v")
    assert not same and line.startswith("no committed id for linux/amd64:v")


def _derived(root: Path, name: str, body: str) -> str:
    path = root / "recipes" / f"{name}.yaml"
    path.write_text(f"name: {name}\nextends: sglang-native-fp8-bookworm\n{body}")
    return name


def test_a_recipe_derived_with_no_lock_of_its_own_takes_its_parents_debian_pins(tmp_path):
    """A user's recipe that extends a locked one to change only its aot kernels installs the parent
    lock's .debs (the same apt layers, the same base key), not what the mirror serves today."""
    from servebuild.lock.lockfile import debian_pins

    root = copy_project(tmp_path)
    name = _derived(root, "my-aot", "aot:\n  kernels: []\n")
    parent = load_lock_file(load_recipe("sglang-native-fp8-bookworm", root)).debian
    for platform in ("linux/amd64", "linux/arm64"):
        pins, where = debian_pins(load_recipe(name, root), platform)
        assert pins == parent[platform] and where == "recipes/sglang-native-fp8-bookworm.lock.yaml"


@pytest.mark.parametrize(
    "body,own_lock",
    [
        ("apt:\n  runtime: [curl]\n", False),  # another apt step: the parent's pins are not its pins
        ("aot:\n  kernels: []\n", True),  # a lock file of its own (stale here): never the parent's
    ],
)
def test_a_derived_recipe_whose_apt_steps_differ_or_that_has_a_lock_inherits_nothing(tmp_path, body, own_lock):
    from servebuild.lock.lockfile import debian_pins

    root = copy_project(tmp_path)
    name = _derived(root, "mine", body)
    if own_lock:
        text = (root / "recipes" / "sglang-native-fp8-bookworm.lock.yaml").read_text()
        (root / "recipes" / "mine.lock.yaml").write_text(
            text.replace("\nrecipe: sglang-native-fp8-bookworm\n", "\nrecipe: mine\n")
        )
    pins, where = debian_pins(load_recipe(name, root), "linux/amd64")
    assert pins is None
    assert where == ("recipes/mine.lock.yaml" if own_lock else "recipes/sglang-native-fp8-bookworm.lock.yaml")


def test_the_build_plan_of_a_derived_recipe_installs_its_parents_pinned_debs(tmp_path):
    """The plan a build renders from: the parent lock's pins, checked against the steps it renders."""
    from servebuild.plan.make import BuildOptions, make_plan

    root = copy_project(tmp_path)
    name = _derived(root, "my-aot", "aot:\n  kernels: []\n")
    plan = make_plan(root, name, BuildOptions(platform="linux/amd64", dry_run=True))
    assert plan.debian == load_lock_file(load_recipe("sglang-native-fp8-bookworm", root)).debian["linux/amd64"]


def test_a_parent_that_is_not_a_whole_recipe_alone_is_passed_over(tmp_path):
    """A chain through a fragment (valid only under its child) still finds the locked recipe above it."""
    from servebuild.lock.lockfile import debian_pins

    root = copy_project(tmp_path)
    (root / "recipes" / "fragment.yaml").write_text(
        "extends: sglang-native-fp8-bookworm\n"
    )  # no name: not a recipe alone
    (root / "recipes" / "mine.yaml").write_text("name: mine\nextends: fragment\naot:\n  kernels: []\n")
    pins, where = debian_pins(load_recipe("mine", root), "linux/amd64")
    assert where == "recipes/sglang-native-fp8-bookworm.lock.yaml" and pins is not None


def test_the_debs_known_digests_are_the_context_names_and_give_the_mtimes_hashing_would(tmp_path):
    """write_context takes the lock's sha256 of each pinned .deb instead of hashing the copy again (the
    files were checked against it as they were fetched): the names are the context's own, and a known
    digest gives the mtime the file's own hash gives (so no context file, cache key or id moves)."""
    from servebuild.build.run import deb_digests, pinned_debs
    from servebuild.fsutil import sha256_file
    from servebuild.plan.make import BuildOptions, make_plan
    from servebuild.render.context import content_mtime
    from servebuild.sources.debs import cached_deb

    plan = make_plan(REPO_ROOT, "sglang-native-fp8-bookworm", BuildOptions(platform="linux/amd64", dry_run=True))
    digests = deb_digests(plan)
    cache = tmp_path / "cache"
    names = {
        f"debs/{stage}/{cached_deb(cache, p).name}": p.sha256
        for stage, step in plan.debian.apt.items()
        for p in step.packages
    }
    assert digests == names and len(digests) == sum(len(files) for files in pinned_debs(plan, fetch=False).values())
    deb = tmp_path / "x.deb"
    deb.write_bytes(b"not really a deb")
    assert content_mtime(deb, sha256_file(deb)) == content_mtime(deb)
    assert content_mtime(deb, "0" * 64) != content_mtime(deb)  # the known digest is what is used
