"""The bench on the wire and at its edges, against a stand-in server in this process (issue 31, point 9):
SSE lines ended by CR alone are read (the SSE grammar allows CRLF, LF or CR), a full --out is one line,
a URL or --model holding a line break is refused in one line, exit 2."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from support import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "servebuild" / "tools"))
import bench_client  # noqa: E402

TOOL = REPO_ROOT / "servebuild" / "tools" / "servebuild_bench.py"


def sse(texts: list[str], eol: str, usage: int | None = None) -> list[bytes]:
    """The events of a completion stream, each line ended by `eol`; one event per element."""
    events = []
    for text in texts:
        chunk = {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
        events.append(f"data: {json.dumps(chunk)}{eol}{eol}".encode())
    last = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    if usage is not None:
        last["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    events.append(f"data: {json.dumps(last)}{eol}{eol}data: [DONE]{eol}{eol}".encode())
    return events


class StandIn:
    """An HTTP server on 127.0.0.1 that answers /health and /v1/models, and streams `pieces` (sent one
    write at a time, a short pause between) for any POST, closing the connection after. With raw=True
    every request is answered with `pieces` alone, no status line of its own (a broken or non-HTTP
    server's bytes)."""

    def __init__(self, pieces: list[bytes], pause: float = 0.01, raw: bool = False):
        self.pieces, self.pause, self.raw = pieces, pause, raw
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length:
                body += conn.recv(65536)
            path = head.split(b" ")[1]
            if self.raw:
                conn.sendall(b"".join(self.pieces))
                return
            if head.startswith(b"GET"):
                payload = b'{"data": [{"id": "stand-in"}]}' if path.endswith(b"/v1/models") else b"ok"
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(payload), payload)
                )
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            for piece in self.pieces:
                conn.sendall(piece)
                time.sleep(self.pause)

    def close(self):
        self.sock.close()


@pytest.fixture
def standin():
    made = []

    def start(pieces, pause=0.01):
        made.append(StandIn(pieces, pause))
        return made[-1]

    yield start
    for server in made:
        server.close()


def measure(url: str, max_tokens: int = 4) -> bench_client.Sample:
    server = bench_client.Server(url, model="stand-in", request_timeout_s=20)
    body = bench_client.request_body(server, "hello", max_tokens)
    return bench_client.stream(server, body, bench_client.Sample("decode", "x", 0))


# ------------------------------------------------------------------ SSE line endings


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_every_sse_line_ending_is_read(standin, eol):
    """SSE lines end in CRLF, LF or CR alone: each reads as the same four tokens (CR alone was one
    endless line, and the request failed as a malformed chunk)."""
    sample = measure(standin(sse(["a", "b", "c", "d"], eol, usage=4)).url)
    assert sample.ok, sample.error
    assert sample.chunks == 4 and sample.completion_tokens == 4 and sample.text_sha256


def test_a_crlf_split_across_two_writes_is_one_line_ending(standin):
    """A CR that ends one TCP write and the LF that starts the next are one line ending, not a line
    ending and an empty line (which would end the event early)."""
    pieces = []
    for event in sse(["a", "b"], "\r\n", usage=2):
        cut = event.index(b"\r\n") + 1
        pieces += [event[:cut], event[cut:]]
    sample = measure(standin(pieces, pause=0.05).url)
    assert sample.ok and sample.chunks == 2, sample.error


def test_mixed_line_endings_in_one_stream(standin):
    events = sse(["a"], "\r")[:1] + sse(["b"], "\n")[:1] + sse(["c"], "\r\n", usage=3)
    sample = measure(standin(events).url)
    assert sample.ok and sample.chunks == 3 and sample.completion_tokens == 3, sample.error


def test_sse_lines_splits_on_every_ending_and_bounds_a_line():
    reads = iter([b"a\rb\r", b"\nc\n\r", b"\r\nd", b""])
    assert list(bench_client.sse_lines(lambda n: next(reads), limit=16)) == [b"a", b"b", b"c", b"", b"", b"d"]
    reads = iter([b"x" * 10, b"x" * 10, b"\n", b""])
    with pytest.raises(bench_client.StreamLineTooLong):
        list(bench_client.sse_lines(lambda n: next(reads), limit=16))


def test_a_line_over_the_limit_is_one_error(standin):
    sample = measure(standin([b"data: " + b"x" * (1 << 20) + b"\n\n"]).url)
    assert not sample.ok and "a stream line over 1048576 bytes" in sample.error, sample.error[:200]


# ------------------------------------------------------------------ a URL or --model holding a line break


