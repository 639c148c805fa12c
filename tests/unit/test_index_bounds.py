"""Release downloads and index pages (sources/artifacts.py, lock/depsets.py through registry/index.py)
against an index server written here that misbehaves on demand (a real index cannot): a release
file declaring more than its limit, one streaming past it, a page that trickles, a page of deep JSON.
Each is one line, leaves no partial file, and a large good download is streamed to disk (peak RSS
measured in a child process).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from servebuild.errors import HostError
from servebuild.fsutil import LIMITS, Limit
from servebuild.registry import limits
from servebuild.sources import artifacts
from support import REPO_ROOT

BIG = 300 << 20  # the good large download: 300 MiB of zeros


class Index:
    def __init__(self):
        self.modes: dict[str, str] = {}
        self.page: bytes = b""
        self.stop = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                try:
                    outer.answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, h):
        if h.path.startswith("/simple/"):
            mode = self.modes.get("page", "ok")
            h.send_response(200)
            if mode == "trickle":
                h.send_header("Content-Length", str(len(self.page)))
                h.end_headers()
                for i in range(len(self.page)):
                    if self.stop.wait(0.3):
                        return
                    h.wfile.write(self.page[i : i + 1])
                    h.wfile.flush()
                return
            body = b"[" * 50_000 + b"]" * 50_000 if mode == "deep" else self.page
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        mode = self.modes.get("file", "big")
        h.send_response(200)
        if mode == "declares-5-gib":
            h.send_header("Content-Length", str(5 << 30))
        h.end_headers()
        chunk, sent = bytes(1 << 20), 0
        total = BIG if mode == "big" else 3 << 20
        while sent < total and not self.stop.is_set():
            h.wfile.write(chunk)
            sent += len(chunk)

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index(tmp_path, monkeypatch):
    server = Index()
    digest = hashlib.sha256(bytes(BIG)).hexdigest()
    server.page = json.dumps(
        {"files": [{"filename": "demo-1.0.tar.gz", "url": "/files/demo-1.0.tar.gz", "hashes": {"sha256": digest}}]}
    ).encode()
    monkeypatch.setattr(artifacts, "INDEX", server.url)
    monkeypatch.delenv("SERVEBUILD_CA_BUNDLE", raising=False)
    req = tmp_path / "req.txt"
    req.write_text(f"demo==1.0 \\\n    --hash=sha256:{digest}\n")
    server.req, server.tmp = req, tmp_path
    yield server
    server.close()


def fetch(index):
    return artifacts.fetch_artifact(index.req, "req.txt", "sdist", "linux/amd64", "3.12", index.tmp / "cache")


def leftovers(index) -> list:
    return [p.name for p in (index.tmp / "cache").rglob("*") if p.is_file()] if (index.tmp / "cache").exists() else []


def test_a_release_file_declaring_more_than_its_limit_is_refused_before_it_is_read(index):
    index.modes["file"] = "declares-5-gib"
    start = time.monotonic()
    with pytest.raises(HostError, match=r"is 5368709120 bytes \(Content-Length\); the limit is 4294967296"):
        fetch(index)
    assert time.monotonic() - start < 5 and leftovers(index) == []


def test_a_release_file_streaming_past_its_limit_is_cut_there(index, monkeypatch):
    monkeypatch.setitem(LIMITS, "artifact", Limit("a wheel or sdist", 1 << 20, read=False))  # 1 MiB, for speed
    index.modes["file"] = "undeclared"
    with pytest.raises(HostError, match="is larger than its limit of 1048576 bytes"):
        fetch(index)
    assert leftovers(index) == []


def test_an_index_page_that_trickles_ends_at_its_deadline(index, monkeypatch):
    monkeypatch.setattr(limits, "INDEX_PAGE_S", 1.0)  # the page trickles a byte every 0.3 s
    index.modes["page"] = "trickle"
    start = time.monotonic()
    with pytest.raises(HostError, match=r"/simple/demo/ did not finish within 1 s"):
        fetch(index)
    assert time.monotonic() - start < 5


def test_an_index_page_of_deep_json_is_one_line(index):
    index.modes["page"] = "deep"
    with pytest.raises(HostError, match="nested deeper than 64 levels"):
        fetch(index)


def test_a_large_release_file_is_streamed_to_disk(index):
    """300 MiB downloaded, hashed and cached by a child process whose peak RSS stays far below the file.

    The peak is the child's own VmHWM (/proc/self/status), not ru_maxrss: Linux carries the forking
    process's high-water mark into the child's ru_maxrss across exec, so late in a long pytest run the
    child reported the parent's ~290 MiB whatever it read."""
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'tests');"
        "from servebuild.sources import artifacts; artifacts.INDEX = sys.argv[1];"
        "p, d = artifacts.fetch_artifact(Path(sys.argv[2]), 'req.txt', 'sdist', 'linux/amd64', '3.12',"
        " Path(sys.argv[3])); hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')];"
        " print(p.stat().st_size, hwm[0])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, index.url, str(index.req), str(index.tmp / "cache")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    size, peak_kib = map(int, proc.stdout.split())
    assert size == BIG
    assert peak_kib < 150 << 10, f"peak RSS {peak_kib >> 10} MiB for a {BIG >> 20} MiB download"
