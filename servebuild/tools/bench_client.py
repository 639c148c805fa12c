"""The bench's side of the wire: one streamed request to an OpenAI-compatible server, timed token by
token; the server's health endpoint; its Prometheus /metrics; the server process the bench starts.

Standard library only: this file runs inside the images (/opt/servebuild/tools) as well as on the host.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import re
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Iterator, Optional


class BenchError(Exception):
    """One line for the user: what failed, where (request, server, file)."""


def open_out(path, append: bool = False, binary: bool = False):
    """A file the bench writes in its --out, never through a link planted there: opened with O_NOFOLLOW and
    O_NONBLOCK (a FIFO does not block the open), fstat'ed and refused unless regular, only then truncated
    (`append`: O_APPEND, kept). Every refusal is one BenchError line naming the path."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
             | (os.O_APPEND if append else 0))
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if os.path.islink(path):
            raise BenchError(f"cannot write {path}: it is a symbolic link; the bench writes no file "
                             f"through a link (remove it)") from None
        raise BenchError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BenchError(f"cannot write {path}: it is not a regular file (remove it)")
        if not append:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise BenchError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
    return os.fdopen(fd, ("ab" if append else "wb") if binary else ("a" if append else "w"),
                     **({} if binary else {"encoding": "utf-8"}))


@dataclass
class Sample:
    """One measured request. Times are seconds from the moment the request was sent."""

    suite: str
    case: str
    index: int
    ok: bool = False
    error: str = ""
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None  # what the rates use: counted from the stream (token_count)
    server_completion_tokens: Optional[int] = None  # the server's usage count, reported beside it
    token_disagreement: str = ""  # where the server's count is not what was streamed: what each said
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
        """Time per output token after the first, as vLLM's `vllm bench serve` and SGLang's `bench_serving`
        define it: (e2e latency - TTFT) / (output tokens - 1)."""
        tokens = self.completion_tokens
        if self.latency_s is None or self.ttft_s is None or not tokens or tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (tokens - 1)

    @property
    def itl_s(self) -> list:
        """Inter-token latencies: the gaps between successive streamed token chunks (vLLM's and SGLang's ITL)."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def decode_tps(self) -> Optional[float]:
        """One stream's decode rate, 1/TPOT (not an output throughput: no TTFT in it, one request)."""
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

    def where(self, path: str) -> str:
        """The URL a request for `path` (the URL's own path prefix included) is sent to, as it is sent."""
        host, port, _ = self.parts()
        return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"

    def parts(self) -> tuple[str, int, str]:
        """(host, port, path prefix), or one line on what is wrong with the URL."""
        try:
            parsed = urllib.parse.urlsplit(self.url)
            host, port = parsed.hostname, parsed.port
        except ValueError:
            raise BenchError(f"--url {self.url!r}: give http://HOST:PORT (the host or port is not valid)") from None
        if parsed.scheme != "http" or not host or parsed.query or parsed.fragment:
            raise BenchError(f"--url {self.url!r}: give http://HOST:PORT")
        if not host.isascii() or len(host) > 253 or any(len(label) > 63 for label in host.split(".")):
            raise BenchError(f"--url {self.url!r}: the host is not an ASCII name of at most 253 characters")
        if port == 0:
            raise BenchError(f"--url {self.url!r}: the port is not a number from 1 to 65535")
        path = parsed.path.rstrip("/")
        if not (path.isascii() and path.isprintable()) or " " in path:
            raise BenchError(f"--url {self.url!r}: the path holds a space or a non-ASCII character")
        return host, port or 80, path

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        host, port, _ = self.parts()
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def headers(self) -> dict:
        out = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            if not (self.api_key.isascii() and self.api_key.isprintable()):
                raise BenchError("SERVEBUILD_BENCH_API_KEY holds a control or non-ASCII character")
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def port_in_use(self) -> bool:
        """Whether something already answers TCP at the URL's host and port."""
        host, port, _ = self.parts()
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            return False


MAX_COUNT = 10 ** 9  # a token count above this is not a count (usage fields are checked against it)