def tool(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--url", "http://127.0.0.1:30000\n"),
        ("--url", "http://127.0.0.1:30\n000"),
        ("--url", "http://127.0.0.1:30000/v\r1"),
        ("--url", "http://127.0.\t0.1:30000"),
        ("--model", "stand-in\nX-Injected: 1"),
        ("--model", "stand-in\r"),
        ("--model", "m\x1b[2J"),
        ("--model", "m" * 513),
    ],
)
def test_a_url_or_model_with_a_line_break_is_one_line(tmp_path, flag, value):
    """urlsplit drops tabs and line breaks silently (the URL was taken as another); a model name went
    into the request and the summary as given. Both: one line naming the flag, exit 2, before anything."""
    proc = tool(flag, value, "--out", str(tmp_path / "out"), "--health-timeout", "1")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"servebuild-bench: error: {flag} ") and "Traceback" not in proc.stderr, lines
    assert len(lines[0]) < 300, lines[0]
    assert not (tmp_path / "out").exists()


def test_a_plain_url_and_model_are_still_taken(tmp_path):
    assert tool("--check", "--url", "http://127.0.0.1:30000", "--model", "Qwen/Qwen3-0.6B").returncode == 0


# ------------------------------------------------------------------ tokens counted from what was received (issue 45, item 5)


def test_a_server_count_the_stream_cannot_hold_is_not_the_count(standin):
    """4 chunks reported as 4,000 tokens: the rates count the 4 streamed, the server's 4,000 is kept beside
    them and the disagreement is named (the bench gave 1.7 M tok/s from the server's count)."""
    sample = measure(standin(sse(["a", "b", "c", "d"], "\n", usage=4000)).url, max_tokens=4096)
    assert sample.ok, sample.error
    assert sample.completion_tokens == 4 and sample.server_completion_tokens == 4000
    assert "4000" in sample.token_disagreement and "4 chunks" in sample.token_disagreement
    assert sample.record()["server_completion_tokens"] == 4000 and sample.record()["completion_tokens"] == 4


def test_a_server_count_over_max_tokens_is_not_the_count(standin):
    sample = measure(standin(sse(["a", "b", "c", "d"], "\n", usage=40)).url, max_tokens=8)
    assert sample.completion_tokens == 4 and sample.server_completion_tokens == 40 and sample.token_disagreement


def test_a_server_count_below_the_chunks_streamed_is_not_the_count(standin):
    sample = measure(standin(sse(["a", "b", "c", "d"], "\n", usage=2)).url, max_tokens=8)
    assert sample.completion_tokens == 4 and sample.server_completion_tokens == 2 and sample.token_disagreement


def test_a_speculative_decoders_several_tokens_a_chunk_are_taken(standin):
    """A count the stream can hold (several tokens a chunk, within max_tokens) is the server's, unremarked."""
    sample = measure(standin(sse(["ab", "cd", "ef", "g"], "\n", usage=7)).url, max_tokens=8)
    assert sample.ok and sample.completion_tokens == 7 and sample.server_completion_tokens == 7
    assert sample.token_disagreement == ""


def test_a_stream_with_no_content_measures_nothing(standin):
    """Chunks with empty text and a usage count of 4: no text arrived, so no token was measured."""
    sample = measure(standin(sse(["", "", "", ""], "\n", usage=4)).url)
    assert not sample.ok and sample.error.startswith("the stream carried no text"), sample.error
    assert sample.completion_tokens == 0 and "counted 4" in sample.error


def test_no_usage_counts_the_chunks(standin):
    sample = measure(standin(sse(["a", "b", "c"], "\n")).url)
    assert sample.ok and sample.completion_tokens == 3 and sample.server_completion_tokens is None


def test_a_closed_connection_names_the_url_the_request_went_to():
    """A server that closes without answering: the line names the URL the POST went to (the URL's path
    prefix once, not twice)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    port = sock.getsockname()[1]

    def close_each():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        sample = measure(f"http://127.0.0.1:{port}/serve/")
    finally:
        sock.close()
    assert not sample.ok and f"(POST http://127.0.0.1:{port}/serve/v1/completions)" in sample.error, sample.error


def test_the_summary_names_a_token_count_disagreement(standin, tmp_path):
    server = standin(sse(["a", "b", "c", "d"], "\n", usage=4000))
    out = tmp_path / "out"
    proc = tool(
        "--url",
        server.url,
        "--model",
        "stand-in",
        "--suite",
        "decode",
        "--runs",
        "1",
        "--max-tokens",
        "4",
        "--warmup",
        "0",
        "--calibrate",
        "off",
        "--out",
        str(out),
        "--health-timeout",
        "5",
    )
    summary = json.loads((out / "bench.json").read_text())
    assert summary["token_count_disagreements"] >= 1, (proc.stderr, summary)
    assert "4000" in summary["token_count_disagreement"] and "token counts" in (out / "bench.md").read_text()


def test_the_disagreement_count_is_bookkeeping_not_a_bisect_metric():
    from servebuild.check import bisect

    row = bisect.Row("a", [], "t", "sha256:x", 1.0, metrics={"decode_tg_tps": 50.0, "token_count_disagreements": 3})
    assert bisect.table_metrics([row]) == ["decode_tg_tps"]
