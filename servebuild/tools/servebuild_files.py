"""Opening a file in the image the tools can trust: a regular file, reached without following a link at
its last component and without ever blocking on a FIFO or a device (the in-image tools' one helper;
standard library only, like every tool)."""

from __future__ import annotations

import errno
import json
import os
import stat


class NotRegular(OSError):
    """The path is a FIFO, device, socket, directory or link: nothing the tools read or append to."""


class NotDirectory(OSError):
    """A link (or a file) where the tools expect a directory of their own: nothing is written through it."""


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = 0o666, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file at `path` (blocking again once open), or NotRegular. O_NONBLOCK
    makes the open of a FIFO return at once (or fail with ENXIO when no one reads it); O_NOFOLLOW
    refuses a link (ELOOP); fstat then says what was opened. `dir_fd`: `path` is relative to it."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise NotRegular(exc.errno, "not a regular file", path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir(path: str, dir_fd: int | None = None, create: bool = False) -> int:
    """A descriptor of the directory at `path` (made first when `create`), never reached through a link
    at its last component: NotDirectory for a link or anything else that is not a directory."""
    if create:
        try:
            os.mkdir(path, dir_fd=dir_fd)
        except FileExistsError:
            pass
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        linked = stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        raise NotDirectory(exc.errno, "is a link, not a directory" if linked else "is not a directory", path) from None


def write_new(name: str, data, dir_fd: int, mode: int = 0o644) -> None:
    """`name` in the directory `dir_fd` holds `data` (bytes, or a function given the open binary file):
    written under a fresh temporary name (O_EXCL, never through a link) and renamed over it, so a reader
    sees the old file or the whole new one and a link or FIFO there is replaced, never written through;
    whatever fails (ENOSPC), the temporary file is removed."""
    temp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            data(handle) if callable(data) else handle.write(data)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write_file(path: str, data) -> None:
    """write_new at a path the caller chose: its folder is the caller's (reached as given), the file
    itself is replaced atomically, never written through."""
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_new(os.path.basename(path), data, folder)
    finally:
        os.close(folder)


def read_regular(path: str, dir_fd: int | None = None) -> bytes:
    fd = open_regular(path, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def load_json(path: str, dir_fd: int | None = None):
    """The JSON value in the regular file at `path`; ValueError (with a short reason) for what is not
    JSON: bad syntax, a number longer than int() takes, nesting deeper than the parser recurses."""
    try:
        return json.loads(read_regular(path, dir_fd))
    except RecursionError:
        raise ValueError("not JSON (nested too deep)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of more than 4300 digits
        raise ValueError(f"not JSON ({getattr(exc, 'msg', None) or str(exc)[:100]})") from None
