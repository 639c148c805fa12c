"""The seed's benchmark methodology as named suites, their statistics and their tables.

- prefill: uncached prompts of each requested size, one generated token; a unique nonce opens every
  prompt, so no request is served from the prefix cache (a repeated prompt measures the cache).
- decode: the code-review prompt, temperature 0, a fixed output length (ignore_eos), median of N runs;
  its warm-up is the prompt behind a nonce, so the first run's TTFT is uncached (the repeats' TTFT is
  reported apart as decode_ttft_prefix_cached_s).
- story: five fixed story prompts, temperature 0, one run each, the median across the five (the
  warm-up is a nonce'd copy of the first, so all five are measured unseen).
- tail: N sequential requests of ~1,569 prompt tokens and 64 generated; TTFT p50/p90/p99, latency p99.
- grid: input sizes x concurrencies (seed 002): max(10, 3*c) prompts per cell; TTFT mean/p99.

Standard library only: this file runs inside the images as well as on the host.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from bench_client import BenchError, Sample, Server, open_out, request_body, stream

PROMPTS = Path(__file__).resolve().parent / "bench_prompts"
SUITES = ("prefill", "decode", "story", "tail", "grid")
TAIL_PROMPT_TOKENS = 1569  # the seed's tail test: ~1,569 prompt tokens, 64 generated, 100 requests
NONCE_CHECK_FLOOR_S = 0.005  # a cache hit the nonce check names saves at least this much TTFT
CHARS_PER_TOKEN = 4.0      # first guess for English prose; calibrated on the server's own count


def read_prompt(name: str) -> str:
    try:
        return (PROMPTS / name).read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"cannot read the bench prompt {PROMPTS / name}: {exc.strerror}") from None


def stories() -> list[str]:
    return [s.strip() for s in read_prompt("stories.txt").split("\n---\n") if s.strip()]


class PromptMaker:
    """Prompts of about N tokens from the shipped prose, each opened by a unique nonce. Tokens are
    modelled as overhead + body characters / ratio; `calibrate` fits both from the server's own
    prompt_tokens for two sizes, so 'requested' and 'actual' agree to a few tokens whatever the tokenizer."""

    TAIL = "\n\nSummarize the text above in one sentence."

    def __init__(self) -> None:
        self.corpus = " ".join(read_prompt("prose.txt").split())
        self.ratio = CHARS_PER_TOKEN
        self.overhead = (len("[benchmark run ] ") + 32 + len(self.TAIL)) / CHARS_PER_TOKEN

    def body_chars(self, tokens: int) -> int:
        return max(1, int((tokens - self.overhead) * self.ratio))

    def make(self, tokens: int, nonce: Optional[str] = None) -> str:
        want = self.body_chars(tokens)
        body = (self.corpus + " ") * (want // (len(self.corpus) + 1) + 1)
        return f"[benchmark run {nonce or uuid.uuid4().hex}] " + body[:want] + self.TAIL

    def calibrate(self, server: Server, small: int = 256, large: int = 2048) -> Optional[int]:
        """Two requests (about `small` and `large` tokens, one token generated each): ratio and overhead
        from their usage.prompt_tokens (the guesses stay when the server reports no usage)."""
        counts = []
        for tokens in (small, large):
            chars = self.body_chars(tokens)
            sample = stream(server, request_body(server, self.make(tokens), 1), Sample("calibrate", "calibrate", 0))
            if not sample.ok:
                raise BenchError(f"calibration request: {sample.error}")
            counts.append((chars, sample.prompt_tokens))
        (c1, t1), (c2, t2) = counts
        if t1 and t2:
            ratio = (c2 - c1) / (t2 - t1) if t2 > t1 else 0.0
            overhead = t1 - c1 / ratio if ratio else 0.0
            if not (0.5 <= ratio <= 16 and -64 <= overhead <= 4096):  # no tokenizer does outside this
                raise BenchError(f"calibration: the server counted {t1} and {t2} prompt tokens for {c1} and {c2} "
                                 f"characters of prose, which no tokenizer does; --calibrate off keeps the guess")
            self.ratio, self.overhead = ratio, overhead
        return t2


def control_prompt(maker: "PromptMaker", tokens: int, n: int = 0) -> str:
    """A prompt of about `tokens` tokens that shares no prefix with any `maker.make` prompt whatever its
    nonce does, nor with control `n` of another number: the prose's words in reverse order, behind a
    different opener."""
    words = " ".join(reversed(maker.corpus.split()))
    want = maker.body_chars(tokens)
    body = (words + " ") * (want // (len(words) + 1) + 1)
    return f"(control prompt {n} {uuid.uuid4().hex}) " + body[:want] + maker.TAIL


def nonce_check(server: Server, maker: "PromptMaker", tokens: int = TAIL_PROMPT_TOKENS, rounds: int = 3) -> dict:
    """Does the nonce keep the server's prefix cache out of the measurements? One-token requests: a first
    of the shape (it pays any set-up), then `rounds` pairs of a fresh prompt and a control that shares no
    prefix with anything by construction (alternating, so a drift in the server's speed hits both), then
    the first fresh prompt again (a prefix-cache hit where the server caches). The medians are compared:
    one request's TTFT on a loaded host is noise (a 2 ms stand-in once took 9.5 ms). Fresh prompts answered
    in under half the control's median TTFT (and over NONCE_CHECK_FLOOR_S sooner: a server that answers
    in a millisecond or two shows noise, not a cache), or whose prompt tokens the server counts as mostly
    cached, were served from the cache: the nonce failed, and every TTFT the suites would measure is a
    cache hit. A batch that is faster by its times alone is checked again with new prompts (CI's loaded
    host once gave a server with no prefix cache a 0.11 s fresh median against 0.27 s): a cache shows in
    both batches, noise seldom twice. That is a BenchError (one line), not a figure."""
    def one(prompt: str) -> Sample:
        sample = stream(server, request_body(server, prompt, 1), Sample("nonce-check", "nonce-check", 0))
        if not sample.ok:
            raise BenchError(f"nonce check request: {sample.error}")
        return sample

    def batch(first_prompt: str, number: int) -> tuple[float, float, Optional[Sample], bool]:
        fresh, control = [], []
        for i in range(rounds):
            fresh.append(one(first_prompt if i == 0 else maker.make(tokens)))
            control.append(one(control_prompt(maker, tokens, number * rounds + i)))
        fresh_s = statistics.median([f.ttft_s for f in fresh])
        control_s = statistics.median([c.ttft_s for c in control])
        hit = next((f for f in fresh if f.prompt_tokens and (f.cached_tokens or 0) > 0.5 * f.prompt_tokens), None)
        faster = fresh_s < 0.5 * control_s and control_s - fresh_s > NONCE_CHECK_FLOOR_S
        return fresh_s, control_s, hit or (fresh[0] if faster else None), hit is not None

    one(maker.make(tokens))
    first_prompt = maker.make(tokens)
    fresh_s, control_s, suspect, counted = batch(first_prompt, 0)
    batches = 1
    if suspect is not None and not counted:  # the times alone say so: a second batch of new prompts decides
        fresh_s, control_s, suspect, counted = batch(maker.make(tokens), 1)
        batches = 2
    repeat = one(first_prompt)
    out = {"nonce_check_fresh_ttft_s": round(fresh_s, 4), "nonce_check_repeat_ttft_s": round(repeat.ttft_s, 4),
           "nonce_check_control_ttft_s": round(control_s, 4), "nonce_check_batches": batches}
    if suspect is not None:
        cached = suspect.cached_tokens if counted else 0
        prompt_tokens = suspect.prompt_tokens or tokens
        raise BenchError(f"nonce check: a fresh prompt of {prompt_tokens} tokens was served from the "
                         f"prefix cache (median TTFT {fresh_s:.4f} s against {control_s:.4f} s for controls of "
                         f"the same length{f', {cached} tokens cached' if cached else ''}"
                         f"{', in two batches' if batches == 2 else ''}): every TTFT would "
                         f"measure the cache, so nothing was measured")
    visible = repeat.ttft_s < 0.5 * control_s and control_s - repeat.ttft_s > NONCE_CHECK_FLOOR_S
    out["nonce_check"] = "ok" if visible else "ok, no prefix cache visible"
    return out


# ---- statistics

def percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def numbers(values: list, scale: float = 1.0) -> list[float]:
    """The finite numbers among the values, scaled (None, NaN and infinities are not measurements)."""
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = v * scale
            if math.isfinite(v):
                out.append(v)
    return out


def spread(prefix: str, values: list, scale: float = 1.0, digits: int = 4) -> dict:
    """prefix (median), prefix_min, prefix_max, prefix_n of the values that are numbers."""
    nums = numbers(values, scale)
    if not nums:
        return {}
    def r(v: float):  # digits 0: a count, written as an integer (2048, not 2048.0)
        return int(round(v)) if digits == 0 else round(v, digits)
    return {prefix: r(statistics.median(nums)), f"{prefix}_min": r(min(nums)), f"{prefix}_max": r(max(nums)),
            f"{prefix}_n": len(nums)}


def itl(prefix: str, samples: list, scale: float = 1000.0, digits: int = 3) -> dict:
    """ITL as vLLM's and SGLang's serving benchmarks report it: every gap between streamed tokens of every
    request, pooled; prefix_mean, prefix_p50 (the median), prefix_p99."""
    nums = numbers([g for s in samples for g in s.itl_s], scale)
    if not nums:
        return {}
    return {f"{prefix}_mean": round(statistics.fmean(nums), digits),
            f"{prefix}_p50": round(percentile(nums, 50), digits), f"{prefix}_p99": round(percentile(nums, 99), digits)}


def output_throughput(samples: list, duration_s: float) -> float:
    """Output throughput as `vllm bench serve` and SGLang's `bench_serving` define it: all output tokens
    over the run's duration (from the first measured request sent to the last one finished)."""
    return round(sum(s.completion_tokens or 0 for s in samples) / max(duration_s, 1e-9), 2)


