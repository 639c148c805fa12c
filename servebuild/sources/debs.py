"""Debian packages pinned by a lock, fetched by sha256 into servebuild's artifact cache (as wheels are):
each `.deb` is downloaded from the mirror's pool path the lock records, checked against the lock's
sha256 before it is kept, and reused from the cache afterwards, so a rebuild works offline.

`flat_repo` lays a set of cached packages out as a one-directory apt repository whose Packages index
is made from each `.deb`'s own control file (dpkg-deb), so mmdebstrap and apt install exactly those
files and nothing the mirror serves today.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
from pathlib import Path

from debian.deb822 import Deb822
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from servebuild import procs
from servebuild.errors import HostError, IntegrityError, Refused
from servebuild.fsutil import atomic_write, make_dir, open_host_file, sha256_bytes, sha256_file
from servebuild.sources import mirror as mirror_reads

DEB_LIMIT = 1 << 30  # no Debian package a base or an apt step installs is near 1 GiB
# Debian policy 5.6.1 and 5.6.12: a name of two or more of [a-z0-9+.-] starting alphanumeric; a version
# [epoch:]upstream[-revision], the upstream starting with a digit. No grammar here can end a line.
NAME = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")
VERSION = re.compile(r"(?=.{1,100}\Z)(?:[0-9]{1,5}:)?[0-9][A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~]+)*")
ARCHES = ("all", "amd64", "arm64")  # a pinned package is of its platform's architecture or of none
POOL_PATH = re.compile(r"pool/[A-Za-z0-9+._~/-]{1,400}\.deb")
GRAMMAR = {
    "name": (NAME, "a Debian package name"),
    "version": (VERSION, "a Debian version"),
    "arch": (re.compile("|".join(ARCHES)), f"one of the architectures {', '.join(ARCHES)}"),
    "sha256": (re.compile(r"[0-9a-f]{64}"), "a sha256 (64 lowercase hex digits)"),
    "filename": (POOL_PATH, "a pool path of a .deb"),
}
SPEC = re.compile(rf"{NAME.pattern}:(?:{GRAMMAR['arch'][0].pattern})={VERSION.pattern}")


class DebPackage(BaseModel):
    """One Debian package as a lock pins it: what the mirror's Packages index said of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    version: str
    arch: str
    sha256: str
    size: int
    filename: str  # the pool path under the mirror

    @field_validator("name", "version", "arch", "sha256", "filename")
    @classmethod
    def _grammar(cls, v: str, info: ValidationInfo) -> str:
        pattern, what = GRAMMAR[info.field_name]
        if not pattern.fullmatch(v) or ".." in v.split("/"):
            raise ValueError(f"{v!r} is not {what}" if info.field_name != "sha256" else f"is not {what}")
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: int) -> int:
        if not 0 <= v <= DEB_LIMIT:
            raise ValueError(f"is {v}; a .deb's size is 0 to {DEB_LIMIT} bytes")
        return v

    @model_validator(mode="after")
    def _pool_name(self) -> "DebPackage":
        """The pool file is NAME_VERSION_ARCH.deb (the version without its epoch), as Debian's archive names it:
        a pin whose file is another package's, version's or architecture's is refused before it is fetched."""
        want = f"{self.name}_{self.version.split(':', 1)[-1]}_{self.arch}.deb"
        if self.filename.rsplit("/", 1)[-1] != want:
            raise ValueError(f"filename {self.filename!r} is not the pool file of {self.spec} ({want})")
        return self

    @property
    def spec(self) -> str:
        """`name:arch=version`, the form an apt step installs; the one value of a pin the Dockerfile carries,
        so it is held to its grammar here too (a pin made without validation cannot end a line)."""
        spec = f"{self.name}:{self.arch}={self.version}"
        if not SPEC.fullmatch(spec):
            raise IntegrityError(f"{spec!r} is not a Debian package pin (name:arch=version)", field="debian")
        return spec


def cached_deb(cache_dir: Path, pkg: DebPackage) -> Path:
    return cache_dir / "debs" / pkg.sha256 / Path(pkg.filename).name


