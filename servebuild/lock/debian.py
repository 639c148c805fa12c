"""The Debian side of a lock: per platform, the suite's Release (date and hash) and every package the base
and each apt step install (name, version, architecture, sha256 and pool path from the Packages index).

Resolution uses Debian's own resolver, never one of ours, and needs no root and no emulation: the host's
apt, pointed at the suite and architecture in a directory of its own (the mirror's InRelease checked
against the host's archive keyring), simulates mmdebstrap's minbase set on an empty system (the suite's
Essential and Priority: required packages, and apt: for bookworm amd64 and arm64 the very 96 packages
mmdebstrap installs, checked when this was written), then each apt step against that base
(`apt-get -s install --no-install-recommends`). The bootstrap installs exactly the pinned set and checks
it. The Release date is the base's SOURCE_DATE_EPOCH.

Only Debian's normal mirror is reachable from where servebuild is developed, not snapshot.debian.org:
a lock made today can be rebuilt while the mirror still serves its versions, or from the artifact cache
(every pinned .deb is kept there by sha256); a version replaced at a point release cannot be fetched
again, and the build then stops naming the package and `invoke lock`.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from debian.deb822 import Deb822
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from servebuild import procs
from servebuild.errors import HostError, InputError, IntegrityError, Refused, ToolError
from servebuild.fsutil import atomic_write, canonical_json
from servebuild.platforms import PLATFORMS, arch_of
from servebuild.sources import mirror as mirror_reads
from servebuild.sources import rootfs
from servebuild.sources.debs import NAME, DebPackage

DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = re.compile(r"[a-z][a-z0-9-]{1,30}")  # a Debian suite or codename (bookworm, oldstable)
INST = re.compile(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) .*\[(\S+)\]\)")
# a Release's Date as Debian's archive writes it (dak, apt-ftparchive): RFC 2822 in UTC, one line, no controls
RELEASE_DATE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} (?:UTC|GMT|\+0000)"
)
EPOCHS = (946684800, 4102444800)  # 2000-01-01 to 2100-01-01: any Release a lock can pin (a base's date)
STAGE = re.compile(r"[a-z][a-z0-9_-]{0,30}")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DebRelease(_Entry):
    """The suite's InRelease as the lock saw it: its Date (the base's SOURCE_DATE_EPOCH) and its sha256."""

    date: str
    epoch: int
    sha256: str

    @field_validator("date")
    @classmethod
    def _date(cls, v: str) -> str:
        if not RELEASE_DATE.fullmatch(v):
            raise ValueError(f"{v!r} is not a Release date such as 'Sat, 11 Jul 2026 10:16:37 UTC'")
        return v

    @field_validator("epoch")
    @classmethod
    def _epoch(cls, v: int) -> int:
        if not EPOCHS[0] <= v < EPOCHS[1]:
            raise ValueError(f"is {v}; a Release's epoch is from {EPOCHS[0]} (2000) to {EPOCHS[1]} (2100)")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", v):
            raise ValueError("is not a sha256 (64 lowercase hex digits)")
        return v

    @model_validator(mode="after")
    def _epoch_is_the_date(self) -> "DebRelease":
        when = email.utils.parsedate_to_datetime(self.date)
        if int(when.timestamp()) != self.epoch:
            raise ValueError(f"epoch {self.epoch} is not the date {self.date} ({int(when.timestamp())})")
        return self


class AptStep(_Entry):
    requested: list[str]  # the packages the step names (render's list for the stage)
    packages: list[DebPackage]  # what apt installs for them on top of the base, dependencies included

    @field_validator("requested")
    @classmethod
    def _requested(cls, v: list[str]) -> list[str]:
        bad = next((n for n in v if not NAME.fullmatch(n)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not a Debian package name")
        if v != sorted(set(v)):
            raise ValueError("must name each package once, sorted")
        return v

    @field_validator("packages")
    @classmethod
    def _packages(cls, v: list[DebPackage]) -> list[DebPackage]:
        return once_each(v)


def once_each(packages: list[DebPackage]) -> list[DebPackage]:
    """A package pinned twice (the same version or two) is no pin: which one installs would be apt's choice."""
    seen: dict[str, int] = {}
    for i, pkg in enumerate(packages):
        if pkg.name in seen:
            raise ValueError(f"pins {pkg.name} twice (entries {seen[pkg.name]} and {i})")
        seen[pkg.name] = i
    return packages


