"""Base images without a registry: a Debian rootfs made from the packages a lock pins, imported for amd64
or arm64, the same bytes and the same image id on any machine and any day (while the mirror or the
artifact cache still has those packages).

The rootfs is mmdebstrap's, from a one-directory repository of the pinned `.deb`s (each checked against
the lock's sha256), with SOURCE_DATE_EPOCH the suite's Release date and one normalisation pass
(sources/rootfs.py); its cached tarball is keyed by everything it is made from (LockedDebian.base_key).
The image is a BuildKit `FROM scratch` + `ADD` build (it records the real arch), its config's `created`
and history set to the Release date, and a label carrying the key, so a base made from other pins is
recognised and made again.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from servebuild.build.docker import BuildRequest, DockerClient
from servebuild.build.imageconfig import settle_config
from servebuild.errors import DockerError, InputError, Refused
from servebuild.fsutil import make_dir, open_host_file
from servebuild.lock.debian import DEFAULT_MIRROR, SUITE, LockedDebian, bootstrapped_suite, resolve
from servebuild.lock.lockfile import debian_pins
from servebuild.plan.make import iso_time
from servebuild.sources import debs, rootfs

ARCHES = ("amd64", "arm64")
MOUNT_TARGETS = rootfs.MOUNT_TARGETS
KEY_LABEL = "io.servebuild.base.key"  # LockedDebian.base_key() of the pins the base was made from


def default_tag(suite: str, arch: str) -> str:
    return f"servebuild/debian:{suite}-{arch}"


def check_arch(arch: str) -> None:
    if arch not in ARCHES:
        raise InputError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHES)}", field="--arch")


def check_suite(suite: str) -> None:
    if not SUITE.fullmatch(suite):
        raise InputError(f"{suite!r} is not a Debian suite name such as bookworm", field="--suite")


def rootfs_tarball(
    pins: LockedDebian, arch: str, cache_dir: Path, recipe: str, lock_file: str, offline: bool = False
) -> Path:
    """The normalised rootfs tarball of `pins`, made once per key; later calls reuse the cached one."""
    check_arch(arch)
    check_suite(pins.suite)
    if shutil.which("mmdebstrap") is None:
        raise DockerError("mmdebstrap is not installed (apt-get install mmdebstrap)", field="bootstrap-base")
    out = cache_dir / "rootfs" / f"{pins.suite}-{arch}-{cache_key(pins)[:16]}.tar"
    if out.is_file() and not out.is_symlink():
        return out
    make_dir(out.parent, "the rootfs cache", under=cache_dir)  # no link planted in the cache followed
    files = debs.fetch_debs(pins.base, pins.mirror, cache_dir, recipe, lock_file, offline=offline)
    work = Path(tempfile.mkdtemp(prefix=f"rootfs-{pins.suite}-{arch}.", dir=out.parent))
    log_path = out.with_suffix(".log")
    try:
        repo = debs.flat_repo(
            pins.base, files, work / "repo", pins.suite, pins.release.date, lock_file, f"debian.linux/{arch}.base"
        )
        with os.fdopen(open_host_file(log_path, "the mmdebstrap log"), "w") as log:  # no link, no FIFO
            print(
                f"mmdebstrap {pins.suite} for {arch}: {len(pins.base)} pinned packages, Release of "
                f"{pins.release.date} (log: {log_path})",
                file=sys.stderr,
            )
            rootfs.mmdebstrap(
                pins.suite,
                arch,
                work / "raw.tar",
                [f"deb [trusted=yes] copy://{repo} ./"],
                pins.release.epoch,
                log,
                include=sorted({p.name for p in pins.base}),
            )
        tmp = work / "rootfs.tar"
        rootfs.normalise(work / "raw.tar", tmp, pins.release.epoch, sources_list(pins))
        got = rootfs.installed(tmp)
        want = sorted((p.name, p.version, p.arch) for p in pins.base)
        if got != want:
            extra = sorted(set(got) - set(want)) or sorted(set(want) - set(got))
            raise DockerError(
                f"the rootfs does not hold exactly the pinned packages (first difference: "
                f"{' '.join(extra[0]) if extra else '?'})",
                field="bootstrap-base",
            )
        tmp.replace(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def cache_key(pins: LockedDebian) -> str:
    """The rootfs cache's key: what the rootfs is made from (base_key, the image's label) and the mirror its
    .debs come from, so a lock pointed at another mirror asks that mirror (for what the artifact cache
    lacks) and is bounded by its limits, instead of taking a rootfs another mirror's reads made."""
    return hashlib.sha256(f"{pins.base_key()}\n{pins.mirror}".encode()).hexdigest()


def sources_list(pins: LockedDebian) -> str:
    """The base's /etc/apt/sources.list: Debian's mirror line whatever mirror served the .debs, so the base's
    bytes (and image id) are a function of the pins alone, never of the transport."""
    return f"deb {DEFAULT_MIRROR} {pins.suite} main\n"


def created_of(pins: LockedDebian) -> str:
    return iso_time(dt.datetime.fromtimestamp(pins.release.epoch, dt.timezone.utc))


