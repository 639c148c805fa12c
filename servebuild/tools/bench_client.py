"""The bench's side of the wire: one streamed request to an OpenAI-compatible server, timed token by
token; the server's health endpoint; its Prometheus /metrics; the server process the bench starts.

Standard library only: this file runs inside the images (/opt/servebuild/tools) as well as on the host.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional


class BenchError(Exception):
    """One line for the user: what failed, where (request, server, file)."""


@dataclass
class Sample:
    """One measured request. Times are seconds from the moment the request was sent."""

    suite: str
    case: str
    index: int
    ok: bool = False
    error: str = ""
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None
    ttft_s: Optional[float] = None
    latency_s: Optional[float] = None
    chunks: int = 0
    accept_length: Optional[float] = None
    text_sha256: str = ""
    token_times: list = field(default_factory=list, repr=False)  # arrival of each content chunk

    @property
    def decode_s(self) -> Optional[float]:
        """From the first content chunk to the last (the decode phase)."""
        if len(self.token_times) < 2:
            return None
        return self.token_times[-1] - self.token_times[0]

    @property
    def tpot_s(self) -> Optional[float]:
        """Time per output token after the first."""
        decode = self.decode_s
        tokens = self.completion_tokens
        if decode is None or not tokens or tokens < 2:
            return None
        return decode / (tokens - 1)

    @property
    def decode_tps(self) -> Optional[float]:
        tpot = self.tpot_s
        return 1.0 / tpot if tpot else None

    def record(self) -> dict:
        """The raw sample as written to samples.jsonl (derived values included, arrival times dropped)."""
        out = {k: v for k, v in self.__dict__.items() if k != "token_times"}
        out.update(tpot_s=self.tpot_s, decode_tps=self.decode_tps, decode_s=self.decode_s)
        return out


@dataclass(frozen=True)
class Server:
    """Where the server listens and how to talk to it."""

    url: str                 # http://HOST:PORT (no path)
    model: str = ""          # "" -> the first of /v1/models
    api: str = "completions"  # or chat
    api_key: str = ""
    request_timeout_s: float = 600.0
    ignore_eos: bool = True   # SGLang and vLLM: generate exactly max_tokens; servers that refuse the field: off

    def parts(self) -> tuple[str, int, str]:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise BenchError(f"--url {self.url!r}: give http://HOST:PORT")
        try:
            port = parsed.port or 80
        except ValueError:
            raise BenchError(f"--url {self.url!r}: the port is not a number from 1 to 65535") from None
        return parsed.hostname, port, parsed.path.rstrip("/")

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        host, port, _ = self.parts()
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def headers(self) -> dict:
        out = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out


def get(server: Server, path: str, timeout: float = 10.0, limit: int = 8 << 20) -> tuple[int, bytes]:
    """(status, body) of a GET; the body read up to `limit` bytes."""
    conn = server.connection(timeout)
    try:
        conn.request("GET", server.parts()[2] + path, headers=server.headers())
        resp = conn.getresponse()
        return resp.status, resp.read(limit)
    finally:
        conn.close()


def wait_healthy(server: Server, timeout_s: float, process: Optional["ServerProcess"] = None,
                 path: str = "/health") -> float:
    """Seconds until GET /health answers 200; a BenchError if it never does, or the server process ends."""
    start = time.monotonic()
    last = "no answer yet"
    while True:
        if process is not None and process.poll() is not None:
            raise BenchError(f"the server exited with code {process.poll()} before it was healthy "
                             f"({process.last_line() or 'no output'}; log: {process.log_path})")
        try:
            status, _ = get(server, path, timeout=5.0, limit=4096)
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last = _reason(exc)
        if time.monotonic() - start > timeout_s:
            raise BenchError(f"the server at {server.url} was not healthy after {timeout_s:.0f} s "
                             f"(GET {path}: {last})")
        time.sleep(1.0)


def first_model(server: Server) -> str:
    try:
        status, body = get(server, "/v1/models")
        data = json.loads(body) if status == 200 else {}
        models = data.get("data") if isinstance(data, dict) else None
        if isinstance(models, list) and models and isinstance(models[0], dict) and isinstance(models[0].get("id"), str):
            return models[0]["id"]
    except (OSError, http.client.HTTPException, ValueError):
        pass
    raise BenchError(f"the server at {server.url} lists no model at /v1/models: give --model")


def request_body(server: Server, prompt, max_tokens: int, temperature: float = 0.0) -> dict:
    """The streamed request: a completion (prompt text or token ids) or a chat turn."""
    body = {"model": server.model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if server.ignore_eos:
        body["ignore_eos"] = True  # the decode length is fixed, whatever the model's end-of-text odds
    if server.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def stream(server: Server, body: dict, sample: Sample) -> Sample:
    """Send one streamed request and fill `sample` from the server-sent events as they arrive.
    A refused connection, an HTTP error, a malformed chunk or a stream cut short sets
    sample.error (and leaves ok False); the measured fields keep what arrived before."""
    path = server.parts()[2] + ("/v1/chat/completions" if server.api == "chat" else "/v1/completions")
    deadline = time.monotonic() + server.request_timeout_s
    digest = hashlib.sha256()
    conn = server.connection(min(server.request_timeout_s, 300.0))
    start = time.monotonic()
    done = finished = False
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=server.headers())
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read(2000).decode(errors="replace").strip().replace("\n", " ")
            sample.error = f"HTTP {resp.status} from {path}: {text[:300]}"
            return sample
        line_no = 0
        while True:
            if time.monotonic() > deadline:
                sample.error = f"no end of stream after {server.request_timeout_s:.0f} s (--request-timeout)"
                return sample
            raw = resp.readline(1 << 20)
            if not raw:
                break
            line_no += 1
            line = raw.decode(errors="replace").strip()
            if not line or line.startswith(":") or not line.startswith("data:"):
                continue  # blank separators, comments, event names
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
                break
            chunk = _chunk(payload)
            if chunk is None:
                sample.error = f"malformed stream chunk at line {line_no}: {payload[:120]!r}"
                return sample
            if isinstance(chunk.get("error"), (dict, str)):
                sample.error = f"the server sent an error in the stream: {json.dumps(chunk['error'])[:200]}"
                return sample
            now = time.monotonic() - start
            finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
            text = _chunk_text(chunk, server.api)
            if text is not None:  # a token's arrival (its text may be empty: a partial UTF-8 sequence)
                if sample.ttft_s is None:
                    sample.ttft_s = now
                sample.token_times.append(now)
                sample.chunks += bool(text)
                digest.update(text.encode())
            _usage(chunk, sample)
        sample.latency_s = time.monotonic() - start
        if not (done or finished):  # [DONE], or (servers that omit it) a choice's finish_reason
            sample.error = "the stream ended before a finish_reason or [DONE] (the server closed it)"
            return sample
        if sample.completion_tokens is None:  # no usage chunk: one token per content chunk
            sample.completion_tokens = sample.chunks
        sample.text_sha256 = digest.hexdigest()
        sample.ok = sample.ttft_s is not None
        if not sample.ok:
            sample.error = "the stream carried no text"
        return sample
    except (OSError, http.client.HTTPException) as exc:
        sample.error = f"{_reason(exc)} (POST {server.url}{path})"
        return sample
    finally:
        conn.close()


def _chunk(payload: str) -> Optional[dict]:
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    choices = value.get("choices", [])
    if "error" not in value and (not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices)):
        return None
    return value


def _chunk_text(chunk: dict, api: str) -> Optional[str]:
    """The text a chunk carries, or None when it carries no token (usage only, a chat role opener)."""
    out = None
    for choice in chunk.get("choices") or []:
        if api == "chat":
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(delta, dict) and "role" in delta and not piece:
                piece = None  # the role opener (vLLM sends it with content "")
        else:
            piece = choice.get("text")
        if isinstance(piece, str):
            out = (out or "") + piece
    return out


def _usage(chunk: dict, sample: Sample) -> None:
    """Token counts from the usage chunk; SGLang's per-choice meta_info carries the accept length."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        for key, attr in (("prompt_tokens", "prompt_tokens"), ("completion_tokens", "completion_tokens")):
            if isinstance(usage.get(key), int):
                setattr(sample, attr, usage[key])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            sample.cached_tokens = details["cached_tokens"]
    for choice in chunk.get("choices") or []:
        meta = choice.get("meta_info")
        if isinstance(meta, dict) and isinstance(meta.get("spec_accept_length"), (int, float)):
            sample.accept_length = float(meta["spec_accept_length"])


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection"
    if isinstance(exc, (ConnectionResetError, http.client.IncompleteRead)):
        return "the connection was cut mid-response"
    return (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).strip()