class Watchdog:
    """Shuts the connection's socket when `seconds` have passed, whatever the server sends: one that
    trickles a byte at a time, answers with endless `100 Continue`s or never finishes its headers
    cannot hold a read past the deadline (a socket timeout only fires on silence)."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float):
        self.conn, self.fired, self.sock = conn, False, None
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def connect(self) -> None:
        """Connect now and hold the socket: http.client drops its own reference once a response that
        ends with the connection takes the socket over, and the deadline must still reach it."""
        self.conn.connect()
        self.sock = self.conn.sock

    def _fire(self) -> None:
        self.fired = True
        sock = self.sock or self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "Watchdog":
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


def get(server: Server, path: str, timeout: float = 10.0, limit: int = 8 << 20) -> tuple[int, bytes]:
    """(status, body) of a GET, all of it within `timeout` seconds; the body read up to `limit` bytes."""
    conn = server.connection(timeout)
    try:
        with Watchdog(conn, timeout) as dog:
            try:
                dog.connect()
                conn.request("GET", server.parts()[2] + path, headers=server.headers())
                resp = conn.getresponse()
                status, body = resp.status, resp.read(limit)
            except (ValueError, OverflowError) as exc:  # http.client on a garbled response
                raise http.client.HTTPException(f"a garbled response ({exc})") from None
            if dog.fired:
                raise TimeoutError(f"GET {path} took over {timeout:.0f} s")
            return status, body
    finally:
        conn.close()


def wait_healthy(server: Server, timeout_s: float, process: Optional["ServerProcess"] = None,
                 path: str = "/health", report=None, every_s: float = 30.0) -> float:
    """Seconds until GET /health answers 200; a BenchError if it never does, or the server process ends.
    `report(text)`, when given, hears what it waits for at the start and every `every_s` seconds after."""
    start = time.monotonic()
    last = "no answer yet"
    said = start
    if report:
        report(f"waiting for GET {server.where(server.parts()[2] + path)} to answer 200 (up to {timeout_s:.0f} s, --health-timeout)")
    while True:
        if report and time.monotonic() - said >= every_s:
            said = time.monotonic()
            report(f"still waiting for GET {server.where(server.parts()[2] + path)}: {said - start:.0f} s of {timeout_s:.0f} s ({last})")
        if process is not None and process.poll() is not None:
            raise BenchError(f"the server exited with code {process.poll()} before it was healthy "
                             f"({process.last_line() or 'no output'}; log: {process.log_path})")
        try:
            status, _ = get(server, path, timeout=min(5.0, max(0.5, timeout_s)), limit=4096)
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
    except (OSError, http.client.HTTPException, ValueError, RecursionError):
        data = {}
    models = data.get("data") if isinstance(data, dict) else None
    if isinstance(models, list) and models and isinstance(models[0], dict) and isinstance(models[0].get("id"), str) \
            and models[0]["id"].isprintable() and 0 < len(models[0]["id"]) <= 512:
        return models[0]["id"]
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
    digest = hashlib.sha256()
    conn = server.connection(min(server.request_timeout_s, 300.0))
    late = f"no end of stream after {server.request_timeout_s:g} s (--request-timeout)"
    max_chunks = 4 * int(body.get("max_tokens") or 1) + 64  # a stream longer than this is not this request's
    start = time.monotonic()
    done = finished = False
    event = ""
    dog = Watchdog(conn, server.request_timeout_s)
    try:
        dog.timer.start()
        dog.connect()
        conn.request("POST", path, body=json.dumps(body).encode(), headers=server.headers())
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read(2000).decode(errors="replace").strip().replace("\n", " ")
            sample.error = late if dog.fired else f"HTTP {resp.status} from {path}: {text[:300]}"
            return sample
        line_no = 0
        for raw in sse_lines(until_cut(resp.read1)):  # lines end in CRLF, LF or CR alone (the SSE grammar)
            if dog.fired:
                break
            line_no += 1
            line = raw.decode(errors="replace").strip()
            if line.startswith("event:"):
                event = line[6:].strip()
                continue
            if not line or line.startswith(":") or not line.startswith("data:"):
                event = "" if not line else event
                continue  # blank separators, comments
            payload = line[5:].strip()
            if event == "error":
                sample.error = f"the server sent an error event: {payload[:200]}"
                return sample
            if payload == "[DONE]":
                done = True
                break
            if sample.chunks > max_chunks:
                sample.error = f"the server streamed over {max_chunks} chunks for max_tokens {body.get('max_tokens')}"
                return sample
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
        if dog.fired:  # the deadline shut the socket: whatever read last was cut by it
            sample.error = late
            return sample
        sample.latency_s = time.monotonic() - start
        if not (done or finished):  # [DONE], or (servers that omit it) a choice's finish_reason
            sample.error = (f"the stream ended before a finish_reason or [DONE] (the server closed it; "
                            f"POST {server.where(path)})")
            return sample
        sample.text_sha256 = digest.hexdigest()
        # a token arrived; empty ones alone only as a character's first bytes (a partial UTF-8 sequence) and
        # the closing chunk: more empty arrivals than that with no text at all are a stream of nothing
        arrivals = len(sample.token_times)
        sample.ok = arrivals > 0 and (sample.chunks > 0 or arrivals <= UTF8_MAX)
        token_count(sample, int(body.get("max_tokens") or 0))
        if not sample.ok:
            sample.error = "the stream carried no text"
            if sample.server_completion_tokens:
                sample.error += f" (the server counted {sample.server_completion_tokens} completion tokens)"
        return sample
    except StreamLineTooLong as exc:
        sample.error = late if dog.fired else str(exc)
        return sample
    except (OSError, http.client.HTTPException, ValueError, OverflowError) as exc:
        sample.error = late if dog.fired else f"{_reason(exc)} (POST {server.where(path)})"
        return sample
    finally:
        dog.timer.cancel()
        conn.close()
        sample.error = printable(sample.error)  # a server's bytes (an error body, a non-HTTP answer) shown escaped


def printable(text: str) -> str:
    """`text` with every character that is not printable (control bytes, escape sequences) shown escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


