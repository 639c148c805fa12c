"""`invoke verify` against a hostile registry (tests/hostile_registry.py): every way of holding or
flooding the client ends within its deadline, in one line and exit 2, with bounded memory, nothing
written and nothing sent but reads.

The CLI runs as a child of a small wrapper that reports the child's peak RSS (ru_maxrss), so the
figure is of `invoke verify` alone. Deadlines are shortened through the documented variables
(SERVEBUILD_REGISTRY_TIMEOUT=4 s per request, SERVEBUILD_REGISTRY_DEADLINE=12 s per operation);
scripts/bench_hostile_registry.py measures the same cases under the default 60 s / 600 s.
"""

from __future__ import annotations

import pytest

from hostile_registry import HostileRegistry, run_cli, write_creds
from support import REPO_ROOT

REQUEST_S, OPERATION_S = 4, 12
PEAK_RSS_MIB = 200  # the CLI imports requests, oras, pydantic: ~70 MiB before any answer is read

# mode -> (words the one line must hold, seconds it may take at most)
CASES = {
    "slow-loris-body": ("did not finish within 4 s", REQUEST_S + 6),
    "slow-loris-headers": ("did not finish within 4 s", REQUEST_S + 6),
    "never-answers": ("GET /v2/ did not finish within 4 s", REQUEST_S + 6),
    "huge-manifest": ("is 734003200 bytes (Content-Length); the limit is 4194304", 8),
    "huge-manifest-undeclared": ("larger than its limit of 4194304 bytes", 8),
    "huge-blob": ("is 629145600 bytes (Content-Length); the limit is 8388608", 8),
    "huge-blob-undeclared": ("larger than its limit of 8388608 bytes", 8),
    "wrong-digest": ("with content hashing to", 8),
    "wrong-blob": ("served blob sha256:", 8),
    "tag-digest-lie": ("with content hashing to", 8),
    "redirect-loop": ("in a loop", 8),
    "redirect-many": ("more than 5 times", 8),
    "redirect-away": ("redirects manifest v1 to localhost", 8),
    "deep-json": ("nested deeper than 64 levels", 8),
    "deep-json-500": ("nested deeper than 64 levels", 8),
    "escaping-referrer": ("names its file '../../../escape.json': not a plain file name", 8),
    "token-flood": ("is 209715200 bytes (Content-Length); the limit is 1048576", 8),
    "token-deep": ("nested deeper than 64 levels", 8),
    "ok": ("0 sbom artifacts are attached", 8),
}


def verify(registry: HostileRegistry, tmp_path, extra_env=None):
    creds = write_creds(tmp_path / "creds.json")
    (tmp_path / "home").mkdir()
    env = {
        "PYTHONPATH": str(REPO_ROOT),
        "HOME": str(tmp_path / "home"),
        "SERVEBUILD_REGISTRY_TIMEOUT": str(REQUEST_S),
        "SERVEBUILD_REGISTRY_DEADLINE": str(OPERATION_S),
        **(extra_env or {}),
    }
    return run_cli(REPO_ROOT, ["verify", "--ref", registry.ref, "--credentials", str(creds)], tmp_path, env)


@pytest.mark.parametrize("mode", sorted(CASES))
def test_verify_against_a_hostile_registry_is_bounded(mode, tmp_path):
    words, most = CASES[mode]
    registry = HostileRegistry(mode)
    try:
        proc = verify(registry, tmp_path)
    finally:
        registry.stop()
    print(f"\n{mode}: {proc.seconds:.1f} s, peak RSS {proc.peak_mib:.0f} MiB: {proc.lines}")
    assert proc.returncode == 2, (proc.returncode, proc.lines, proc.stdout)
    assert len(proc.lines) == 1 and "Traceback" not in proc.stderr, proc.lines
    assert words in proc.lines[0] and registry.address in proc.lines[0], proc.lines
    assert proc.seconds < most, (proc.seconds, proc.lines)
    assert proc.peak_mib < PEAK_RSS_MIB, proc.peak_mib
    assert registry.writes() == []
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["creds.json", "home"]
    assert not list(tmp_path.parent.rglob("escape.json"))


def test_the_operation_deadline_bounds_many_slow_requests(tmp_path):
    """Each request within its own deadline, but the whole verify past the operation's: one line naming it."""
    registry = HostileRegistry("slow-loris-body")
    try:
        proc = verify(registry, tmp_path, {"SERVEBUILD_REGISTRY_TIMEOUT": "30", "SERVEBUILD_REGISTRY_DEADLINE": "3"})
    finally:
        registry.stop()
    assert proc.returncode == 2 and len(proc.lines) == 1, proc.lines
    assert "verify of" in proc.lines[0] and "did not finish within 3 s" in proc.lines[0], proc.lines
    assert proc.seconds < 10, proc.seconds


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_a_bad_deadline_variable_is_one_line(value, tmp_path):
    registry = HostileRegistry("ok")
    try:
        proc = verify(registry, tmp_path, {"SERVEBUILD_REGISTRY_TIMEOUT": value})
    finally:
        registry.stop()
    assert proc.returncode == 2 and len(proc.lines) == 1, proc.lines
    assert proc.lines[0].startswith("error: SERVEBUILD_REGISTRY_TIMEOUT: must be a number of seconds"), proc.lines
    assert registry.requests == []
