"""File helpers used by every step: content hashes, canonical JSON, atomic writes, bounded readers."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from servebuild.errors import InputError, RecipeError


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
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:  # a full disk, a directory in the way, ^C: no temp file is left behind
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def write_json(path: Path, data) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


MAX_BYTES = 1 << 20  # configs, maps and recipes are a few kB


def read_small_text(path: Path, file: str) -> str:
    """A regular file of at most MAX_BYTES, as UTF-8 (no FIFO, device or huge file is read)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise RecipeError(f"cannot read: {exc.strerror}", file=file) from None
    if not stat.S_ISREG(st.st_mode):
        raise RecipeError("is not a regular file", file=file)
    if st.st_size > MAX_BYTES:
        raise RecipeError(f"is {st.st_size} bytes; at most {MAX_BYTES} are read", file=file)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"not UTF-8 text (byte {exc.start})", file=file) from None
    except OSError as exc:
        raise RecipeError(f"cannot read: {exc.strerror}", file=file) from None


def read_json_object(path: Path, what: str, limit: int = 16 << 20, error: type = InputError) -> dict:
    """A JSON file written by a build (a manifest, a verdict), checked: regular, at most `limit` bytes,
    UTF-8, an object. One line (of kind `error`) on any problem."""
    try:
        st = path.lstat()
    except OSError:
        raise error(f"no {what}", file=str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} is not a regular file", file=str(path))
    if st.st_size > limit:
        raise error(f"{what} is larger than {limit} bytes", file=str(path))
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not JSON ({exc.msg} at line {exc.lineno}); build again", file=str(path)) from None
    if not isinstance(data, dict):
        raise error(f"{what} is not a JSON object", file=str(path))
    return data