def tails(prefix: str, values: list, scale: float = 1.0, digits: int = 4) -> dict:
    nums = numbers(values, scale)
    if not nums:
        return {}
    out = {f"{prefix}_mean": round(statistics.fmean(nums), digits)}
    for q in (50, 90, 99):
        out[f"{prefix}_p{q}"] = round(percentile(nums, q), digits)
    out[f"{prefix}_max"] = round(max(nums), digits)
    return out


# ---- running requests

@dataclass
class Run:
    """One suite's run against one server: its options, the samples so far, where they are written."""

    server: Server
    maker: PromptMaker
    sizes: tuple = (2048, 8192, 32768)
    runs: int = 3
    max_tokens: int = 256
    requests: int = 100
    concurrencies: tuple = (1, 5, 10, 20)
    grid_sizes: tuple = (5000, 10000, 20000)
    warmup: int = 1
    on_sample: Callable[[Sample], None] = lambda s: None
    samples: list = field(default_factory=list)
    progress: Callable[[str, str, int, int], None] = lambda suite, case, done, of: None

    def one(self, suite: str, case: str, index: int, prompt, max_tokens: int, of: int = 0) -> Sample:
        sample = stream(self.server, request_body(self.server, prompt, max_tokens), Sample(suite, case, index))
        self.samples.append(sample)
        self.on_sample(sample)
        self.progress(suite, case, index + 1, of)
        if not sample.ok:
            raise BenchError(f"{suite} request {index + 1} ({case}): {sample.error}")
        return sample

    def warm(self, prompt_for: Callable[[], object], max_tokens: int) -> None:
        """Unmeasured requests first: the server's first request of a shape pays for what it sets up."""
        for _ in range(self.warmup):
            sample = stream(self.server, request_body(self.server, prompt_for(), max_tokens),
                            Sample("warmup", "warmup", 0))
            if not sample.ok:
                raise BenchError(f"warm-up request: {sample.error}")

    def parallel(self, suite: str, case: str, prompts: list, concurrency: int, max_tokens: int) -> list[Sample]:
        """`concurrency` streams at a time until every prompt is sent; then any failure is raised."""
        results: list[Optional[Sample]] = [None] * len(prompts)
        lock = threading.Lock()
        next_index = [0]
        finished = [0]

        def worker() -> None:
            while True:
                with lock:
                    i = next_index[0]
                    next_index[0] += 1
                if i >= len(prompts):
                    return
                try:
                    results[i] = stream(self.server, request_body(self.server, prompts[i], max_tokens),
                                        Sample(suite, case, i))
                except Exception as exc:  # noqa: BLE001  a thread's failure is the request's, never lost
                    results[i] = Sample(suite, case, i, error=f"{type(exc).__name__}: {exc}"[:300])
                with lock:
                    finished[0] += 1
                    done_now = finished[0]
                self.progress(suite, case, done_now, len(prompts))

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(concurrency, len(prompts)))]
        try:
            for t in threads:
                t.start()
        except RuntimeError as exc:  # the host's thread limit
            raise BenchError(f"{suite}: cannot start {concurrency} streams ({exc})") from None
        for t in threads:
            t.join()
        done = [s for s in results if s is not None]
        for s in done:
            self.samples.append(s)
            self.on_sample(s)
        failed = [s for s in done if not s.ok]
        if failed:
            raise BenchError(f"{suite} request {failed[0].index + 1} ({case}): {failed[0].error}")
        return done


