"""A Debian root file system as a function of its inputs: mmdebstrap with SOURCE_DATE_EPOCH set to the
suite's Release date, then one normalisation pass over its tarball so nothing of the host, the clock or
the run is left in it.

mmdebstrap was chosen by measurement (docs/explanation/reproducibility.md: Reproducible bases): with SOURCE_DATE_EPOCH it already
clamps mtimes, sets the shadow day and leaves no logs, `.deb`s or apt lists, and it bootstraps bookworm
amd64 in 13 s where debootstrap took 35 s and left ~950 clock mtimes, logs and 80 MB of downloads.
`normalise` still holds every rule itself, so a tool or maintainer script that slips one (a host's
/etc/hostname or resolv.conf, an ldconfig aux-cache, a log line, a clock mtime, the shadow day) is
put right, and the unit tests hold each rule.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Optional

from debian.deb822 import Deb822

from servebuild import procs
from servebuild.errors import ToolError

# what no base layer carries: logs with content, caches rebuilt on demand, downloads and indexes
DROPPED_PREFIXES = ("var/cache/apt/archives/", "var/lib/apt/lists/", "debootstrap/")
LOGS = "var/log/"  # its directories and empty files stay (programs expect them); a file with content goes
DROPPED_FILES = (
    "var/cache/apt/pkgcache.bin",
    "var/cache/apt/srcpkgcache.bin",
    "var/cache/ldconfig/aux-cache",
    "etc/machine-id",
    "var/lib/dbus/machine-id",
)
KEPT_UNDER_DROPPED = (
    "var/cache/apt/archives/partial/",
    "var/lib/apt/lists/partial/",
    "var/cache/apt/archives/lock",
    "var/lib/apt/lists/lock",
)
# files a container engine bind-mounts over at run time: empty in the base (BuildKit then needs no stubs,
# whose deletion would move /etc's mtime in every layer; and the host's own never reach the layer)
MOUNT_TARGETS = ("etc/hostname", "etc/hosts", "etc/resolv.conf")
SHADOW_FILES = ("etc/shadow", "etc/shadow-")
NORMALISE_VERSION = 1  # part of every rootfs cache key: a change of rules is a new rootfs


def mmdebstrap(
    suite: str,
    arch: str,
    out: Path,
    sources: list[str],
    epoch: int,
    log,
    include: list[str] = (),
    variant: str = "minbase",
) -> None:
    """Run mmdebstrap into the tarball `out` (root mode; arm64 on x86_64 through QEMU binfmt)."""
    cmd = [
        "mmdebstrap",
        f"--variant={variant}",
        "--mode=root",
        f"--architectures={arch}",
        "--format=tar",
        '--aptopt=Acquire::Languages "none";',
    ]
    if include:
        cmd.append("--include=" + ",".join(include))
    cmd += [suite, str(out), *sources]
    log.write("$ SOURCE_DATE_EPOCH=%d %s\n" % (epoch, " ".join(cmd)))
    log.flush()
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch), LC_ALL="C.UTF-8", TZ="UTC")
    proc = procs.run(cmd, "bootstrap-base", stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        raise ToolError(
            f"mmdebstrap {suite} {arch} failed (exit {proc.returncode}); see {log.name}", field="bootstrap-base"
        )


def _dropped(key: str, member: tarfile.TarInfo) -> bool:
    """Whether a member (`key`: its name, with a trailing / for a directory) stays out of the base."""
    if key in DROPPED_FILES or key == "debootstrap/":
        return True
    if key.startswith(LOGS) and not member.isdir() and (member.size > 0 or not member.isreg()):
        return True
    if any(key == k or key.startswith(k) for k in KEPT_UNDER_DROPPED):
        return False
    return any(key.startswith(p) and key != p for p in DROPPED_PREFIXES)


def _shadow_day(data: bytes, day: int) -> bytes:
    """Each entry's last-change day (field 3) set to `day` where it has one."""
    lines = []
    for line in data.decode().splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].strip():
            fields[2] = str(day)
        lines.append(":".join(fields))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def normalise(src: Path, dst: Path, epoch: int, sources_list: str) -> None:
    """Copy the tarball `src` to `dst` under the rules above: mtimes clamped to `epoch`, owner names
    dropped (ids kept), the mount targets empty, the shadow day the epoch's, /etc/apt/sources.list the
    canonical mirror line, no logs, caches or apt lists. Member order is kept (hard links follow targets)."""
    day = epoch // 86400
    with tarfile.open(src, "r:") as tin, tarfile.open(dst, "w:", format=tarfile.GNU_FORMAT) as tout:
        for member in tin:
            name = member.name.removeprefix("./").rstrip("/")
            key = name + "/" if member.isdir() else name
            if name and _dropped(key, member):
                continue
            member.mtime = min(int(member.mtime), epoch)
            member.uname = member.gname = ""
            member.pax_headers = {}
            data: Optional[bytes] = None
            if member.isreg():
                data = tin.extractfile(member).read()
                if name in MOUNT_TARGETS:
                    data = b""
                elif name in SHADOW_FILES:
                    data = _shadow_day(data, day)
                elif name == "etc/apt/sources.list":
                    data = sources_list.encode()
                member.size = len(data)
            tout.addfile(member, io.BytesIO(data) if data is not None else None)
        present = {m.name.removeprefix("./") for m in tout.getmembers()}
        for name in MOUNT_TARGETS:  # a tool that left one out: the engine would stub it at every RUN
            if name not in present:
                info = tarfile.TarInfo("./" + name)
                info.mtime, info.mode = epoch, 0o644
                tout.addfile(info, io.BytesIO(b""))


def installed(tarball: Path) -> list[tuple[str, str, str]]:
    """(name, version, arch) of every package the rootfs's dpkg status says is installed, sorted."""
    return installed_from_status(status_text(tarball))


def installed_from_status(text: str) -> list[tuple[str, str, str]]:
    out = []
    for para in Deb822.iter_paragraphs(text.splitlines(keepends=True)):
        if para.get("Status", "").endswith(" installed"):
            out.append((para["Package"], para["Version"], para["Architecture"]))
    return sorted(out)


def status_text(tarball: Path) -> str:
    """The rootfs's dpkg status file (what apt resolves an apt step against)."""
    with tarfile.open(tarball, "r:") as tar:
        for member in tar:
            if member.name.removeprefix("./") == "var/lib/dpkg/status":
                return tar.extractfile(member).read().decode()
    raise ToolError(f"{tarball} has no var/lib/dpkg/status", field="bootstrap-base")
