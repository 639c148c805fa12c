"""Mirror reads bounded where the CLI tests cannot reach (issue 45, item 3), against the hostile mirror on
127.0.0.1 (tests/hostile_mirror.py): a .deb read in a build thread, where no deadline alarm can be
delivered, and the host's apt reading a mirror's index while a lock (or a base with no lock) is made."""

from __future__ import annotations

import io
import threading
import time

import pytest

from hostile_mirror import HostileMirror
from servebuild.errors import HostError
from servebuild.lock import debian
from servebuild.sources import mirror


@pytest.fixture(autouse=True)
def short(monkeypatch):
    monkeypatch.setenv("SERVEBUILD_MIRROR_TIMEOUT", "1")  # the trickle sends a byte every 0.3 s
    mirror.reset()


def test_a_trickle_read_in_a_build_thread_ends_within_its_deadline():
    server = HostileMirror("trickle")
    got = []

    def read():
        start = time.monotonic()
        try:
            mirror.get(f"{server.url}/pool/x.deb", 1 << 30, out=io.StringIO())
        except HostError as exc:
            got.append((str(exc), time.monotonic() - start))

    try:
        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        thread.join(timeout=20)
    finally:
        server.stop()
    assert got, "the read in a thread was not bounded"
    line, seconds = got[0]
    assert "did not finish within 1 s (not asked again)" in line and seconds < 6, got
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_the_hosts_apt_reading_a_hostile_mirror_ends_within_its_deadline(mode, capsys):
    server = HostileMirror(mode)
    start = time.monotonic()
    try:
        with pytest.raises(HostError) as info:
            debian.live_release(server.url, "bookworm", "amd64")
    finally:
        server.stop()
    took = time.monotonic() - start
    line = str(info.value)
    assert "`apt-get update` against" in line and "did not finish within 1 s" in line and "\n" not in line, line
    assert took < 8, took
    assert f"reading {server.url} bookworm amd64" in capsys.readouterr().err
