"""Platforms and architectures: the one place that knows how each tool names them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from servebuild.errors import InputError

PLATFORMS = ("linux/amd64", "linux/arm64")
MACHINE_TO_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
ARCH_TO_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
QEMU_BINFMT = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}


def docker_arch(machine: str) -> str:
    """`uname -m` (or the engine's Architecture) as Docker names it."""
    return MACHINE_TO_ARCH.get(machine, machine)


def host_arch() -> str:
    return docker_arch(os.uname().machine)


def host_platform() -> str:
    return f"linux/{host_arch()}"


def arch_of(platform: str) -> str:
    return platform.split("/", 1)[1]


def machine_of(platform: str) -> str:
    """linux/arm64 -> aarch64, as wheel tags and uname name it."""
    return ARCH_TO_MACHINE[arch_of(platform)]


def slug(platform: str) -> str:
    return platform.replace("/", "-")


def emulation_ready(platform: str) -> bool:
    entry = Path("/proc/sys/fs/binfmt_misc") / QEMU_BINFMT[arch_of(platform)]
    return entry.exists() and entry.read_text().startswith("enabled")


def platform_list(value: Optional[str], option: str = "--platform") -> list[Optional[str]]:
    """The one grammar of a --platform list (build, publish): known platforms, comma-separated, each
    once, no empty entry ("linux/arm64," is refused, not read as one); none given -> [None] (the
    caller's default)."""
    if not value:
        return [None]
    items = [p.strip() for p in value.split(",")]
    for p in items:
        if not p:
            raise InputError(f"{value!r} has an empty entry", field=option)
        if p not in PLATFORMS:
            raise InputError(f"unknown platform {p!r} (one of {', '.join(PLATFORMS)})", field=option)
        if items.count(p) > 1:
            raise InputError(f"{p} is given twice", field=option)
    return items
