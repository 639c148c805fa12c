"""File helpers used by every step: content hashes, canonical JSON, atomic writes, host files opened
without following links, bounded readers."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild.errors import HostError, InputError, RecipeError, _flat


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
    """Write to a sibling temp file, then rename: readers see the old file or the new one, never half.
    The temp file is made new (O_EXCL, no link followed): a link or FIFO planted at its predictable
    name is removed, never written through; a link planted at `path` itself is replaced, not followed."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if isinstance(data, str):
        data = data.encode()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # a new file: no link, no FIFO
    try:
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:  # a leftover of a killed write by this pid, or a planted link: removed, not followed
            tmp.unlink()
            fd = os.open(tmp, flags, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        tmp.replace(path)
    except BaseException:  # a full disk, a directory in the way, ^C: no temp file is left behind
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def write_json(path: Path, data, strict: bool = False) -> None:
    """`strict` (what a build writes into an image's context: spec.json, manifest.json): a NaN or infinity
    raises ValueError instead of writing a file no JSON parser must accept. Reports of measured figures
    (bench, bisect) keep Python's NaN, which their own readers take."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=not strict) + "\n")


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
        if isinstance(exc, BrokenPipeError) or (
            named and not (_under(named, path) or _under(path, named) or _atomic_temp_of(named, path))
        ):
            raise
        raise host_fault(path, what, exc) from None


def make_dir(path: Path, what: str, under: Optional[Path] = None) -> Path:
    """`path` and its parents, made if missing; one HostError line if they cannot be. `under`: the folder
    (build/, a cache, --out) below which no component may be a link (no_link_dir)."""
    if under is not None:
        return no_link_dir(path, what, under)
    with writing(path, what):
        path.mkdir(parents=True, exist_ok=True)
    return path


def no_link_dir(path: Path, what: str, under: Path) -> Path:
    """`path` and its parents below `under` made if missing, never through a link: each component below
    `under` is lstat'ed top down (made with mkdir where missing, then lstat'ed again), and a symbolic link,
    a file or anything else not a directory there is refused in one line naming it, before anything under
    it is made, emptied or written. `under` itself (build/, the cache, --out) is the user's to place."""
    with writing(path, what):
        under.mkdir(parents=True, exist_ok=True)
        where = under
        for part in path.relative_to(under).parts:
            where = where / part
            try:
                st = os.lstat(where)
            except FileNotFoundError:
                try:
                    os.mkdir(where)
                except FileExistsError:  # made meanwhile (another platform's build thread): checked below
                    pass
                st = os.lstat(where)
            if not stat.S_ISDIR(st.st_mode):
                kind = _not_regular(st.st_mode) or "a file"
                raise _refusal(where, what, kind, folder=True)
    return path


def no_link_below(path: Path, what: str, under: Path) -> Path:
    """`path`'s components below `under` that exist, lstat'ed top down: a link or a file where a folder goes
    is refused in one line naming it; nothing is made (the writer that follows makes what is missing)."""
    where = under
    for part in path.relative_to(under).parts:
        where = where / part
        try:
            st = os.lstat(where)
        except FileNotFoundError:
            break
        except OSError as exc:
            raise host_fault(where, what, exc) from None
        if not stat.S_ISDIR(st.st_mode):
            raise _refusal(where, what, _not_regular(st.st_mode) or "a file", folder=True)
    return path


def fresh_dir(path: Path, what: str, under: Path) -> Path:
    """`path` made new and empty (what was there removed), its parents below `under` made without a link:
    a link at `path` or above it is refused (the folder it points at is not emptied); shutil.rmtree does not
    follow a link inside the old folder."""
    no_link_dir(path.parent, what, under)
    with writing(path, what):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise _refusal(path, what, _not_regular(st.st_mode) or "a file", folder=True)
        if st is not None:
            shutil.rmtree(path)
        os.mkdir(path)
    return path


