"""The folder a build's context is written to, one per recipe and platform, shared by every variant.

The docker CLI names the context's file-sync session after the context folder's path, and BuildKit
sends a folder it has seen under that name before as a diff: files of the same size, mode and mtime
are not sent again (render/context.py gives each file an mtime derived from its content). A context
folder per variant sent all of it to BuildKit for each new variant and kept one more snapshot of it
in the build cache: 102 MB for the SGLang image (the pinned .debs), 0.6 s of every variant. One folder
for every variant of a recipe and platform sends only what a variant changes (18 kB between two
SGLang variants). The folder's path reaches no cache key and no layer: the ids are the same.

Builds of one recipe and platform at once (two variants) each take a slot of their own: slot N is
held by an flock(2) on `N.lock` beside it for the whole build, and a build takes the first free one.
The kernel drops a lock when its holder exits however it ends. The lock files are opened with
buildlock.try_flock: a symlink, FIFO or device planted there is refused, never written through.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from servebuild.build.buildlock import try_flock
from servebuild.errors import Refused
from servebuild.fsutil import make_dir
from servebuild.platforms import slug

FOLDER = "_context"  # under build/RECIPE/: a variant's name starts with a letter, so none is called so
SLOTS = 16  # builds of one recipe and platform at once


@contextmanager
def context_slot(build_root: Path, recipe: str, platform: str) -> Iterator[Path]:
    """The context folder of a free slot, held for the block (not made: the context's writer makes it)."""
    # no folder of it through a link: the context writer empties the slot (fsutil.no_link_dir, fresh_dir)
    base = make_dir(build_root / recipe / FOLDER / slug(platform), "the build contexts", under=build_root)
    for n in range(SLOTS):
        fd, taken = try_flock(base / f"{n}.lock", "the build context's lock")
        if not taken:
            os.close(fd)
            continue
        try:
            yield base / str(n)
        finally:
            os.close(fd)  # closing drops the flock
        return
    raise Refused(
        f"{SLOTS} builds of {recipe} for {platform} are running here",
        hint="wait for one to end",
        file=str(base),
    )