def bootstrap_base(
    docker: DockerClient,
    pins: LockedDebian,
    arch: str,
    tag: str,
    cache_dir: Path,
    recipe: str,
    lock_file: str,
    offline: bool = False,
) -> str:
    """Import the rootfs with a BuildKit `FROM scratch` build so the image records its real arch; its
    config's times are the Release date, so the id is a function of the pins."""
    (cache_dir / "rootfs").mkdir(parents=True, exist_ok=True)
    with _one_at_a_time(cache_dir / "rootfs" / f"{pins.suite}-{arch}.lock"):
        return _bootstrap(docker, pins, arch, tag, cache_dir, recipe, lock_file, offline)


@contextmanager
def _one_at_a_time(path: Path):
    """An flock(2) held while a base is bootstrapped: two bootstraps of one suite and arch (two engines of one
    machine, two test runs) wait for each other instead of sharing one build log and image-id file."""
    fd = open_host_file(path, "the bootstrap lock", read=True, truncate=False, mode=0o644)  # no link followed
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _bootstrap(
    docker: DockerClient,
    pins: LockedDebian,
    arch: str,
    tag: str,
    cache_dir: Path,
    recipe: str,
    lock_file: str,
    offline: bool,
) -> str:
    tarball = rootfs_tarball(pins, arch, cache_dir, recipe, lock_file, offline=offline)
    context = Path(tempfile.mkdtemp(prefix="base-context."))
    try:
        if _same_fs(tarball, context):
            os.link(tarball, context / "rootfs.tar")
        else:
            shutil.copyfile(tarball, context / "rootfs.tar")
        (context / "Dockerfile").write_text('FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n')
        os.utime(context / "Dockerfile", (0, 0))
        request = BuildRequest(
            context=context,
            platform=f"linux/{arch}",
            build_args={},
            labels={
                "io.servebuild.base": f"debian-{pins.suite}-minbase",
                KEY_LABEL: pins.base_key(),
                "org.opencontainers.image.created": created_of(pins),
                "org.opencontainers.image.base.name": "scratch",
            },
            secrets={},
        )
        image_id = docker.build(request, cache_dir / "rootfs" / f"{pins.suite}-{arch}.build.log", echo=None)
        image_id = settle_config(docker, image_id, created_of(pins), None, f"linux/{arch}").image_id
        docker.tag(image_id, tag)
        return image_id
    finally:
        shutil.rmtree(context, ignore_errors=True)


def base_key(info: dict) -> Optional[str]:
    """The pins key an image (docker inspect output) was bootstrapped from, if it is such a base."""
    return ((info.get("Config") or {}).get("Labels") or {}).get(KEY_LABEL)


def _same_fs(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


def bootstrappable_refs(loaded, arch: str) -> list[tuple[str, str]]:
    """(tag, suite) of each base of the recipe that `bootstrap-base` makes (servebuild/debian:SUITE-ARCH), once each."""
    out = []
    for stage in ("build", "runtime"):
        ref = getattr(loaded.recipe.bases, stage).ref.replace("{arch}", arch)
        if ref.startswith("servebuild/debian:"):
            entry = (ref, ref.split(":", 1)[1].split("-", 1)[0])
            if entry not in out:
                out.append(entry)
    return out


def missing_bootstrappable(docker: DockerClient, loaded, arch: str, key: Optional[str]) -> list[tuple[str, str]]:
    """The bootstrappable bases the engine lacks, or holds made from other pins than `key` (when given)."""
    missing = []
    for ref, suite in bootstrappable_refs(loaded, arch):
        if docker.image_id(ref) is None or (key is not None and base_key(docker.image_inspect(ref)) != key):
            missing.append((ref, suite))
    return missing


def local_ids(loaded) -> dict[str, Optional[str]]:
    """ref -> the local engine's image id of each base of the recipe (None where it has none): they pin
    bases no registry answers for (bootstrapped ones). No engine: none at all."""
    try:
        engine = DockerClient()
    except DockerError:
        return {}
    return {b.ref: engine.image_id(b.ref) for b in (loaded.recipe.bases.build, loaded.recipe.bases.runtime)}


def pins_for(loaded, platform: str, suite: Optional[str] = None, offline: bool = False) -> LockedDebian:
    """The Debian packages a base for `platform` is made from: the recipe's current lock's, else (no lock,
    a stale one, another suite) those the mirror serves today, resolved now and said so on stderr."""
    suite = suite or bootstrapped_suite(loaded.recipe) or "bookworm"
    pins, pinned_by = debian_pins(loaded, platform)
    if pins is not None and pins.suite == suite:
        return pins
    if offline:
        raise Refused(
            f"{pinned_by} pins no Debian {suite} packages for {platform} and --offline forbids asking the mirror",
            hint=f"run `invoke lock --recipe {loaded.recipe.name}` where the mirror is reachable",
            field="--offline",
        )
    print(
        f"warning: {pinned_by} pins no Debian {suite} packages for {platform}: the base is made "
        f"from what the mirror serves today (run `invoke lock --recipe {loaded.recipe.name}` to pin it)",
        file=sys.stderr,
    )
    work = Path(tempfile.mkdtemp(prefix="servebuild-debian."))
    try:
        return resolve(suite, platform.split("/", 1)[1], {}, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
