"""How a throwaway container of an image is run for a measurement (bisect rows, warm): GPUs, network,
environment, shared memory and volumes, each checked before anything builds or starts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from servebuild.build.docker import DockerClient
from servebuild.check.smoke import has_nvidia_runtime
from servebuild.errors import InputError
from servebuild.recipe.grammar import shown

GPUS = re.compile(
    r"\A(all|none|auto|[0-9]{1,3}(,[0-9]{1,3}){0,63}|GPU-[0-9a-fA-F-]{8,64}(,GPU-[0-9a-fA-F-]{8,64}){0,63})\Z"
)
NETWORK = re.compile(r"\A[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}\Z")  # none, bridge, host, or a network's name
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
SHM_SIZE = re.compile(r"\A[1-9][0-9]{0,12}[bkmgBKMG]?\Z")  # docker's grammar: 32g, 1024m, 67108864

VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")  # docker's grammar for a named volume
VOLUME_OPTIONS = {
    "ro",
    "rw",
    "z",
    "Z",
    "shared",
    "slave",
    "private",
    "rshared",
    "rslave",
    "rprivate",
    "nocopy",
    "consistent",
    "cached",
    "delegated",
}


def check_network(network: str) -> str:
    """A docker network as `docker run --network` takes it (none, bridge, host or a network's name): the
    one grammar of every command's --network (warm, bisect)."""
    if not NETWORK.match(network):
        raise InputError(
            f"{shown(network)} is not a docker network name (none, bridge, host or a network's name)", field="--network"
        )
    return network


def check_volume(volume: str) -> None:
    """SRC:DST[:OPTIONS] as docker reads it, checked before anything builds: SRC an existing absolute
    path or a volume name (a relative path would be taken as neither), DST absolute. A long value is
    cut in the message (a 5,000-character spec is not echoed)."""
    spec = shown(volume)
    if any(c in volume for c in "\n\r\x00"):
        raise InputError(f"{spec}: a volume spec holds a line break or NUL", field="--volume")
    parts = volume.split(":")
    if volume.startswith("-") or len(parts) not in (2, 3):
        raise InputError(f"{spec} is not SRC:DST[:OPTIONS]", field="--volume")
    src, dst = parts[0], parts[1]
    if src.startswith("/"):
        try:
            exists = Path(src).exists()
        except OSError as exc:  # ENAMETOOLONG and the like: the option's fault, not the host's
            raise InputError(f"{spec}: SRC cannot be checked: {exc.strerror or exc}", field="--volume") from None
        if not exists:
            raise InputError(f"{spec}: {shown(src)} does not exist", field="--volume")
    elif not VOLUME_NAME.fullmatch(src):
        raise InputError(f"{spec}: SRC must be an absolute path or a volume name", field="--volume")
    if not dst.startswith("/") or dst == "/":
        raise InputError(f"{spec}: DST must be an absolute path in the container (not /)", field="--volume")
    if len(parts) == 3 and not set(parts[2].split(",")) <= VOLUME_OPTIONS:
        raise InputError(
            f"{spec}: unknown volume option in {shown(parts[2])} (one of {', '.join(sorted(VOLUME_OPTIONS))})",
            field="--volume",
        )


def check_gpus(gpus: str, allow_auto: bool = True) -> str:
    if not GPUS.match(gpus) or (gpus == "auto" and not allow_auto):
        raise InputError(
            f"{gpus!r} is not all, none{', auto' if allow_auto else ''} or a GPU list such as 0,1 "
            f"(indexes or GPU-UUIDs)",
            field="--gpus",
        )
    devices = gpus.split(",")
    if len(set(devices)) != len(devices):
        raise InputError(f"{gpus!r} names a GPU twice", field="--gpus")
    return gpus


SHM_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
SHM_MAX = 4 << 40  # 4 TiB: more than any host's memory, so a larger value is a typo


def check_env(pairs) -> tuple[tuple[str, str], ...]:
    """--env K=V (repeatable): a shell-safe name and a value without line breaks."""
    out = []
    for pair in pairs or ():
        name, eq, value = str(pair).partition("=")
        if not eq or not ENV_NAME.match(name):
            raise InputError(
                f"{pair!r} is not NAME=VALUE (NAME: letters, digits, '_', not first a digit)", field="--env"
            )
        if any(c in value for c in "\n\r\x00"):
            raise InputError(f"--env {name}: the value holds a line break or NUL", field="--env")
        out.append((name, value))
    return tuple(out)


@dataclass(frozen=True)
class RunOptions:
    """The container's side of a measurement."""

    gpus: str = "auto"  # auto (all where the engine has the NVIDIA runtime), all, none, or devices
    network: str = "none"
    env: tuple[tuple[str, str], ...] = ()
    shm_size: str = ""
    volumes: tuple[str, ...] = ()

    def check(self) -> "RunOptions":
        check_gpus(self.gpus)
        check_network(self.network)
        if self.shm_size and not SHM_SIZE.match(self.shm_size):
            raise InputError(f"{self.shm_size!r} is not a size such as 32g or 1024m", field="--shm-size")
        if self.shm_size:
            digits, unit = self.shm_size.rstrip("bkmgBKMG"), self.shm_size[len(self.shm_size.rstrip("bkmgBKMG")) :]
            if int(digits) * SHM_UNITS[unit.lower()] > SHM_MAX:
                raise InputError(
                    f"{self.shm_size!r} is more shared memory than any host has (at most 4 TiB)", field="--shm-size"
                )
        for volume in self.volumes:
            check_volume(volume)
        return self

    def resolved_gpus(self, docker: DockerClient, purpose: str) -> str:
        """none or the GPUs given; auto: all where the engine has the NVIDIA runtime. GPUs asked for on an
        engine without it are one line (a run without them would measure something else)."""
        has_runtime = has_nvidia_runtime(docker)
        if self.gpus == "auto":
            return "all" if has_runtime else "none"
        if self.gpus != "none" and not has_runtime:
            where = f"engine {docker.endpoint.host}" if docker.endpoint else "the local Docker engine"
            raise InputError(
                f"--gpus {self.gpus}: {where} has no NVIDIA runtime (docker info lists "
                f"{', '.join(sorted(docker.info().get('Runtimes') or {})) or 'no runtime'}), so "
                f"{purpose} would run without a GPU; install the NVIDIA Container Toolkit there, "
                f"or pass --gpus none",
                field="--gpus",
            )
        return self.gpus

    def docker_args(self, gpus: str) -> list[str]:
        """`docker run` options for resolved GPUs (see resolved_gpus)."""
        args = ["--network", self.network]
        if gpus != "none":
            args += ["--gpus", "all" if gpus == "all" else f'"device={gpus}"']
        if self.shm_size:  # the seed's --shm-size 32g; else a GPU run shares the host's IPC (NCCL needs room)
            args += ["--shm-size", self.shm_size]
        elif gpus != "none":
            args += ["--ipc=host"]
        for name, value in self.env:
            args += ["-e", f"{name}={value}"]
        for volume in self.volumes:
            args += ["-v", volume]
        return args
