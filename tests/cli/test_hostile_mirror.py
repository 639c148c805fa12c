"""`invoke bootstrap-base` against a hostile Debian mirror (tests/hostile_mirror.py): the lock's mirror
points at a server on 127.0.0.1 that never answers, trickles or does not speak HTTP, and the artifact
cache is empty. Each ends within its deadline, in one `error:` line naming the lock and the mirror,
exit 2, no traceback, the mirror asked once (a silent request is not asked again, as the docs say),
with a line on stderr while the request waits. Deadlines are shortened through the documented
variables (SERVEBUILD_MIRROR_TIMEOUT=4 s per request, SERVEBUILD_MIRROR_DEADLINE per command).

Measured before this file (2026-12-07): a silent mirror held bootstrap-base 140 s with no output
(four tries), a trickling one past 420 s, a non-HTTP one ended in a BadStatusLine traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_mirror import HostileMirror
from support import REPO_ROOT

RECIPE = "torch-cu130-bookworm"
INVOKE = str(Path(sys.executable).parent / "invoke")
REQUEST_S = 4
ENDS_WITHIN = 60  # the subprocess is stopped here: the old code ran 140 s (silent) and past 420 s (trickle)

# mode -> (words the error line must hold, seconds it may take at most, a waiting line expected)
CASES = {
    "silent": (f"{REQUEST_S} s (not asked again)", REQUEST_S + 8, True),  # silence or the deadline: both 4 s
    "trickle": (f"did not finish within {REQUEST_S} s (not asked again)", REQUEST_S + 8, True),
    "not-http": ("did not answer HTTP (BadStatusLine", 10, False),
}


def bootstrap(mirror: HostileMirror, tmp_path: Path, env: dict) -> subprocess.CompletedProcess:
    """bootstrap-base for amd64 from a copy of the recipe whose lock names `mirror`, with an empty cache."""
    work = tmp_path / "recipes"
    work.mkdir()
    for name in (RECIPE, "torch-cu130"):  # it extends torch-cu130
        shutil.copy(REPO_ROOT / "recipes" / f"{name}.yaml", work / f"{name}.yaml")
    lock = (REPO_ROOT / "recipes" / f"{RECIPE}.lock.yaml").read_text()
    assert "mirror: http://deb.debian.org/debian\n" in lock
    (work / f"{RECIPE}.lock.yaml").write_text(lock.replace("http://deb.debian.org/debian", mirror.url))
    full = {
        **os.environ,
        "SERVEBUILD_CACHE": str(tmp_path / "cache"),
        "SERVEBUILD_MIRROR_TIMEOUT": str(REQUEST_S),
        **env,
    }
    cmd = [INVOKE, "-r", str(REPO_ROOT), "bootstrap-base", "--recipe", str(work / f"{RECIPE}.yaml")]
    cmd += ["--arch", "amd64", "--tag", "servebuild-test/hostile-mirror:never"]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=ENDS_WITHIN, env=full)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"bootstrap-base still ran after {ENDS_WITHIN} s: {exc.stderr!r}")
    proc.seconds = time.monotonic() - start
    return proc


def error_line(proc) -> str:
    lines = proc.stderr.splitlines()
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    return errors[0]


@pytest.mark.parametrize("mode", sorted(CASES))
def test_bootstrap_base_against_a_hostile_mirror_is_bounded(mode, tmp_path):
    words, most, waits = CASES[mode]
    mirror = HostileMirror(mode)
    try:
        proc = bootstrap(mirror, tmp_path, {})
    finally:
        mirror.stop()
    line = error_line(proc)
    print(f"\n{mode}: {proc.seconds:.1f} s: {proc.stderr}")
    assert words in line and mirror.address in line and f"{RECIPE}.lock.yaml" in line, line
    assert proc.seconds < most, (proc.seconds, line)
    assert len(mirror.requests) == 1, mirror.requests  # not asked again
    assert f"from {mirror.url}" in proc.stderr  # a line before the first request names the mirror
    waiting = [ln for ln in proc.stderr.splitlines() if ln.strip().startswith("waiting for ")]
    assert bool(waiting) == waits, proc.stderr
    assert not list((tmp_path / "cache").rglob("*.deb")) and not list((tmp_path / "cache").rglob("*.tar"))


def test_the_command_deadline_bounds_the_mirror_reads_together(tmp_path):
    """Each request within its own deadline (30 s), but the command's mirror reads past theirs (3 s)."""
    mirror = HostileMirror("trickle")
    try:
        proc = bootstrap(mirror, tmp_path, {"SERVEBUILD_MIRROR_TIMEOUT": "30", "SERVEBUILD_MIRROR_DEADLINE": "3"})
    finally:
        mirror.stop()
    line = error_line(proc)
    assert "the mirror reads of this command took 3 s together" in line and mirror.address in line, line
    assert proc.seconds < 12, proc.seconds


def test_a_reset_connection_is_asked_again_within_the_bounds(tmp_path):
    mirror = HostileMirror("reset")
    try:
        proc = bootstrap(mirror, tmp_path, {})
    finally:
        mirror.stop()
    line = error_line(proc)
    assert "cannot" in line and mirror.address in line, line
    assert len(mirror.requests) == 5, mirror.requests  # the first try and 4 more, 0.5 s doubling
    assert proc.seconds < 20, proc.seconds


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_bad_mirror_deadline_variable_is_one_line_before_the_mirror_is_asked(value, tmp_path):
    mirror = HostileMirror("silent")
    try:
        proc = bootstrap(mirror, tmp_path, {"SERVEBUILD_MIRROR_DEADLINE": value})
    finally:
        mirror.stop()
    assert "SERVEBUILD_MIRROR_DEADLINE: must be a number of seconds" in error_line(proc)
    assert mirror.requests == []
