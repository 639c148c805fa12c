"""The in-image tools never block on, write through or trace back on what a run leaves in their way:
`servebuild_cache.py census --since` refuses a FIFO, a link or a hostile listing in one line (exit 2);
the JIT recorder skips a FIFO or link at its record path and a hostile manifest, never blocking the
engine's JIT build and never raising into the server. Each case runs in a subprocess with a timeout,
so a hang is a failure, not a stuck suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servebuild import TOOLS_DIR

CACHE_TOOL = str(TOOLS_DIR / "servebuild_cache.py")


def census_since(tmp_path, listing):
    (tmp_path / "cache" / "triton").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache" / "triton" / "k.cubin").write_bytes(b"x")
    (tmp_path / "manifest.json").write_text("{}")
    return subprocess.run(
        [sys.executable, CACHE_TOOL, "census", "--cache", str(tmp_path / "cache"), "--since", str(listing)],
        capture_output=True,
        text=True,
        timeout=10,
        cwd=tmp_path,
        env={**os.environ, "SERVEBUILD_MANIFEST": str(tmp_path / "manifest.json")},
    )


def assert_refused(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith("servebuild-cache: census") and "--since" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_census_since_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "listing.json"
    os.mkfifo(fifo)
    assert_refused(census_since(tmp_path, fifo), "not a regular file")


def test_census_since_a_link_is_refused(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "listing.json").symlink_to(tmp_path / "real.json")
    assert_refused(census_since(tmp_path, tmp_path / "listing.json"), "not a regular file")


@pytest.mark.parametrize(
    "text,words",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ("null", "not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        ('{"triton/k.cubin": ' + "9" * 5000 + "}", "not JSON"),
        ('{"triton/k.cubin": 5}', None),  # a listing entry of the wrong shape: counted as changed, no traceback
    ],
)
def test_census_since_a_hostile_listing_is_one_line(tmp_path, text, words):
    listing = tmp_path / "listing.json"
    listing.write_text(text)
    proc = census_since(tmp_path, listing)
    if words is None:
        assert proc.returncode == 0 and json.loads(proc.stdout)["changed"] == {"triton": 1}, proc.stderr
    else:
        assert_refused(proc, words)


def test_census_since_a_good_listing_still_counts(tmp_path):
    listing = tmp_path / "listing.json"
    listing.write_text("{}")
    proc = census_since(tmp_path, listing)
    assert proc.returncode == 0 and json.loads(proc.stdout)["changed"] == {"triton": 1}, proc.stderr


RECORD = """
import sys
sys.path.insert(0, {tools!r})
import jit_record
jit_record.write({{"jit": "tvm-ffi", "module": "m"}})
print("server goes on")
"""


def record(tmp_path, record_file, manifest_text="{}"):
    (tmp_path / "manifest.json").write_text(manifest_text)
    return subprocess.run(
        [sys.executable, "-c", RECORD.format(tools=str(TOOLS_DIR))],
        capture_output=True,
        text=True,
        timeout=10,
        cwd=tmp_path,
        env={
            **os.environ,
            "SERVEBUILD_JIT_RECORD_FILE": str(record_file),
            "SERVEBUILD_MANIFEST": str(tmp_path / "manifest.json"),
        },
    )


def test_the_recorder_skips_a_fifo_at_its_record_path_without_blocking(tmp_path):
    fifo = tmp_path / "jit-record.jsonl"
    os.mkfifo(fifo)
    proc = record(tmp_path, fifo)
    assert proc.returncode == 0 and proc.stdout == "server goes on\n", proc.stderr
    assert len(proc.stderr.splitlines()) <= 1 and "Traceback" not in proc.stderr, proc.stderr


def test_the_recorder_skips_a_fifo_with_a_reader_too(tmp_path):
    fifo = tmp_path / "jit-record.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = record(tmp_path, fifo)
        assert proc.returncode == 0 and proc.stdout == "server goes on\n", proc.stderr
        assert os.read(reader, 100) == b""  # nothing was written into the pipe
    finally:
        os.close(reader)


def test_the_recorder_never_appends_through_a_link(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("")
    (tmp_path / "jit-record.jsonl").symlink_to(target)
    proc = record(tmp_path, tmp_path / "jit-record.jsonl")
    assert proc.returncode == 0 and proc.stdout == "server goes on\n", proc.stderr
    assert target.read_text() == ""


@pytest.mark.parametrize("manifest", ["[]", '{"engine": 5}', '{"engine": []}', "[" * 100_000, "9" * 5000])
def test_the_recorder_survives_a_hostile_manifest(tmp_path, manifest):
    proc = record(tmp_path, tmp_path / "rec.jsonl", manifest)
    assert proc.returncode == 0 and proc.stdout == "server goes on\n" and "Traceback" not in proc.stderr, proc.stderr
    line = json.loads((tmp_path / "rec.jsonl").read_text())
    assert line["engine"] is None and line["module"] == "m"


def test_the_recorder_appends_a_line_to_a_regular_file(tmp_path):
    for _ in range(2):
        proc = record(tmp_path, tmp_path / "sub" / "rec.jsonl", '{"engine": {"name": "sglang", "version": "0.5.16"}}')
        assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in (tmp_path / "sub" / "rec.jsonl").read_text().splitlines()]
    assert [(x["engine"], x["engine_version"], x["module"]) for x in lines] == [("sglang", "0.5.16", "m")] * 2


def test_the_recorder_never_appends_through_a_linked_directory(tmp_path):
    outside = tmp_path / "etc"
    outside.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "servebuild").symlink_to(outside)
    proc = record(tmp_path, tmp_path / "cache" / "servebuild" / "jit-record.jsonl")
    assert proc.returncode == 0 and proc.stdout == "server goes on\n", proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "link" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert list(outside.iterdir()) == []


def test_the_recorder_appends_after_what_the_file_holds(tmp_path):
    """O_APPEND: a line already there (another worker's) is kept whole, the new one goes after it."""
    rec = tmp_path / "rec.jsonl"
    earlier = json.dumps({"v": 1, "jit": "triton", "pad": "x" * 2000}) + "\n"
    rec.write_text(earlier)
    proc = record(tmp_path, rec)
    assert proc.returncode == 0, proc.stderr
    text = rec.read_text()
    assert text.startswith(earlier) and json.loads(text[len(earlier) :])["module"] == "m", text[:200]