# ---- the suites: each measures, and returns its flat summary

def prefill(run: Run) -> dict:
    run.warm(lambda: run.maker.make(min(run.sizes)), 1)
    out = {}
    for size in run.sizes:
        got = [run.one("prefill", f"{size}", i, run.maker.make(size), 1, run.runs) for i in range(run.runs)]
        out.update(spread(f"prefill_{size}_ttft_s", [s.ttft_s for s in got]))
        out.update(spread(f"prefill_{size}_prompt_tokens", [s.prompt_tokens for s in got], digits=0))
        out.update(spread(f"prefill_{size}_tps", [s.prompt_tokens / s.ttft_s for s in got
                                                   if s.prompt_tokens and s.ttft_s], digits=1))
        cached = [s.cached_tokens for s in got if s.cached_tokens is not None]
        if cached:
            out[f"prefill_{size}_cached_tokens_max"] = max(cached)
    points = [(out.get(f"prefill_{n}_prompt_tokens"), out.get(f"prefill_{n}_ttft_s")) for n in run.sizes]
    out.update(marginal_rate([(t, x) for t, x in points if t and x]))
    return out


def marginal_rate(points: list) -> dict:
    """The prefill rate with the fixed per-request cost taken out: the least-squares line through
    (prompt tokens, median TTFT) of two or more sizes, as prefill_marginal_tps (1 / its slope) and
    prefill_fixed_s (its intercept). prefill_N_tps, tokens / TTFT, has the fixed cost in it."""
    if len({t for t, _ in points}) < 2:
        return {}
    n = len(points)
    mt, mx = sum(t for t, _ in points) / n, sum(x for _, x in points) / n
    slope = sum((t - mt) * (x - mx) for t, x in points) / sum((t - mt) ** 2 for t, _ in points)
    if slope <= 0:  # TTFT that does not grow with the prompt: no rate to give
        return {}
    return {"prefill_marginal_tps": round(1.0 / slope, 1), "prefill_fixed_s": round(mx - slope * mt, 4)}


