"""Hashed requirement sets: every package pinned with `==` and at least one sha256."""

from __future__ import annotations

import re
from pathlib import Path

from servebuild.errors import RecipeError
from servebuild.fsutil import read_input_text

# the version is PEP 440 characters only: it reaches paths and ENV lines (CUDA_HOME from the nvcc pin)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]*\])?==([A-Za-z0-9.+!*_-]+)(?=\s|$)")


def logical_lines(text: str) -> list[str]:
    """Join backslash continuations and drop comments and blank lines."""
    return [line for _, line in numbered_lines(text)]


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line, logical line) for each requirement: continuations joined, comments and
    blank lines dropped."""
    out, current, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not current.strip():
            start = number
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append((start, " ".join(current.split())))
        current = ""
    if current.strip():
        out.append((start, " ".join(current.split())))
    return out


def read_set(path: Path, file: str | None = None) -> str:
    """A hashed requirement set's text, through the bounded reader (4 MiB, 200,000 lines)."""
    return read_input_text(path, "requirements", file or str(path))


def _pins(path: Path, file: str | None = None) -> list[tuple[int, re.Match, str]]:
    """(line, match, logical line) of each pinned requirement; a name pinned twice (in any PEP 503
    spelling) is refused, naming the file, the line and the package."""
    out, seen = [], {}
    for number, line in numbered_lines(read_set(path, file)):
        m = PIN.match(line)
        if m:
            problem = _twice(seen, m.group(1), number)
            if problem:
                raise RecipeError(problem, file=file or str(path), line=number)
            out.append((number, m, line))
    return out


def _twice(seen: dict[str, tuple[int, str]], name: str, number: int) -> str | None:
    """One line if `name` (normalized) was pinned before; else remember it."""
    key = normalize(name)
    if key in seen:
        first, spelled = seen[key]
        as_ = f" as {spelled}" if spelled != name else ""
        return (
            f"line {number}: {key} is pinned twice (first on line {first}{as_}); pip would accept either pin's hashes"
        )
    seen[key] = (number, name)
    return None


def parse_pins(path: Path) -> dict[str, str]:
    """Return {normalized name: version} of a hashed requirement set."""
    return {normalize(m.group(1)): m.group(3) for _, m, _ in _pins(path)}


def parse_hashes(path: Path) -> dict[str, tuple[str, list[str]]]:
    """Return {normalized name: (version, [sha256, ...])} of a hashed requirement set."""
    return {
        normalize(m.group(1)): (m.group(3), re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
        for _, m, line in _pins(path)
    }


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_hashed_requirements(path: Path, file: str | None = None) -> str | None:
    """None when every requirement is pinned once and hashed, else the first problem in one line
    (a file over its limit, a FIFO or a device is refused by the reader)."""
    lines = numbered_lines(read_set(path, file))
    if not lines:
        return "no requirements in file"
    seen: dict[str, tuple[int, str]] = {}
    for number, line in lines:
        if line.startswith("-"):
            return f"options are not allowed in a hashed requirement set: {line.split()[0]}"
        m = PIN.match(line)
        if not m:
            return f"requirement {line.split()[0]!r} is not pinned with =="
        if not re.search(r"--hash=sha256:[0-9a-f]{64}", line):
            return f"requirement {m.group(1)}=={m.group(3)} has no --hash=sha256"
        problem = _twice(seen, m.group(1), number)
        if problem:
            return problem
    return None


# CUDA compiler-side wheels: what cuda-toolkit 13.0.2 pins for its compiler-side extras (nvcc,
# crt, nvvm, cccl, cudart, nvrtc, nvjitlink, nvptxcompiler, nvfatbin, cuxxfilt: all 13.0.x) and the
# meta-package itself. `-cuNN` variants (nvidia-cuda-nvcc-cu12, ...) are the same wheels. Not here:
# nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump, inspection tools outside cuda-toolkit 13.0.2's
# extras that produce no code (nvidia-cutlass-dsl 4.6.0, pinned by sglang 0.5.16, requires
# nvidia-cuda-nvdisasm>=13.3,<14, so a 13.0 disassembler cannot be had).
CUDA_COMPILER_WHEELS = (
    "cuda-toolkit",
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-nvvm",
    "nvidia-cuda-cccl",
    "nvidia-cuda-runtime",
    "nvidia-cuda-nvrtc",
    "nvidia-nvjitlink",
    "nvidia-nvptxcompiler",
    "nvidia-nvfatbin",
    "nvidia-cuda-cuxxfilt",
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
        return (
            f"CUDA compiler wheels outside CUDA {cuda}.x: {', '.join(bad)} "
            f"(constrain them to =={cuda}.* or through cuda-toolkit[...]=={cuda}.*)"
        )
    return None
