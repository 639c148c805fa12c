"""Base images without a registry: debootstrap a Debian rootfs and import it for amd64 or arm64."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from servebuild import procs
from servebuild.build.docker import BuildRequest, DockerClient
from servebuild.platforms import host_arch
from servebuild.errors import DockerError, InputError
from servebuild.fsutil import open_host_file

ARCHES = ("amd64", "arm64")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Files every RUN bind-mounts over. debootstrap leaves them out, and then BuildKit makes stubs for
# them during each RUN and deletes them after, which moves /etc's mtime in every layer that touches
# /etc: with empty files in the base, an apt layer's bytes are reproducible (render.LAYER_SETTLE).
MOUNT_TARGETS = ("etc/hosts", "etc/resolv.conf")
MOUNT_TARGETS_LABEL = "io.servebuild.base.mount-targets"  # on bases that carry them


def default_tag(suite: str, arch: str) -> str:
    return f"servebuild/debian:{suite}-{arch}"


def _run(cmd: list[str], log) -> None:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    proc = procs.run(cmd, "bootstrap-base", stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise DockerError(f"`{' '.join(cmd[:3])} ...` failed (exit {proc.returncode}); see {log.name}",
                          field="bootstrap-base")


def rootfs_tarball(arch: str, suite: str, cache_dir: Path, mirror: str = DEFAULT_MIRROR) -> Path:
    """debootstrap once per (suite, arch); later calls reuse the cached tarball."""
    if arch not in ARCHES:
        raise InputError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHES)}", field="--arch")
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,30}", suite):
        raise InputError(f"{suite!r} is not a Debian suite name such as bookworm", field="--suite")
    if shutil.which("debootstrap") is None:
        raise DockerError("debootstrap is not installed (apt-get install debootstrap)", field="bootstrap-base")
    # v2: the rootfs carries /etc/hosts and /etc/resolv.conf (see MOUNT_TARGETS)
    out = cache_dir / "rootfs" / f"{suite}-{arch}.v2.tar"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.with_suffix(".log")
    work = Path(tempfile.mkdtemp(prefix=f"rootfs-{suite}-{arch}.", dir=out.parent))
    try:
        with os.fdopen(open_host_file(log_path, "the debootstrap log"), "w") as log:  # no link, no FIFO
            print(f"debootstrap {suite} for {arch} (log: {log_path})", file=sys.stderr)
            if arch == host_arch():
                _run(["debootstrap", "--variant=minbase", f"--arch={arch}", suite, str(work), mirror], log)
            else:
                _run(["debootstrap", "--variant=minbase", f"--arch={arch}", "--foreign", suite, str(work),
                      mirror], log)
                _run(["chroot", str(work), "/debootstrap/debootstrap", "--second-stage"], log)
            for name in MOUNT_TARGETS:
                target = work / name
                if not target.exists():
                    target.touch()
            tmp = out.with_suffix(".tar.tmp")
            _run(["tar", "-C", str(work), "--sort=name", "--numeric-owner", "-cf", str(tmp), "."], log)
            tmp.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def bootstrap_base(docker: DockerClient, arch: str, suite: str, tag: str, cache_dir: Path,
                   mirror: str = DEFAULT_MIRROR) -> str:
    """Import the rootfs with a BuildKit `FROM scratch` build so the image records its real arch."""
    tarball = rootfs_tarball(arch, suite, cache_dir, mirror)
    context = Path(tempfile.mkdtemp(prefix="base-context."))
    try:
        if _same_fs(tarball, context):
            os.link(tarball, context / "rootfs.tar")
        else:
            shutil.copyfile(tarball, context / "rootfs.tar")
        (context / "Dockerfile").write_text('FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n')
        request = BuildRequest(context=context, platform=f"linux/{arch}", build_args={},
                               labels={"io.servebuild.base": f"debian-{suite}-minbase",
                                       MOUNT_TARGETS_LABEL: " ".join(MOUNT_TARGETS),
                                       "org.opencontainers.image.base.name": "scratch"},
                               secrets={})
        image_id = docker.build(request, cache_dir / "rootfs" / f"{suite}-{arch}.build.log", echo=None)
        docker.tag(image_id, tag)
        return image_id
    finally:
        shutil.rmtree(context, ignore_errors=True)


def has_mount_targets(info: dict) -> bool:
    """Whether an image (docker inspect output) is a base bootstrapped with MOUNT_TARGETS."""
    labels = (info.get("Config") or {}).get("Labels") or {}
    return labels.get(MOUNT_TARGETS_LABEL) == " ".join(MOUNT_TARGETS)


def _same_fs(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


def missing_bootstrappable(docker: DockerClient, loaded, arch: str) -> list[tuple[str, str]]:
    """(tag, suite) of each base of the recipe that `bootstrap-base` makes (servebuild/debian:SUITE-...)
    and the engine does not have yet, once each."""
    missing = []
    for stage in ("build", "runtime"):
        ref = getattr(loaded.recipe.bases, stage).ref.replace("{arch}", arch)
        if ref.startswith("servebuild/debian:") and docker.image_id(ref) is None:
            entry = (ref, ref.split(":", 1)[1].split("-", 1)[0])
            if entry not in missing:
                missing.append(entry)
    return missing


def local_ids(loaded) -> dict[str, Optional[str]]:
    """ref -> the local engine's image id of each base of the recipe (None where it has none): they pin
    bases no registry answers for (bootstrapped ones). No engine: none at all."""
    try:
        engine = DockerClient()
    except DockerError:
        return {}
    return {b.ref: engine.image_id(b.ref) for b in (loaded.recipe.bases.build, loaded.recipe.bases.runtime)}
