"""One build at a time per build directory: a second build of one recipe, variant and platform refuses.

Two such builds would share one context dir, build log, image-id file and manifest. The first holds an flock(2) on
BUILD_DIR/build.lock for its whole run; a second refuses at once in one line naming the first's pid
(a build can take hours: waiting would hide that two were started). The kernel drops the lock when
its holder exits, however it ends, so no stale lock needs clearing. The lock is opened with
fsutil.open_host_file: a symlink, FIFO or device planted at its path is refused, never written through."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from servebuild.errors import Refused
from servebuild.fsutil import make_dir, open_host_file

LOCK_NAME = "build.lock"


def try_flock(path: Path, what: str) -> tuple[int, bool]:
    """`path` opened (no link followed, no FIFO or device opened: a planted one is one line, not a write
    elsewhere) and whether an exclusive flock(2) on it was taken without waiting; the caller closes the fd."""
    fd = open_host_file(path, what, read=True, truncate=False, mode=0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return fd, False
    return fd, True


@contextmanager
def build_lock(build_dir: Path, recipe: str, under: Optional[Path] = None):
    """Held for the block; not re-entrant (a second hold, in this process or another, refuses). `under`:
    build/, below which no folder of `build_dir` may be a link."""
    fd, taken = try_flock(make_dir(build_dir, "the build directory", under) / LOCK_NAME, "the build lock")
    try:
        if not taken:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise Refused(
                f"another build of {recipe} is using this build directory (pid {holder})",
                hint="wait for it to end, or stop it",
                file=str(build_dir),
            ) from None
        try:  # who holds it, for the second build's line; best effort (a full disk fails the build itself)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing drops the flock