def unseen(prompt: str) -> str:
    """The prompt behind a nonce of its own: a warm-up of the same shape that shares no prefix with it
    (a warm-up that sent the measured prompt itself made every TTFT after it a prefix-cache hit)."""
    return f"[warm-up {uuid.uuid4().hex}] " + prompt


def decode(run: Run) -> dict:
    prompt = read_prompt("code-review.txt")
    run.warm(lambda: unseen(prompt), 16)
    start = time.monotonic()
    got = [run.one("decode", "code-review", i, prompt, run.max_tokens, run.runs) for i in range(run.runs)]
    duration = time.monotonic() - start
    # the same prompt every run (temperature 0: the texts must agree), so only the first run's TTFT is
    # the server's first sight of it; the repeats' TTFT is a prefix-cache hit wherever the server caches
    return {**spread("decode_tg_tps", [s.decode_tps for s in got], digits=2),
            **spread("decode_tpot_ms", [s.tpot_s for s in got], scale=1000.0, digits=3),
            **spread("decode_ttft_s", [got[0].ttft_s]),
            **spread("decode_ttft_prefix_cached_s", [s.ttft_s for s in got[1:]]),
            **spread("decode_accept_length", [s.accept_length for s in got], digits=3),
            **spread("decode_e2el_s", [s.latency_s for s in got]),
            **itl("decode_itl_ms", got),
            "decode_output_throughput_tps": output_throughput(got, duration),
            "decode_completion_tokens": got[-1].completion_tokens,
            "decode_outputs_identical": len({s.text_sha256 for s in got}) == 1}


