"""Directories a layer holds only because a step wrote into them and left them as they were but for
their mtime (a temporary file made and removed). How the engine takes a layer's diff decides whether
such a directory is in the layer: Docker's native overlay diff tars the upper directory, which holds
every directory the step copied up; the walking diff (used when the layer's parent in the store is not
its overlay parent, as on an engine that already held an equal parent layer) compares the two trees
and skips a directory whose only change is its mtime. An image with such a directory is therefore one
image on one engine and another on the next: a layer of a reproducible image holds none.
"""

from __future__ import annotations

import json
import tarfile

Entry = tuple[str, int, int, int, bool]  # path, mode, uid, gid, is a directory


def copy_up_only(layers: list[list[Entry]]) -> list[tuple[int, str]]:
    """(layer index, path) of each directory in a layer with nothing under it in that layer (no file,
    no whiteout) and the mode and owner it already had below: there only because it was copied up."""
    below: dict[str, tuple[int, int, int, bool]] = {}
    found = []
    for index, entries in enumerate(layers):
        parents = set()
        for path, *_ in entries:
            while "/" in path:
                path = path.rsplit("/", 1)[0]
                parents.add(path)
        for path, mode, uid, gid, is_dir in entries:
            if is_dir and path not in parents and below.get(path) == (mode, uid, gid, True):
                found.append((index, path))
        below.update({path: (mode, uid, gid, is_dir) for path, mode, uid, gid, is_dir in entries})
    return found


def image_layers(docker, image_id: str) -> list[list[Entry]]:
    """Each layer's entries, in the image's order, out of one `docker save` stream."""
    blobs: dict[str, list[Entry]] = {}
    order: list[str] = []
    with docker.saved(image_id) as tar:
        for member in tar:
            if member.name == "manifest.json":
                order = json.load(tar.extractfile(member))[0]["Layers"]
            elif member.isfile():
                try:
                    with tarfile.open(fileobj=tar.extractfile(member), mode="r|*") as layer:
                        blobs[member.name] = [
                            (m.name.removeprefix("./").rstrip("/"), m.mode, m.uid, m.gid, m.isdir()) for m in layer
                        ]
                except tarfile.TarError:  # the config, the index: not a layer
                    continue
    return [blobs.get(name, []) for name in order]
