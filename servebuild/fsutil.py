"""File helpers used by every step: content hashes, canonical JSON, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(data) -> str:
    """Sorted keys, no whitespace: the form every hash of structured data is taken over."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a sibling temp file, then rename: readers see the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if isinstance(data, str):
        data = data.encode()
    tmp.write_bytes(data)
    tmp.replace(path)


def write_json(path: Path, data) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