def story(run: Run) -> dict:
    prompts = stories()
    run.warm(lambda: unseen(prompts[0]), 16)
    start = time.monotonic()
    got = [run.one("story", f"story-{i + 1}", i, p, run.max_tokens, len(prompts)) for i, p in enumerate(prompts)]
    duration = time.monotonic() - start
    joined = "".join(s.text_sha256 for s in got)
    return {**spread("story_tg_tps", [s.decode_tps for s in got], digits=2),
            **spread("story_tpot_ms", [s.tpot_s for s in got], scale=1000.0, digits=3),
            **spread("story_ttft_s", [s.ttft_s for s in got]),
            **spread("story_accept_length", [s.accept_length for s in got], digits=3),
            **spread("story_e2el_s", [s.latency_s for s in got]),
            **itl("story_itl_ms", got),
            "story_output_throughput_tps": output_throughput(got, duration),
            "story_outputs_sha256": hashlib.sha256(joined.encode()).hexdigest()[:16]}


def tail(run: Run) -> dict:
    run.warm(lambda: run.maker.make(TAIL_PROMPT_TOKENS), 64)
    start = time.monotonic()
    got = [run.one("tail", "tail", i, run.maker.make(TAIL_PROMPT_TOKENS), 64, run.requests)
           for i in range(run.requests)]
    duration = time.monotonic() - start
    return {**tails("tail_ttft_s", [s.ttft_s for s in got]),
            **tails("tail_latency_s", [s.latency_s for s in got]),
            **spread("tail_decode_tps", [s.decode_tps for s in got], digits=2),
            **spread("tail_tpot_ms", [s.tpot_s for s in got], scale=1000.0, digits=3),
            **itl("tail_itl_ms", got),
            "tail_output_throughput_tps": output_throughput(got, duration),
            **spread("tail_prompt_tokens", [s.prompt_tokens for s in got], digits=0),
            "tail_requests": len(got)}


def grid(run: Run) -> dict:
    out = {}
    for size in run.grid_sizes:
        run.warm(lambda: run.maker.make(size), 16)
        for conc in run.concurrencies:
            prompts = [run.maker.make(size) for _ in range(max(10, 3 * conc))]
            start = time.monotonic()
            got = run.parallel("grid", f"{size}x{conc}", prompts, conc, run.max_tokens)
            wall = time.monotonic() - start
            key = f"grid_{size}_c{conc}"
            stats = tails(f"{key}_ttft_ms", [s.ttft_s for s in got], scale=1000.0, digits=2)
            out.update({k: v for k, v in stats.items() if k.endswith(("_mean", "_p90", "_p99"))})
            out[f"{key}_output_tps"] = output_throughput(got, wall)
            out.update({k: v for k, v in spread(f"{key}_tpot_ms", [s.tpot_s for s in got], scale=1000.0,
                                                  digits=3).items() if not k.endswith(("_min", "_max", "_n"))})
            out.update({k: v for k, v in itl(f"{key}_itl_ms", got).items() if k.endswith("_p99")})
            out.update({k: v for k, v in spread(f"{key}_accept_length", [s.accept_length for s in got],
                                                  digits=3).items() if not k.endswith(("_min", "_max", "_n"))})
    return out


RUNNERS: dict[str, Callable[[Run], dict]] = {"prefill": prefill, "decode": decode, "story": story, "tail": tail,
                                             "grid": grid}


# ---- tables in the seed's layout

def _f(value, fmt: str, unit: str = "") -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:{fmt}}{unit}"