MAX_LINE = 1 << 20  # an event line longer than this is not a token's chunk


class StreamLineTooLong(Exception):
    """A server-sent event line longer than the bench reads."""


_EOL = re.compile(rb"\r\n|\r|\n")


def until_cut(read):
    """`read`, with a connection cut once the stream has begun (a chunked body without its last chunk:
    the server died or closed it) read as the stream's end: what was streamed is judged as it stands
    (no [DONE] or finish_reason: the stream ended early), whether the cut came as a FIN or a reset."""
    def reading(n: int) -> bytes:
        try:
            return read(n)
        except (http.client.IncompleteRead, ConnectionResetError):
            return b""
    return reading


def sse_lines(read, limit: int = MAX_LINE) -> Iterator[bytes]:
    """The lines of a server-sent event stream, without their endings, as they arrive: `read(n)` returns
    what has come (at least a byte; b"" at the end). A line ends in CRLF, LF or CR alone, and a CR that
    ends one read and the LF that starts the next are one ending. A line longer than `limit` bytes is
    StreamLineTooLong, never held whole."""
    buf, after_cr = b"", False
    while True:
        data = read(1 << 16)
        if not data:
            if buf:
                yield buf
            return
        if after_cr and data.startswith(b"\n"):
            data = data[1:]
        after_cr = False
        buf += data
        start = 0
        for m in _EOL.finditer(buf):
            if m.start() - start > limit:
                break
            yield buf[start:m.start()]
            start = m.end()
        buf = buf[start:]
        after_cr = start > 0 and buf == b"" and data.endswith(b"\r")
        if len(buf) > limit and len(_EOL.split(buf, 1)[0]) > limit:
            raise StreamLineTooLong(f"a stream line over {limit} bytes")


def _chunk(payload: str) -> Optional[dict]:
    """The chunk as a dict with a list of dict choices (or an error), else None: malformed."""
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past Python's stack
        return None
    if not isinstance(value, dict):
        return None
    if value.get("error") is not None and isinstance(value["error"], (dict, str)):
        return value
    choices = value.get("choices", [])
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
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


