"""scripts/run_tests.py runs its two pytest runs at once only when the disk holds both peaks (CI's run of
2026-12-06 filled its disk at 1,860 s with both at once); otherwise one after the other, and it says why."""

from __future__ import annotations

import importlib.util

import pytest

from support import REPO_ROOT


@pytest.fixture
def run_tests(monkeypatch):
    spec = importlib.util.spec_from_file_location("run_tests", REPO_ROOT / "scripts" / "run_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("SERVEBUILD_TEST_ORDER", raising=False)
    return module


def test_the_measured_peaks_are_filled_in(run_tests):
    assert all(gb > 5 for gb in run_tests.NEED_GB.values()), run_tests.NEED_GB
    # both at once used less than the sum of the two peaks (they come at different times), more than either
    assert max(run_tests.NEED_GB.values()) < run_tests.AT_ONCE_GB < sum(run_tests.NEED_GB.values())


def test_a_disk_like_ci_machines_runs_both_at_once(run_tests):
    """CI's machine starts with about 51 GB free (51.9 on 2026-12-06), right at the old rule's line (the sum
    of the two peaks and the margin, 51 GB): its landing of 2026-12-07 took 57 minutes, what one after the
    other takes. 50 GB runs both at once now (one after the other under the old rule)."""
    assert run_tests.choose_order(50.0)[0] == "concurrent"
    assert run_tests.choose_order(run_tests.AT_ONCE_GB)[0] == "sequential"  # no margin left


def test_both_at_once_only_when_both_peaks_and_the_margin_fit(run_tests):
    both = run_tests.AT_ONCE_GB + run_tests.MARGIN_GB
    order, why = run_tests.choose_order(both + 0.1)
    assert order == "concurrent" and "holds what both runs at once used" in why
    order, why = run_tests.choose_order(both - 0.1)
    assert order == "sequential" and f"{both - 0.1:.1f} GB free" in why and "WARNING" not in why
    one = max(run_tests.NEED_GB.values()) + run_tests.MARGIN_GB
    order, why = run_tests.choose_order(one - 0.1)
    assert order == "sequential" and "WARNING: even one run at a time" in why


def test_the_order_can_be_forced(run_tests, monkeypatch):
    monkeypatch.setenv("SERVEBUILD_TEST_ORDER", "sequential")
    assert run_tests.choose_order(1e6)[0] == "sequential"
    monkeypatch.setenv("SERVEBUILD_TEST_ORDER", "concurrent")
    assert run_tests.choose_order(0.0)[0] == "concurrent"
    monkeypatch.setenv("SERVEBUILD_TEST_ORDER", "sideways")  # not an order: the disk decides
    assert run_tests.choose_order(0.0)[0] == "sequential"
