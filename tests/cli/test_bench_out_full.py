"""`invoke bench --out DIR` where DIR fills up (issue 31, point 9): one line, not two. The bench (the
in-image tool) said its line, then `invoke bench` drew its pictures into the same full directory and
the front door printed a second line ("plots: cannot write .../ttft.png"); and bench.json was left
empty (opened, truncated, then ENOSPC). A stand-in server in this process; no engine."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT
from unit.test_bench_wire import StandIn, sse

INVOKE = Path(sys.executable).parent / "invoke"


def small_files(limit: int):
    """preexec: every file the command (and its children) writes is at most `limit` bytes, as on a file
    system that fills up; past it write() fails (EFBIG; SIGXFSZ ignored, so nothing is killed)."""

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.fixture
def mpl_config(tmp_path):
    """matplotlib's font cache made before the limit applies (it lives in MPLCONFIGDIR, not --out)."""
    folder = tmp_path / "mpl"
    folder.mkdir()
    env = {**os.environ, "MPLCONFIGDIR": str(folder)}
    subprocess.run(
        [sys.executable, "-c", "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"],
        env=env,
        check=True,
        timeout=120,
    )
    return folder


@pytest.mark.parametrize("limit", [200, 600, 1000, 3000])
def test_bench_into_a_full_out_is_one_line(tmp_path, mpl_config, limit):
    server = StandIn(sse(["a", "b", "c", "d"], "\n", usage=4))
    out = tmp_path / "out"
    env = {**os.environ, "MPLCONFIGDIR": str(mpl_config), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            [
                str(INVOKE),
                "bench",
                "--suite",
                "decode",
                "--url",
                server.url,
                "--out",
                str(out),
                "--runs",
                "3",
                "--warmup",
                "0",
                "--calibrate",
                "off",
                "--max-tokens",
                "4",
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            preexec_fn=small_files(limit),
        )
    finally:
        server.close()
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "cannot write" in lines[0] and str(out) in lines[0] and "Traceback" not in proc.stderr, lines
    bench_json = out / "bench.json"
    if bench_json.exists():  # written whole, or not at all: never an empty or half file
        assert json.loads(bench_json.read_text())["suite"] == "decode"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], list(out.iterdir())


def test_a_bench_json_that_cannot_be_written_is_not_called_partial_results(tmp_path, mpl_config):
    """Nothing fits (the first sample and bench.json both fail): the one line says no partial results
    were kept, rather than pointing at a bench.json that is not there (or is empty)."""
    server = StandIn(sse(["a", "b"], "\n", usage=2))
    out = tmp_path / "out"
    env = {**os.environ, "MPLCONFIGDIR": str(mpl_config), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            [
                str(INVOKE),
                "bench",
                "--suite",
                "decode",
                "--url",
                server.url,
                "--out",
                str(out),
                "--runs",
                "1",
                "--warmup",
                "0",
                "--calibrate",
                "off",
                "--max-tokens",
                "2",
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            preexec_fn=small_files(100),
        )
    finally:
        server.close()
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"cannot write {out / 'samples.jsonl'}" in lines[0], lines
    assert f"and cannot write {out / 'bench.json'}" in lines[0] and "no partial results were kept" in lines[0], lines
    assert not (out / "bench.json").exists() and not (out / "bench.md").exists()