def refuse_link(path: Path, what: str) -> Path:
    """`path` where a file is about to be written: refused in one line if a link, FIFO, device or directory
    is there (a writer that replaces a file, as savefig does, would otherwise follow it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    kind = _not_regular(st.st_mode)
    if kind is not None:
        raise _refusal(path, what, kind)
    return path


def host_fault(path: Path, what: str, exc: OSError) -> HostError:
    """The one line for an OSError met while writing `what` under `path`."""
    detail = exc.strerror or str(exc)
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = _not_a_directory(Path(exc.filename) if exc.filename else path)
        if blocker is not None:
            detail = f"{blocker} is a file, not a directory"
    return HostError(f"cannot write {what}: {detail}", file=str(path))


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> Optional[str]:
    """What a file of `mode` is, where it is not a regular file ("a FIFO"); None for a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _refusal(path: Path, what: str, kind: str, folder: bool = False) -> HostError:
    if kind == "a symbolic link":
        target = _flat(os.readlink(path)) if os.path.islink(path) else "?"  # its bytes are anyone's: escaped
        return HostError(
            f"cannot write {what}: it is a symbolic link (to {target}); servebuild writes no file through a link",
            hint="remove the link",
            file=str(path),
        )
    expected = "a directory" if folder else "a regular file"
    return HostError(f"cannot write {what}: it is {kind}, not {expected}", hint="remove it", file=str(path))


def open_host_file(
    path: Path,
    what: str,
    *,
    read: bool = False,
    truncate: bool = True,
    append: bool = False,
    exclusive: bool = False,
    mode: int = 0o666,
) -> int:
    """A file descriptor for writing `what` at `path` on the host (the build lock, the build log):
    made if missing (with `mode`, less the umask, as open() does), opened blocking. Never through a
    symbolic link at the last component (O_NOFOLLOW), never a FIFO, device, socket or directory: the
    file is opened non-blocking (a FIFO would block the open), fstat'ed, and refused unless it is
    regular; only then truncated (`truncate`) and made blocking again. Every refusal and OSError is
    one HostError line naming `path` and `what`. `read`: read-write; `append`: O_APPEND, no
    truncation; `exclusive`: O_EXCL (the file must not exist yet). The caller closes the fd."""
    flags = (
        (os.O_RDWR if read else os.O_WRONLY)
        | os.O_CREAT
        | os.O_NOFOLLOW
        | os.O_NONBLOCK
        | os.O_NOCTTY
        | os.O_CLOEXEC
        | (os.O_APPEND if append else 0)
        | (os.O_EXCL if exclusive else 0)
    )
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:  # ELOOP (a link), ENXIO (a FIFO with no reader, a socket), EISDIR: say what is there
        try:
            kind = _not_regular(os.lstat(path).st_mode)
        except OSError:
            kind = None
        if kind is not None and not (exclusive and exc.errno == errno.EEXIST):
            raise _refusal(path, what, kind) from None
        raise host_fault(path, what, exc) from None
    try:
        st = os.fstat(fd)
        kind = _not_regular(st.st_mode)
        if kind is not None:
            raise _refusal(path, what, kind)
        if truncate and not append and not exclusive:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise host_fault(path, what, exc) from None
        raise
    return fd


def _atomic_temp_of(named: Path, path: Path) -> bool:
    """`named` is the temp file atomic_write writes `path` through (.NAME.tmpPID, its sibling)."""
    named, path = Path(os.path.abspath(named)), Path(os.path.abspath(path))
    return named.parent == path.parent and named.name.startswith(f".{path.name}.tmp")


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


@dataclass(frozen=True)
class Limit:
    """What one kind of input file may be: at most `max_bytes` (and `max_lines`, where counted);
    `read` False: only its type and size are checked (a wheel is hashed and copied, never read whole)."""

    what: str
    max_bytes: int
    max_lines: Optional[int] = None
    read: bool = True