TOKENS_PER_CHUNK = 64  # a streamed chunk carries one token, or a few (speculative decoding, a stream interval)
UTF8_MAX = 4  # bytes of one character: its byte-level tokens (and the closing chunk) are at most 4 empty arrivals


def token_count(sample: Sample, max_tokens: int) -> None:
    """The completion tokens the rates use, counted from what was received: each chunk of text carries at
    least one token, so the count is the number of those chunks, unless the server's usage count is one the
    stream can hold (at least one token per chunk of text, at most TOKENS_PER_CHUNK per arrival and
    max_tokens in all: a speculative decoder's or a stream interval's several tokens a chunk). A server's
    count outside that is not taken: the count stays the chunks', the server's is kept beside it, and the
    disagreement is named. A stream with no text (a one-token answer that is an end token or a character's
    first byte) holds one token an arrival, at most UTF8_MAX. A failed stream counts only what it carried."""
    received, said = sample.chunks, sample.server_completion_tokens
    sample.completion_tokens = received
    if said is None or not sample.ok:
        return
    arrivals = len(sample.token_times)  # a partial UTF-8 sequence's tokens arrive with empty text
    if received == 0 and said:  # no text: only a character's first bytes or an end token, one an arrival
        if said <= min(arrivals, UTF8_MAX, max_tokens or UTF8_MAX):
            sample.completion_tokens = said
            return
        sample.token_disagreement = (
            f"the server counted {said} completion tokens, the stream carried no text in {arrivals} arrivals "
            f"(at most {min(arrivals, UTF8_MAX)} fits it); the bench counts 0")
        return
    high = arrivals * TOKENS_PER_CHUNK if not max_tokens else min(max_tokens, arrivals * TOKENS_PER_CHUNK)
    if received <= said <= high:
        sample.completion_tokens = said
        return
    sample.token_disagreement = (
        f"the server counted {said} completion tokens, the stream carried {received} chunks of text "
        f"(a count from {received} to {high} fits it); the bench counts {received}")


def _usage(chunk: dict, sample: Sample) -> None:
    """Token counts from the usage chunk (the completion count kept as the server's, checked against the
    stream by token_count); SGLang's per-choice meta_info carries the accept length."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        if count(usage.get("prompt_tokens")) is not None:
            sample.prompt_tokens = usage["prompt_tokens"]
        if count(usage.get("completion_tokens")) is not None:
            sample.server_completion_tokens = usage["completion_tokens"]
        elif "completion_tokens" in usage:  # present but no count: named, never dropped silently
            sample.token_disagreement = (
                f"the server's usage.completion_tokens is {printable(json.dumps(usage['completion_tokens']))[:40]}, "
                f"not a token count; the bench counts the chunks of text the stream carried")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and count(details.get("cached_tokens")) is not None:
            sample.cached_tokens = details["cached_tokens"]
    for choice in chunk.get("choices") or []:
        meta = choice.get("meta_info")
        value = meta.get("spec_accept_length") if isinstance(meta, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < MAX_COUNT:
            sample.accept_length = float(value)


def count(value) -> Optional[int]:
    """A token count as servers report it: a whole number from 0 to MAX_COUNT (else None: not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT else None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection"
    if isinstance(exc, (ConnectionResetError, http.client.IncompleteRead)):
        return "the connection was cut mid-response"
    return " ".join(str(getattr(exc, "strerror", None) or exc or type(exc).__name__).split())[:200]


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
        try:
            if "{" in line:  # name{labels} value [timestamp]
                name, rest = line[:line.index("{")], line[line.rindex("}") + 1:]
            else:
                name, _, rest = line.partition(" ")
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue  # not a sample line
        if math.isfinite(value):
            out[name] = out.get(name, 0.0) + value
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
    return value if value and 0 < value < MAX_COUNT else None


# ---- the server process, when the bench starts it

class ServerProcess:
    """A server started from a shell command, its output in a log file, stopped with its process group."""

    def __init__(self, command: str, log_path: str, env: Optional[dict] = None):
        self.command, self.log_path = command, log_path
        try:
            os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
            self._log = open_out(log_path, append=True, binary=True)  # no link planted in --out followed
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
