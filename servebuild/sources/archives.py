"""Archives: the deterministic source tarball a build context carries, and release artifacts
(wheels, sdists) unpacked into a source tree."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

from servebuild.errors import IntegrityError
from servebuild.fsutil import atomic_write, sha256_bytes, sha256_file
from servebuild.sources.gitmirror import git

TAR_MTIME = 946684800  # 2000-01-01: fixed, and late enough for zip-based wheel builds


def write_tarball(tree: Path, env: dict, out_dir: Path) -> tuple[Path, str]:
    """Sorted entries, owner 0, fixed mtime, no compression: the same bytes on every machine."""
    listing = git("ls-files", "-s", "-z", cwd=tree, env=env).stdout.split(b"\0")
    entries = []
    for raw in listing:
        if not raw:
            continue
        meta, name = raw.split(b"\t", 1)
        mode = meta.split()[0].decode()
        entries.append((name.decode(), mode))
    entries.sort()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for name, mode in entries:
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    tar.addfile(_info(f"src/{d}", tarfile.DIRTYPE, 0o755))
            path = tree / name
            if mode == "120000":
                info = _info(f"src/{name}", tarfile.SYMTYPE, 0o777)
                info.linkname = os.readlink(path)
                tar.addfile(info)
            elif mode == "160000":
                continue  # submodule: not part of the pinned tree
            else:
                data = path.read_bytes()
                info = _info(f"src/{name}", tarfile.REGTYPE, 0o755 if mode == "100755" else 0o644)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    digest = sha256_bytes(blob)
    final = out_dir / f"{digest}.tar"
    if not final.exists() or sha256_file(final) != digest:  # absent, or damaged since
        atomic_write(final, blob)
    return final, digest


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = TAR_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def unpack_release(path: Path, kind: str, prefix: str, tree: Path) -> set[str]:
    """Unpack a wheel (its packages, not its .dist-info) or an sdist (its top directory stripped)
    under `prefix` of `tree`; return the tree paths it holds."""
    names: set[str] = set()

    def place(rel: str, data: bytes, mode: int) -> None:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise IntegrityError(f"{path.name} holds an unsafe path {rel!r}", field="engine")
        target = tree / prefix / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if mode & 0o111 else 0o644)
        names.add(prefix + rel)

    if kind == "wheel":
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                top = info.filename.split("/", 1)[0]
                if info.is_dir() or top.endswith((".dist-info", ".data")):
                    continue
                place(info.filename, zf.read(info), info.external_attr >> 16)
    else:
        with tarfile.open(path) as tf:
            for member in tf.getmembers():
                if not member.isfile() or "/" not in member.name:
                    continue
                place(member.name.split("/", 1)[1], tf.extractfile(member).read(), member.mode)
    return names
