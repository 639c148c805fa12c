"""Hashed requirement sets: every package pinned with `==` and at least one sha256."""

from __future__ import annotations

import re
from pathlib import Path

# the version is PEP 440 characters only: it reaches paths and ENV lines (CUDA_HOME from the nvcc pin)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]*\])?==([A-Za-z0-9.+!*_-]+)(?=\s|$)")


def logical_lines(text: str) -> list[str]:
    """Join backslash continuations and drop comments and blank lines."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(" ".join(current.split()))
        current = ""
    if current.strip():
        out.append(" ".join(current.split()))
    return out


def parse_pins(path: Path) -> dict[str, str]:
    """Return {normalized name: version} of a hashed requirement set."""
    pins = {}
    for line in logical_lines(path.read_text()):
        m = PIN.match(line)
        if m:
            pins[normalize(m.group(1))] = m.group(3)
    return pins


def parse_hashes(path: Path) -> dict[str, tuple[str, list[str]]]:
    """Return {normalized name: (version, [sha256, ...])} of a hashed requirement set."""
    out = {}
    for line in logical_lines(path.read_text()):
        m = PIN.match(line)
        if m:
            out[normalize(m.group(1))] = (m.group(3), re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return out


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_hashed_requirements(path: Path) -> str | None:
    """None when every requirement is pinned and hashed, else the first problem in one line."""
    try:
        lines = logical_lines(path.read_text())
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start})"
    if not lines:
        return "no requirements in file"
    for line in lines:
        if line.startswith("-"):
            return f"options are not allowed in a hashed requirement set: {line.split()[0]}"
        m = PIN.match(line)
        if not m:
            return f"requirement {line.split()[0]!r} is not pinned with =="
        if not re.search(r"--hash=sha256:[0-9a-f]{64}", line):
            return f"requirement {m.group(1)}=={m.group(3)} has no --hash=sha256"
    return None


# CUDA compiler-side wheels: what cuda-toolkit 13.0.2 pins for its compiler-side extras (nvcc,
# crt, nvvm, cccl, cudart, nvrtc, nvjitlink, nvptxcompiler, nvfatbin, cuxxfilt: all 13.0.x) and the
# meta-package itself. `-cuNN` variants (nvidia-cuda-nvcc-cu12, ...) are the same wheels. Not here:
# nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump, inspection tools outside cuda-toolkit 13.0.2's
# extras that produce no code (nvidia-cutlass-dsl 4.6.0, pinned by sglang 0.5.16, requires
# nvidia-cuda-nvdisasm>=13.3,<14, so a 13.0 disassembler cannot be had).
CUDA_COMPILER_WHEELS = (
    "cuda-toolkit", "nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl",
    "nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-nvptxcompiler",
    "nvidia-nvfatbin", "nvidia-cuda-cuxxfilt",
)


def cuda_compiler_problem(pins: dict[str, str], cuda: str = "13.0") -> str | None:
    """None when every CUDA compiler-side wheel in `pins` is CUDA `cuda`.x, else one line naming them."""
    bad = []
    for name, version in sorted(pins.items()):
        if re.sub(r"-cu\d+$", "", normalize(name)) not in CUDA_COMPILER_WHEELS:
            continue
        m = re.match(r"(?:\d+!)?(\d+)\.(\d+)", version)
        if not m or f"{m.group(1)}.{m.group(2)}" != cuda:
            bad.append(f"{name}=={version}")
    if bad:
        return (f"CUDA compiler wheels outside CUDA {cuda}.x: {', '.join(bad)} "
                f"(constrain them to =={cuda}.* or through cuda-toolkit[...]=={cuda}.*)")
    return None
