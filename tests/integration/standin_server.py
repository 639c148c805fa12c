"""A STAND-IN for a broken OpenAI-compatible server, written for the bench tests: the real server of
those tests is `transformers serve` (tests/integration/test_bench.py); this one exists only to fail in the
ways a real server does on a bad day, on purpose, at a chosen request:

    python standin_server.py PORT MODE [N]
      (requests of one token, the bench's calibration, are not counted)
      die-mid-stream N   answers N requests, then exits in the middle of streaming request N+1
      never-healthy      /health answers 503 for ever
      malformed N        answers N requests, then streams a chunk that is not JSON
      http-error N       answers N requests, then answers HTTP 500
      ok                 answers every request (a server to leave running, or to find in the way)
      trickle            sends its headers, then one byte a second of a line that never ends
      continue-forever   answers `100 Continue` again and again, never a status
      nested             streams a chunk nested 100,000 levels deep
      event-error        streams an SSE `event: error` frame, then [DONE]
      endless            streams valid chunks for ever, never a finish_reason
      huge-usage         reports completion_tokens of 10**400
"""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODE = int(sys.argv[1]), sys.argv[2]
AFTER = int(sys.argv[3]) if len(sys.argv) > 3 else 0
SERVED = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._json(503 if MODE == "never-healthy" else 200, {})
        elif self.path == "/v1/models":
            self._json(200, {"data": [{"id": "stand-in"}]})
        else:
            self._json(404, {})

    def _event(self, payload: str) -> None:
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SERVED[0] += int(body.get("max_tokens", 1)) > 1  # the bench's calibration requests (1 token) not counted
        broken = SERVED[0] > AFTER
        if MODE == "http-error" and broken:
            return self._json(500, {"error": "stand-in: internal error"})
        if MODE == "continue-forever":
            while True:
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.wfile.flush()
                time.sleep(0.05)
        if MODE == "trickle":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: {")
            while True:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(1)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        tokens = int(body.get("max_tokens", 4))
        if MODE == "nested":
            return self._event("[" * 100_000 + "]" * 100_000)
        if MODE == "event-error":
            self.wfile.write(b"d\r\nevent: error\n\r\n")  # one chunk: the event line, then its data line
            self._event('{"message": "CUDA out of memory"}')
            self._event("[DONE]")
            return self.wfile.write(b"0\r\n\r\n")
        if MODE == "endless":
            while True:
                self._event(json.dumps({"choices": [{"index": 0, "text": " t"}]}))
        for i in range(tokens):
            if broken and MODE == "die-mid-stream" and i == 1:
                os._exit(3)  # the process dies with the stream half sent
            if broken and MODE == "malformed" and i == 1:
                self._event('{"choices": [{"text": "x"}')
                break
            self._event(json.dumps({"choices": [{"index": 0, "text": f" t{i}"}]}))
            time.sleep(0.002)
        else:
            completion = 10**400 if MODE == "huge-usage" else tokens
            self._event(
                json.dumps(
                    {
                        "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                        "usage": {
                            "prompt_tokens": len(str(body.get("prompt", ""))) // 4,
                            "completion_tokens": completion,
                        },
                    }
                )
            )
            self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