# every input file servebuild reads from the user or the project, by kind (docs/reference/input-limits.md: "Input limits")
LIMITS = {
    "yaml": Limit("a YAML input file", 1 << 20, 20_000),
    "recording": Limit("an AOT recording", 1 << 20, 20_000),
    "patch": Limit("a local patch", 8 << 20, 200_000),
    "requirements": Limit("a hashed requirement set", 4 << 20, 200_000),
    "artifact": Limit("a wheel or sdist", 4 << 30, read=False),
    "private-key": Limit("a PEM private key", 64 << 10),
    "public-key": Limit("a PEM public key", 64 << 10),
    "credentials": Limit("a credentials file", 64 << 10),
    "docker-config": Limit("a Docker config", 1 << 20),
    "tls": Limit("a TLS or ssh_config file", 1 << 20),
    "secret": Limit("a build secret", 4 << 20, read=False),
}
MAX_BYTES = LIMITS["yaml"].max_bytes  # configs, maps and recipes are a few kB


def human(n: int) -> str:
    """1048576 -> '1 MiB' (the limits are whole KiB, MiB or GiB)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def check_input(
    path: Path, kind: str, file: Optional[str] = None, *, field: Optional[str] = None, error: type = RecipeError
) -> os.stat_result:
    """A regular file within the size limit of `kind`, by stat alone: a FIFO, device or directory is
    refused before it is opened (opening a FIFO blocks), a huge file before a byte is read."""
    limit, place = LIMITS[kind], {"file": file or str(path), "field": field}
    try:
        st = path.stat()
    except OSError as exc:
        raise error(f"cannot read {limit.what}: {(exc.strerror or 'error').lower()}", **place) from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"is not a regular file ({limit.what})", **place)
    _check_size(st.st_size, limit, error, place)
    return st


def _check_size(size: int, limit: Limit, error: type, place: dict) -> None:
    if size > limit.max_bytes:
        raise error(
            f"is {size} bytes; at most {limit.max_bytes} are read ({human(limit.max_bytes)}, {limit.what})", **place
        )


def read_input_stat(
    path: Path, kind: str, file: Optional[str] = None, *, field: Optional[str] = None, error: type = RecipeError
) -> tuple[bytes, os.stat_result]:
    """The bytes of an input file of `kind`, checked against its limits, and its stat. Opened
    non-blocking and checked again on the open file, so a file swapped for a FIFO after the stat
    neither blocks nor passes; at most the limit plus one byte is ever read."""
    limit, place = LIMITS[kind], {"file": file or str(path), "field": field}
    check_input(path, kind, file, field=field, error=error)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"cannot read {limit.what}: {(exc.strerror or 'error').lower()}", **place) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"is not a regular file ({limit.what})", **place)
        _check_size(st.st_size, limit, error, place)
        chunks, total = [], 0
        while total <= limit.max_bytes:
            chunk = os.read(fd, min(1 << 20, limit.max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise error(f"cannot read {limit.what}: {(exc.strerror or 'error').lower()}", **place) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    _check_size(len(data), limit, error, place)  # it grew after the stat
    if limit.max_lines is not None:
        lines = data.count(b"\n")
        if lines > limit.max_lines:
            raise error(f"has {lines} lines; at most {limit.max_lines} are read ({limit.what})", **place)
    return data, st


def read_input(
    path: Path, kind: str, file: Optional[str] = None, *, field: Optional[str] = None, error: type = RecipeError
) -> bytes:
    return read_input_stat(path, kind, file, field=field, error=error)[0]


def read_input_text(
    path: Path, kind: str, file: Optional[str] = None, *, field: Optional[str] = None, error: type = RecipeError
) -> str:
    """`read_input` as UTF-8 text."""
    data = read_input(path, kind, file, field=field, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start})", file=file or str(path), field=field) from None


def named_problem(name: str, problem: str) -> str:
    """A reader's problem said of the file `name`: "x.patch is 9437184 bytes; ...", "x.pem: cannot read ..."."""
    return f"{name} {problem}" if problem.startswith(("is ", "has ")) else f"{name}: {problem}"


def read_small_text(path: Path, file: str, kind: str = "yaml") -> str:
    """A regular file of at most its kind's limit (1 MiB for YAML), as UTF-8 (no FIFO, device or huge file is read)."""
    return read_input_text(path, kind, file)


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
