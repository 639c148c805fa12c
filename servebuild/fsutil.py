"""File helpers used by every step: content hashes, canonical JSON, atomic writes, bounded readers."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path

from servebuild.errors import HostError, InputError, RecipeError


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


@contextmanager
def writing(path: Path, what: str):
    """Whatever writes under `path` inside the block: an OSError (a full or read-only file system, a
    file where a directory goes, no permission) becomes one HostError line
    "PATH: cannot write WHAT: ERRNO TEXT". A fault that names a file outside `path` is left to an
    enclosing `writing` (or the front door's net), so nested blocks each name their own path."""
    try:
        yield path
    except OSError as exc:
        named = Path(exc.filename) if isinstance(exc.filename, (str, Path)) else None
        if isinstance(exc, BrokenPipeError) or (named and not (_under(named, path) or _under(path, named))):
            raise
        raise host_fault(path, what, exc) from None


def make_dir(path: Path, what: str) -> Path:
    """`path` and its parents, made if missing; one HostError line if they cannot be."""
    with writing(path, what):
        path.mkdir(parents=True, exist_ok=True)
    return path


def host_fault(path: Path, what: str, exc: OSError) -> HostError:
    """The one line for an OSError met while writing `what` under `path`."""
    detail = exc.strerror or str(exc)
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = _not_a_directory(Path(exc.filename) if exc.filename else path)
        if blocker is not None:
            detail = f"{blocker} is a file, not a directory"
    return HostError(f"cannot write {what}: {detail}", file=str(path))


def _under(inner: Path, outer: Path) -> bool:
    inner, outer = Path(os.path.abspath(inner)), Path(os.path.abspath(outer))
    return inner == outer or outer in inner.parents


def _not_a_directory(path: Path):
    """The first of `path`'s parents (or `path`) that exists and is not a directory, top down."""
    for where in [*reversed(path.parents), path]:
        try:
            st = where.stat()
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return where
    return None


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
