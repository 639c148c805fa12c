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


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """A descriptor of the regular file at `path` (blocking again once open), or NotRegular. O_NONBLOCK
    makes the open of a FIFO return at once (or fail with ENXIO when no one reads it); O_NOFOLLOW
    refuses a link (ELOOP); fstat then says what was opened."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
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


def read_regular(path: str) -> bytes:
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def load_json(path: str):
    """The JSON value in the regular file at `path`; ValueError (with a short reason) for what is not
    JSON: bad syntax, a number longer than int() takes, nesting deeper than the parser recurses."""
    try:
        return json.loads(read_regular(path))
    except RecursionError:
        raise ValueError("not JSON (nested too deep)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of more than 4300 digits
        raise ValueError(f"not JSON ({getattr(exc, 'msg', None) or str(exc)[:100]})") from None