def table(suite: str, s: dict) -> str:
    rows: list[list[str]]
    if suite == "prefill":
        head = ["Requested tokens", "Actual prompt tokens", "Median TTFT", "Prefill rate"]
        sizes = sorted({int(k.split("_")[1]) for k in s if k.startswith("prefill_") and k.endswith("_ttft_s")})
        rows = [[f"{n:,}", _f(s.get(f"prefill_{n}_prompt_tokens"), ",.0f"), _f(s.get(f"prefill_{n}_ttft_s"), ".3f", " s"),
                 _f(s.get(f"prefill_{n}_tps"), ",.0f", " tok/s")] for n in sizes]
    elif suite in ("decode", "story"):
        head = ["Workload", "Single-stream 1/TPOT (median)", "1/TPOT range", "Median TPOT", "Output throughput",
                "Median E2E latency", "Accept length", "Runs"]
        label = "Code review" if suite == "decode" else "Story chat"
        rows = [[label, _f(s.get(f"{suite}_tg_tps"), ".1f", " tok/s"),
                 f"{_f(s.get(f'{suite}_tg_tps_min'), '.1f')}-{_f(s.get(f'{suite}_tg_tps_max'), '.1f')}",
                 _f(s.get(f"{suite}_tpot_ms"), ".2f", " ms"), _f(s.get(f"{suite}_output_throughput_tps"), ".1f", " tok/s"),
                 _f(s.get(f"{suite}_e2el_s"), ".3f", " s"), _f(s.get(f"{suite}_accept_length"), ".2f"),
                 str(s.get(f"{suite}_tg_tps_n", 0))]]
    elif suite == "tail":
        head = ["TTFT p50", "TTFT p90", "TTFT p99", "Latency p99", "Single-stream 1/TPOT (median)",
                "Output throughput", "ITL p99", "Requests"]
        rows = [[_f(s.get("tail_ttft_s_p50"), ".3f", " s"), _f(s.get("tail_ttft_s_p90"), ".3f", " s"),
                 _f(s.get("tail_ttft_s_p99"), ".3f", " s"), _f(s.get("tail_latency_s_p99"), ".3f", " s"),
                 _f(s.get("tail_decode_tps"), ".1f", " tok/s"), _f(s.get("tail_output_throughput_tps"), ".1f", " tok/s"),
                 _f(s.get("tail_itl_ms_p99"), ".2f", " ms"), str(s.get("tail_requests", 0))]]
    elif suite == "grid":
        head = ["Input", "Concurrency", "TTFT mean (ms)", "TTFT p90 (ms)", "TTFT p99 (ms)", "Accept length",
                "Output throughput (tok/s)"]
        cells = sorted({(int(k.split("_")[1]), int(k.split("_")[2][1:])) for k in s
                        if k.startswith("grid_") and k.endswith("_ttft_ms_mean")})
        rows = [[f"{n:,}", str(c), _f(s.get(f"grid_{n}_c{c}_ttft_ms_mean"), ".1f"),
                 _f(s.get(f"grid_{n}_c{c}_ttft_ms_p90"), ".1f"), _f(s.get(f"grid_{n}_c{c}_ttft_ms_p99"), ".1f"),
                 _f(s.get(f"grid_{n}_c{c}_accept_length"), ".2f"), _f(s.get(f"grid_{n}_c{c}_output_tps"), ".1f")]
                for n, c in cells]
    elif suite == "ksweep":
        head = ["DSpark k", "Single-stream 1/TPOT (median)", "Median TPOT", "Accept length", "Note"]
        ks = sorted({int(k.split("_")[1][1:]) for k in s if k.startswith("ksweep_k") and k.endswith("_tg_tps")})
        best = max(ks, key=lambda k: s.get(f"ksweep_k{k}_tg_tps") or 0) if ks else None
        rows = [[str(k), _f(s.get(f"ksweep_k{k}_tg_tps"), ".1f", " tok/s"), _f(s.get(f"ksweep_k{k}_tpot_ms"), ".2f", " ms"),
                 _f(s.get(f"ksweep_k{k}_accept_length"), ".2f"), "Best" if k == best else ""] for k in ks]
    else:
        raise BenchError(f"no table for suite {suite!r}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_samples(path: Path) -> Callable[[Sample], None]:
    """A callback appending each sample to a JSONL file as it is measured (partial runs keep theirs)."""
    def write(sample: Sample) -> None:
        try:
            with open_out(path, append=True) as fh:  # no link planted in --out followed
                fh.write(json.dumps(sample.record(), sort_keys=True) + "\n")
        except OSError as exc:
            raise BenchError(f"cannot write {path}: {exc.strerror}") from None
    return write
