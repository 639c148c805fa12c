"""The suite's cleanup removes only what the run made: a user's images and build cache survive.

The conftest takes an `EngineSnapshot` when the run starts and, at the end, removes new dangling
images with our label and (with SERVEBUILD_TEST_PRUNE=1, as CI sets) new build-cache records.
This test runs that same mechanism around "user" state made before its snapshot.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from support import EngineSnapshot

DOCKER = "/usr/bin/docker"


def build(context: Path, tag: str, payload: str) -> str:
    (context / "Dockerfile").write_text(f"FROM servebuild/debian:bookworm-amd64\nRUN echo {payload} > /payload\n")
    proc = subprocess.run(
        [DOCKER, "build", "-q", "--label", "io.servebuild.recipe=cleanup-test", "-t", tag, str(context)],
        capture_output=True,
        text=True,
        check=True,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )
    return proc.stdout.strip().splitlines()[-1]


def exists(image: str) -> bool:
    return subprocess.run([DOCKER, "image", "inspect", image], capture_output=True).returncode == 0


def records_with(word: str) -> set[str]:
    import json

    out = subprocess.run(
        [DOCKER, "system", "df", "-v", "--format", "{{json .BuildCache}}"], capture_output=True, text=True
    ).stdout
    return {r["ID"] for r in json.loads(out or "[]") or [] if word in r["Description"]}


def test_cleanup_keeps_what_was_there_before(base_images, tmp_path):
    run = uuid.uuid4().hex[:10]
    tag = f"servebuild-test/cleanup-{run}:x"
    # the user's state, before the snapshot: a dangling image with our label and cache records
    user_old = build(tmp_path, tag, f"user-old-{run}")
    user_new = build(tmp_path, tag, f"user-new-{run}")
    assert exists(user_old) and user_old != user_new
    user_cache = records_with(f"user-old-{run}")
    assert user_cache, "the user's build left no cache record"
    snapshot = EngineSnapshot()
    try:
        # the run's own: rebuilding the tag displaces user_new (still the user's: it must stay)
        # and leaves test_old dangling (the run's: it must go)
        test_old = build(tmp_path, tag, f"test-old-{run}")
        snapshot.remember(test_old)
        snapshot.remember(build(tmp_path, tag, f"test-new-{run}"))
        user_during = build(tmp_path, f"{tag}-user", f"user-during-{run}")  # the user's, while the run runs
        build(tmp_path, f"{tag}-user", f"user-during2-{run}")  # leaves user_during dangling
        assert exists(test_old)
        removed = snapshot.remove_new_dangling()
        left = snapshot.prune_new_cache()
        assert test_old in removed and not exists(test_old)
        assert exists(user_old) and exists(user_new), "cleanup removed an image the run did not make"
        assert exists(user_during), "cleanup removed a dangling image a concurrent build of the user's made"
        assert user_cache <= records_with(f"user-old-{run}"), "cleanup pruned the user's build cache"
        assert not records_with(f"test-old-{run}") | records_with(f"test-new-{run}"), (
            f"the run's own cache records were left ({left} records stayed)"
        )
    finally:
        for image in (tag, f"{tag}-user", user_old, user_new, user_during):
            subprocess.run([DOCKER, "image", "rm", "-f", image], capture_output=True)