# ---- /metrics: accept length where the server reports it

def scrape(server: Server) -> dict[str, float]:
    """Prometheus text from /metrics, summed per metric name over its label sets ({} when absent)."""
    try:
        status, body = get(server, "/metrics")
    except (OSError, http.client.HTTPException):
        return {}
    if status != 200:
        return {}
    out: dict[str, float] = {}
    for line in body.decode(errors="replace").splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # name{labels} value [timestamp]
            name, rest = line[:line.index("{")], line[line.rindex("}") + 1:]
        else:
            name, _, rest = line.partition(" ")
        try:
            out[name] = out.get(name, 0.0) + float(rest.split()[0])
        except (ValueError, IndexError):
            continue
    return out


def accept_length(before: dict[str, float], after: dict[str, float]) -> Optional[float]:
    """vLLM: 1 + accepted draft tokens per draft over the interval (its counters); SGLang: its gauge
    sglang:spec_accept_length (the mean over its last interval). None when the server reports neither."""
    drafts = after.get("vllm:spec_decode_num_drafts_total", 0.0) - before.get("vllm:spec_decode_num_drafts_total", 0.0)
    if drafts > 0:
        accepted = (after.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
                    - before.get("vllm:spec_decode_num_accepted_tokens_total", 0.0))
        return 1.0 + accepted / drafts
    value = after.get("sglang:spec_accept_length")
    return value if value else None


# ---- the server process, when the bench starts it

class ServerProcess:
    """A server started from a shell command, its output in a log file, stopped with its process group."""

    def __init__(self, command: str, log_path: str, env: Optional[dict] = None):
        self.command, self.log_path = command, log_path
        try:
            os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
            self._log = open(log_path, "ab")
        except OSError as exc:
            raise BenchError(f"cannot write the server log {log_path}: {exc.strerror}") from None
        self.proc = subprocess.Popen(["/bin/sh", "-c", command], stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     env={**os.environ, **(env or {})})

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def last_line(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self.log_path) - 4096))
                lines = [ln for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return f"last log line: {lines[-1].strip()[:200]}" if lines else ""

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the whole process group (the shell and the server it started), SIGKILL after
        `grace_s`; returns once every process of the group is gone (its port is free again)."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self._group_alive():
                time.sleep(0.2)
            if not self._group_alive():
                break
        self._log.close()

    def _group_alive(self) -> bool:
        self.proc.poll()  # reap the shell
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
