"""Shared fixtures. Real parts: git, the Docker engine, PyPI wheels, pinned by hash."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _hypothesis_profiles() -> None:
    """ "ci" (the default): derandomized, so every run tries the same examples and a kill is a kill
    in every run; each fuzz test is parametrized by field and value class, so 15 examples each
    reach every class of every field. "nightly" (HYPOTHESIS_PROFILE=nightly): random, 40 times as
    many. Both: no deadline (a launcher really runs). "mutants": ci without shrinking."""
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:  # hypothesis is in requirements-dev.txt; only the fuzz test needs it
        return
    common = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}
    settings.register_profile("ci", derandomize=True, max_examples=15, print_blob=True, **common)
    settings.register_profile("nightly", max_examples=600, print_blob=True, **common)
    # scripts/mutants.py: the ci examples, no shrinking (a kill needs a failure, not the smallest one)
    settings.register_profile("mutants", parent=settings.get_profile("ci"), phases=[Phase.explicit, Phase.generate])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()


# sglang 0.5.16 x86_64 wheel from PyPI: it holds python/sglang/ of the v0.5.16 tag
SGLANG_WHEEL = "sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl"
SGLANG_WHEEL_SHA256 = "d5f345a18953dd35df568ac56bdcb7f5ee910ab39efea4469b714556d1070713"


def cache_dir() -> Path:
    path = Path(os.environ.get("SERVEBUILD_TEST_CACHE", Path.home() / ".cache" / "servebuild-tests"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    """The hash-pinned sglang==0.5.16 wheel, downloaded once from PyPI."""
    dest = cache_dir() / "wheels"
    wheel = dest / SGLANG_WHEEL
    if not wheel.exists():
        req = dest / "sglang.txt"
        dest.mkdir(parents=True, exist_ok=True)
        req.write_text(f"sglang==0.5.16 --hash=sha256:{SGLANG_WHEEL_SHA256}\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--require-hashes",
                "--only-binary=:all:",
                "--platform",
                "manylinux_2_34_x86_64",
                "--python-version",
                "3.11",
                "-d",
                str(dest),
                "-r",
                str(req),
            ],
            check=True,
        )
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == SGLANG_WHEEL_SHA256
    return wheel


@pytest.fixture(scope="session")
def sglang_upstream(sglang_wheel, tmp_path_factory) -> tuple[str, str]:
    """A git upstream whose tree is v0.5.16's python/sglang, taken from the wheel.

    GitHub is unreachable here; the wheel holds the tag's Python sources, so the tree is the
    real one for every file the local patches touch (Python, and the JIT kernel sources).
    """
    from support import git

    work = tmp_path_factory.mktemp("sglang-upstream")
    with zipfile.ZipFile(sglang_wheel) as zf:
        for name in zf.namelist():
            # the Python sources and the JIT kernel sources the package ships as data (.cuh, .cu, .h)
            if name.startswith("sglang/") and name.endswith((".py", ".cuh", ".cu", ".h")):
                target = work / "python" / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "sglang v0.5.16 python sources (from the PyPI wheel)")
    return f"file://{work}", git(work, "rev-parse", "HEAD")


def pytest_terminal_summary(terminalreporter):
    from support import RECIPE_CHECKS

    if RECIPE_CHECKS:
        terminalreporter.section("recipes checked")
        for line in RECIPE_CHECKS:
            terminalreporter.write_line(line)
    slowest_and_tiers(terminalreporter)


def slowest_and_tiers(terminalreporter) -> None:
    """Where CI's time goes: the ten slowest tests (setup + call + teardown; session fixtures land on the
    first test that asks for them) and each tier's total."""
    per_test: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "nodeid", None) and isinstance(getattr(report, "duration", None), float):
                per_test[report.nodeid] = per_test.get(report.nodeid, 0.0) + report.duration
    if not per_test:
        return
    if os.environ.get("SERVEBUILD_TEST_TIMES"):  # scripts/run_tests.py adds up its two runs
        Path(os.environ["SERVEBUILD_TEST_TIMES"]).write_text(json.dumps(per_test, sort_keys=True) + "\n")
    tiers: dict[str, list[float]] = {}
    for nodeid, seconds in per_test.items():
        parts = nodeid.split("/")
        tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"
        tiers.setdefault(tier, []).append(seconds)
    terminalreporter.section("where the time went")
    terminalreporter.write_line("ten slowest tests (s):")
    for nodeid, seconds in sorted(per_test.items(), key=lambda kv: -kv[1])[:10]:
        terminalreporter.write_line(f"  {seconds:8.1f}  {nodeid}")
    terminalreporter.write_line("tiers (tests, s):")
    for tier, times in sorted(tiers.items()):
        terminalreporter.write_line(f"  {tier:12s} {len(times):5d} {sum(times):9.1f}")