def fetch_debs(
    pins: list[DebPackage], mirror: str, cache_dir: Path, recipe: str, lock_file: str, offline: bool = False
) -> list[Path]:
    """The cached `.deb` of each pin, downloading what the cache lacks; every file checked against its sha256."""
    out, said = [], False
    for pkg in pins:
        path = cached_deb(cache_dir, pkg)
        if path.is_file() and not path.is_symlink() and sha256_file(path) == pkg.sha256:
            out.append(path)
            continue
        if not offline and not said:  # a line before the first request: the mirror is what it waits on
            print(f"fetching the .debs the artifact cache lacks from {mirror}", file=sys.stderr, flush=True)
            said = True
        if offline:
            raise Refused(
                f"{pkg.spec} is not in the artifact cache ({path.parent}) and --offline forbids the mirror",
                file=lock_file,
            )
        make_dir(path.parent, "the artifact cache", under=cache_dir)  # no link planted in the cache followed
        out.append(_download(pkg, mirror, path, recipe, lock_file))
    return out


def _download(pkg: DebPackage, mirror: str, path: Path, recipe: str, lock_file: str) -> Path:
    url = mirror.rstrip("/") + "/" + pkg.filename
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part{os.getpid()}")
    try:
        with os.fdopen(open_host_file(tmp, "a .deb download"), "wb") as sink:  # no link; bounded in size and time
            try:
                mirror_reads.get(url, DEB_LIMIT, sink=sink)
            except HostError as exc:  # the mirror's bounds (mirror.py): that line, naming the package and the lock
                raise exc.moved(f"cannot download {pkg.spec}: {exc.problem}", file=lock_file) from None
        got = sha256_file(tmp)
        if got != pkg.sha256:
            raise IntegrityError(
                f"{pkg.spec} from {url} hashes to {got}, the lock pins {pkg.sha256}",
                hint="the mirror serves other bytes under that name; do not build from it",
                file=lock_file,
                field=f"debian.{pkg.name}",
            )
        tmp.replace(path)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise Refused(
                f"the mirror no longer serves {pkg.spec} ({url}: 404; replaced at a point release?)",
                hint=f"run `invoke lock --recipe {recipe}` to pin what it serves now",
                file=lock_file,
                field=f"debian.{pkg.name}",
            ) from None
        raise HostError(f"cannot download {pkg.spec} from {url} (HTTP {exc.code})", file=lock_file) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise HostError(f"cannot download {pkg.spec} from {url} ({exc})", file=lock_file) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def control(deb: Path) -> Deb822:
    """The control paragraph of a .deb, read by dpkg-deb."""
    proc = procs.run(["dpkg-deb", "--field", str(deb)], "debian", capture_output=True, text=True)
    if proc.returncode != 0:
        raise IntegrityError(f"{deb} is not a Debian package: {procs.last_line(proc)}")
    return Deb822(proc.stdout)


def flat_repo(
    pins: list[DebPackage], debs: list[Path], repo: Path, suite: str, date: str, lock_file: str = "", field: str = ""
) -> Path:
    """`repo` holding each .deb (hard-linked from the cache where it can be), a Packages index of them and
    a Release naming the suite (mmdebstrap picks the essential set by suite and codename). `field`: where
    the pins are in `lock_file` (a .deb that is not its pin is named by its entry there)."""
    repo.mkdir(parents=True, exist_ok=True)
    stanzas = []
    for i, pkg, deb in sorted(zip(range(len(pins)), pins, debs), key=lambda p: (p[1].name, p[1].arch)):
        target = repo / deb.name
        try:
            os.link(deb, target)
        except OSError:
            target.write_bytes(deb.read_bytes())
        fields = control(deb)
        if (fields.get("Package"), fields.get("Version"), fields.get("Architecture")) != (
            pkg.name,
            pkg.version,
            pkg.arch,
        ):
            raise IntegrityError(
                f"{deb.name} (sha256 {pkg.sha256[:12]}...) says it is {fields.get('Package')!r} "
                f"{fields.get('Version')!r} {fields.get('Architecture')!r}, the lock pins {pkg.spec}",
                hint="run `invoke lock` again",
                file=lock_file or None,
                field=f"{field}.{i}" if field else None,
            )
        fields["Filename"] = f"./{deb.name}"
        fields["Size"] = str(pkg.size)
        fields["SHA256"] = pkg.sha256
        stanzas.append(fields.dump())
    index_text = "\n".join(s.rstrip("\n") + "\n" for s in stanzas).encode()
    atomic_write(repo / "Packages", index_text)
    arches = " ".join(sorted({p.arch for p in pins}))
    atomic_write(
        repo / "Release",
        f"Origin: servebuild\nSuite: {suite}\nCodename: {suite}\nDate: {date}\n"
        f"Architectures: {arches}\nSHA256:\n {sha256_bytes(index_text)} "
        f"{len(index_text)} Packages\n",
    )
    return repo
