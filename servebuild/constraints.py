"""Hashed requirement sets: every package pinned with `==` and at least one sha256."""

from __future__ import annotations

import re
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


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


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_hashed_requirements(path: Path) -> str | None:
    """None when every requirement is pinned and hashed, else the first problem in one line."""
    lines = logical_lines(path.read_text())
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