class LockedDebian(_Entry):
    """One platform's Debian side."""

    suite: str
    mirror: str
    release: DebRelease
    base: list[DebPackage]
    apt: dict[str, AptStep] = {}

    @field_validator("base")
    @classmethod
    def _base(cls, v: list[DebPackage]) -> list[DebPackage]:
        if not v:
            raise ValueError("is empty; a base pins its packages (run `invoke lock` again)")
        return once_each(v)

    @field_validator("apt")
    @classmethod
    def _stages(cls, v: dict[str, AptStep]) -> dict[str, AptStep]:
        bad = next((k for k in v if not STAGE.fullmatch(k)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not a stage name")
        return v

    def arch_problem(self, platform: str) -> Optional[tuple[str, str]]:
        """(field, problem) where this Debian side is not one of `platform`'s: an unsupported platform, or a
        package of another architecture (found here, before any .deb is downloaded)."""
        if platform not in PLATFORMS:
            return "", f"{platform!r} is not a platform servebuild builds ({', '.join(PLATFORMS)})"
        allowed = ("all", arch_of(platform))
        entries = [(f"base.{i}", p) for i, p in enumerate(self.base)] + [
            (f"apt.{stage}.packages.{i}", p)
            for stage, step in sorted(self.apt.items())
            for i, p in enumerate(step.packages)
        ]
        for where, pkg in entries:
            if pkg.arch not in allowed:
                return f".{where}.arch", f"{pkg.name} is pinned for {pkg.arch}, not {platform} ({' or '.join(allowed)})"
        return None

    @field_validator("suite")
    @classmethod
    def _suite(cls, v: str) -> str:
        if not SUITE.fullmatch(v):
            raise ValueError(f"{v!r} is not a Debian suite name")
        return v

    @field_validator("mirror")
    @classmethod
    def _mirror(cls, v: str) -> str:  # the .debs are fetched from it: http(s) only, never file:// or a path
        if not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?", v):
            raise ValueError(f"{v!r} is not an http(s) mirror URL")
        return v

    def apt_specs(self) -> dict[str, list[str]]:
        """stage -> `name:arch=version` of each package its apt step installs."""
        return {stage: [p.spec for p in step.packages] for stage, step in sorted(self.apt.items())}

    def base_key(self) -> str:
        """What a rootfs made from these pins is a function of (its cache key and its image label)."""
        data = {
            "suite": self.suite,
            "release": self.release.model_dump(),
            "normalise": rootfs.NORMALISE_VERSION,
            "base": [p.model_dump() for p in self.base],
        }
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()


class AptView:
    """The host's apt pointed at one suite and architecture of a mirror, in a directory of its own."""

    def __init__(self, work: Path, mirror: str, suite: str, arch: str):
        self.work, self.mirror, self.suite, self.arch = work, mirror, suite, arch
        for sub in (
            "state/lists/partial",
            "cache/archives/partial",
            "etc/apt.conf.d",
            "etc/preferences.d",
            "etc/sources.list.d",
        ):
            (work / sub).mkdir(parents=True, exist_ok=True)
        self.status = work / "status"
        atomic_write(self.status, "")  # under build/: never through a planted link
        atomic_write(work / "etc/sources.list", f"deb {mirror} {suite} main\n")
        w = str(work)
        self.config = work / "apt.conf"
        atomic_write(
            self.config,
            "\n".join(
                [
                    f'Dir::State "{w}/state";',
                    f'Dir::State::status "{self.status}";',
                    f'Dir::Cache "{w}/cache";',
                    f'Dir::Etc::SourceList "{w}/etc/sources.list";',
                    f'Dir::Etc::SourceParts "{w}/etc/sources.list.d";',
                    f'Dir::Etc::Preferences "{w}/etc/preferences";',
                    f'Dir::Etc::PreferencesParts "{w}/etc/preferences.d";',
                    f'Dir::Etc::Parts "{w}/etc/apt.conf.d";',
                    f'APT::Architecture "{arch}";',
                    f'APT::Architectures "{arch}";',
                    'Acquire::Languages "none";',
                    f'Acquire::http::Timeout "{mirror_reads.IDLE_S:g}";',  # silence, as the .debs' reads
                    f'Acquire::https::Timeout "{mirror_reads.IDLE_S:g}";',
                    "",
                ]
            ),
        )

    def run(self, args: list[str]) -> str:
        cmd = [args[0], "-q", *args[1:]]
        seconds = mirror_reads.request_seconds()  # one apt run reads the mirror like one request: its deadline
        try:
            proc = procs.run(
                cmd,
                "lock",
                capture_output=True,
                text=True,
                env=dict(os.environ, APT_CONFIG=str(self.config), LC_ALL="C"),
                timeout=seconds,
            )
        except subprocess.TimeoutExpired:
            raise HostError(
                f"`{' '.join(shlex.quote(a) for a in args[:2])}` against {self.mirror} {self.suite} {self.arch} "
                f"did not finish within {seconds:g} s",
                hint="the mirror is stalled or trickling; raise SERVEBUILD_MIRROR_TIMEOUT or use another mirror",
                field="lock",
            ) from None
        if proc.returncode != 0:
            raise ToolError(
                f"`{' '.join(shlex.quote(a) for a in args[:4])} ...` against {self.mirror} {self.suite} "
                f"{self.arch} failed: {procs.last_line(proc)}",
                field="lock",
            )
        return proc.stdout

    def update(self) -> DebRelease:
        """apt-get update (the InRelease signature checked by the host's apt), then the Release read back."""
        print(f"reading {self.mirror} {self.suite} {self.arch} (apt-get update)", file=sys.stderr, flush=True)
        self.run(["apt-get", "update"])
        found = sorted((self.work / "state/lists").glob(f"*_dists_{self.suite}_InRelease"))
        if not found:
            raise HostError(f"{self.mirror} gave no signed InRelease for {self.suite}", field="lock")
        return release_of(found[0].read_bytes(), str(found[0]))

    def simulate(self, packages: list[str]) -> list[tuple[str, str, str]]:
        """(name, version, arch) of what `apt-get install --no-install-recommends PACKAGES` would install."""
        out = self.run(["apt-get", "-s", "-o", "Debug::NoLocking=1", "install", "--no-install-recommends", *packages])
        return sorted(m.groups() for m in map(INST.match, out.splitlines()) if m)

    def stanzas(self, wanted: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], Deb822]:
        """The Packages index's paragraph of each (name, version, arch)."""
        if not wanted:
            return {}
        out = self.run(["apt-cache", "show", *sorted({f"{n}={v}" for n, v, _ in wanted})])
        found = {}
        for para in Deb822.iter_paragraphs(out.splitlines(keepends=True)):
            key = (para.get("Package"), para.get("Version"), para.get("Architecture"))
            if key in set(wanted) and key not in found:
                found[key] = para
        missing = [w for w in wanted if w not in found]
        if missing:
            n, v, a = missing[0]
            raise HostError(
                f"{self.mirror} {self.suite} does not list {n}={v} ({a}) (the mirror changed while "
                f"locking?); run `invoke lock` again",
                field="lock",
            )
        return found

    def pins(self, wanted: list[tuple[str, str, str]]) -> list[DebPackage]:
        """Each (name, version, arch) as the Packages index describes it (sha256, size, pool path)."""
        return pins_of(self.stanzas(wanted), f"{self.mirror} {self.suite}")

    def install_as_status(self, found: dict[tuple[str, str, str], Deb822]) -> None:
        """Make these index paragraphs the installed set apt resolves against (each marked installed)."""
        paras = []
        for key in sorted(found):
            para = Deb822(found[key])
            para["Status"] = "install ok installed"
            paras.append(para.dump().rstrip("\n") + "\n")
        atomic_write(self.status, "\n".join(paras))


def pins_of(found: dict[tuple[str, str, str], Deb822], where: str = "the mirror") -> list[DebPackage]:
    """Each Packages paragraph as a pin, through DebPackage's grammar: a paragraph that is not one is refused
    in one line naming the package and field, as a lock's would be."""
    out = []
    for k in sorted(found):
        para = found[k]
        try:
            size = para.get("Size", "")
            out.append(
                DebPackage(
                    name=k[0],
                    version=k[1],
                    arch=k[2],
                    sha256=para.get("SHA256", ""),
                    size=int(size) if re.fullmatch(r"[0-9]{1,12}", size) else -1,
                    filename=para.get("Filename", ""),
                )
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(map(str, err["loc"])) or "paragraph"
            raise HostError(
                f"{where} lists {k[0]!r} with a bad {field}: {err['msg'].removeprefix('Value error, ')}", field="lock"
            ) from None
    return out


def check_platforms(debian: dict[str, LockedDebian], file: str) -> None:
    """Each platform of a lock's Debian side is one servebuild builds, and every package it pins is of that
    platform's architecture (or of none): one line naming the lock file and field, exit 2."""
    for platform, pins in sorted(debian.items()):
        problem = pins.arch_problem(platform)
        if problem is not None:
            raise InputError(
                f"malformed lock: {problem[1]}",
                hint="run `invoke lock` again",
                file=file,
                field=f"debian.{platform}{problem[0]}",
            )


def minbase(suite: str, arch: str) -> list[str]:
    """What mmdebstrap's minbase variant installs, as apt patterns: the suite's Essential: yes and
    Priority: required packages of the architecture, and apt."""
    narrow = f"?narrow(?or(?archive(^{suite}$),?codename(^{suite}$)),?architecture({arch}),"
    return [narrow + "?essential)", narrow + "?priority(required))", "apt"]


def release_of(data: bytes, where: str) -> DebRelease:
    """The Release's Date (held to RELEASE_DATE, so nothing of the mirror's can end a line) and sha256."""
    text = data.decode(errors="replace")
    match = re.search(r"^Date: ([^\n]*)$", text, re.M)
    if match is None:
        raise HostError(f"{where} has no Date", field="lock")
    date = match.group(1).strip(" ")
    if not RELEASE_DATE.fullmatch(date):
        raise HostError(f"{where} has a Date that is not one: {date[:80]!r}", field="lock")
    try:
        return DebRelease(
            date=date,
            epoch=int(email.utils.parsedate_to_datetime(date).timestamp()),
            sha256=hashlib.sha256(data).hexdigest(),
        )
    except (ValidationError, ValueError, OverflowError) as exc:
        problem = exc.errors()[0]["msg"].removeprefix("Value error, ") if isinstance(exc, ValidationError) else exc
        raise HostError(f"{where} has a Date servebuild cannot pin: {problem}", field="lock") from None


def resolve(
    suite: str,
    arch: str,
    steps: dict[str, list[str]],
    work: Path,
    mirror: str = DEFAULT_MIRROR,
    not_before: Optional[DebRelease] = None,
) -> LockedDebian:
    """Lock one platform with the host's apt (no root, no emulation): the Release, the base (mmdebstrap's
    minbase set, resolved on an empty system) and each apt step (resolved against the base)."""
    view = AptView(work / "apt", mirror, suite, arch)
    release = view.update()
    check_not_older(release, not_before, f"{mirror} {suite}")
    found = view.stanzas(view.simulate(minbase(suite, arch)))  # one apt-cache show for the base
    base = pins_of(found, f"{mirror} {suite}")
    view.install_as_status(found)
    apt = {
        stage: AptStep(requested=sorted(pkgs), packages=view.pins(view.simulate(sorted(pkgs))))
        for stage, pkgs in sorted(steps.items())
    }
    try:
        pins = LockedDebian(suite=suite, mirror=mirror, release=release, base=base, apt=apt)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise HostError(
            f"{mirror} {suite} {arch} resolves to no lockable set: {'.'.join(map(str, err['loc']))} "
            f"{err['msg'].removeprefix('Value error, ')}",
            field="lock",
        ) from None
    problem = pins.arch_problem(f"linux/{arch}")
    if problem is not None:
        raise HostError(f"{mirror} {suite} {arch}: {problem[1]}", field="lock")
    return pins


def bootstrapped_suite(recipe) -> Optional[str]:
    """The Debian suite of the recipe's bootstrapped bases (servebuild/debian:SUITE-{arch}), if it has any."""
    for stage in ("runtime", "build"):
        ref = getattr(recipe.bases, stage).ref
        if ref.startswith("servebuild/debian:"):
            return ref.split(":", 1)[1].split("-", 1)[0]
    return None


def lock_platforms(
    recipe, steps: dict[str, list[str]], work: Path, old: dict[str, LockedDebian], unresolved: list[str]
) -> dict[str, LockedDebian]:
    """platform -> its Debian side, for a recipe on bootstrapped bases; an unreachable mirror or a missing
    tool leaves the platform unresolved, in one line."""
    suite = bootstrapped_suite(recipe)
    out = {}
    if suite is None:
        return out
    for platform in sorted(recipe.platforms):
        arch = platform.split("/", 1)[1]
        prior = old.get(platform)
        try:
            out[platform] = resolve(
                suite,
                arch,
                steps,
                work / platform.replace("/", "-"),
                not_before=prior.release if prior and prior.suite == suite else None,
            )
        except (HostError, ToolError) as exc:
            unresolved.append(f"debian.{platform}: {exc.problem}")
    return out


def check_not_older(release: DebRelease, locked: Optional[DebRelease], where: str) -> None:
    """A mirror whose Release is older than the one a lock was made from serves a rolled-back archive."""
    if locked is not None and release.epoch < locked.epoch:
        raise Refused(
            f"{where} serves a Release dated {release.date}, older than the lock's {locked.date} "
            f"(a stale or rolled-back mirror)",
            hint="use a current mirror",
            field="debian.release",
        )


def live_release(mirror: str, suite: str, arch: str) -> DebRelease:
    with tempfile.TemporaryDirectory(prefix="servebuild-apt.") as tmp:
        return AptView(Path(tmp), mirror, suite, arch).update()


def check_against(lock_debian: LockedDebian, steps: dict[str, list[str]], file: str) -> None:
    """The lock's apt steps name the packages this servebuild renders for them (else the lock is stale)."""
    for stage, pkgs in sorted(steps.items()):
        step = lock_debian.apt.get(stage)
        if step is None or step.requested != sorted(pkgs):
            raise IntegrityError(
                f"lock is stale: the {stage} apt step installs {' '.join(sorted(pkgs))}, the lock "
                f"resolved {' '.join(step.requested) if step else 'nothing'} for it",
                hint="run `invoke lock` again",
                file=file,
                field=f"debian.apt.{stage}",
            )
