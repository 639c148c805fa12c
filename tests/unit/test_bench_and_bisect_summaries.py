"""How the bench and bisect summarise what they measured: the median, not the mean; p99, not p90; TTFT
at the first content token, not at a chat role-only chunk; the compile count over files, not kinds;
bisect's run time the median of the runs, not the last; a value exactly at the threshold passes. (Each
of these once survived a held-out mutation, issue 32.)"""

from __future__ import annotations

import json
import math
import sys

import pytest
from pathlib import Path

from servebuild.check import bisect
from support import REPO_ROOT
from unit.test_bench_wire import StandIn

sys.path.insert(0, str(REPO_ROOT / "servebuild" / "tools"))
import bench_client  # noqa: E402
import bench_suites  # noqa: E402
import servebuild_bench  # noqa: E402


# ------------------------------------------------------------------ the median, not the mean


def test_the_bench_summary_is_the_median_not_the_mean():
    got = bench_suites.spread("decode_tg_tps", [1.0, 2.0, 30.0])  # mean 11
    assert got == {"decode_tg_tps": 2.0, "decode_tg_tps_min": 1.0, "decode_tg_tps_max": 30.0, "decode_tg_tps_n": 3}
    assert bench_suites.spread("n", [10, 20, 30, 1000], digits=0)["n"] == 25  # even count: the middle two's mean


def test_bisect_metrics_are_the_median_of_the_runs_not_the_mean():
    row = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    for value in (1.0, 2.0, 30.0):
        row.add(0, 10.0, {"tps": value}, "log", None)
    assert row.metrics["tps"] == 2.0


# ------------------------------------------------------------------ p99, not p90


def test_tails_p99_is_the_99th_percentile_not_the_90th():
    got = bench_suites.tails("tail_ttft_s", [float(v) for v in range(101)])  # 0..100: the q-th is q
    assert got["tail_ttft_s_p50"] == 50.0 and got["tail_ttft_s_p90"] == 90.0 and got["tail_ttft_s_p99"] == 99.0
    assert got["tail_ttft_s_mean"] == 50.0 and got["tail_ttft_s_max"] == 100.0


def test_itl_p99_is_the_99th_percentile():
    times = [0.0]
    for gap in range(101):  # gaps of 0, 1, ..., 100 ms
        times.append(times[-1] + gap / 1000)
    samples = [bench_client.Sample("d", "x", 0, ok=True, token_times=times)]
    got = bench_suites.itl("x_itl_ms", samples)
    assert got["x_itl_ms_p99"] == pytest.approx(99.0) and got["x_itl_ms_p50"] == pytest.approx(50.0)


# ------------------------------------------------------------------ TTFT at the first content token


def chat_events(pause_pieces: int) -> list[bytes]:
    """A chat stream: a role-only opener (content ""), then `pause_pieces` keep-alive comments, then text."""
    opener = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    events = [f"data: {json.dumps(opener)}\n\n".encode()]
    events += [b": keep-alive\n\n"] * pause_pieces
    for text in ("a", "b"):
        events.append(f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': text}}]})}\n\n".encode())
    last = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    events.append(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
    return events


def test_ttft_is_taken_at_the_first_content_token_not_the_role_opener():
    server = StandIn(chat_events(3), pause=0.1)  # the text comes >= 0.4 s after the opener
    try:
        s = bench_client.Server(server.url, model="stand-in", api="chat", request_timeout_s=20)
        sample = bench_client.stream(s, bench_client.request_body(s, "hello", 2), bench_client.Sample("d", "x", 0))
    finally:
        server.close()
    assert sample.ok, sample.error
    assert sample.ttft_s >= 0.35, sample.ttft_s
    assert len(sample.token_times) == 2 and sample.token_times[0] == sample.ttft_s


# ------------------------------------------------------------------ compiles: files, not kinds


def test_the_bench_census_counts_files_not_kinds(tmp_path, monkeypatch):
    monkeypatch.setattr(servebuild_bench, "CACHE_ROOT", str(tmp_path))
    census = servebuild_bench.Census("auto")
    assert census.on
    census.listing.write_text("{}")
    monkeypatch.setattr(census, "_tool", lambda *a: {"changed": {"triton": 5, "flashinfer": 1}})
    assert census.stop() == {"jit_compiled_files": 6}


def test_the_census_listing_is_never_left_beside_the_results(tmp_path, monkeypatch):
    """A suite that fails half-way (a full --out) left .census-listing.json in --out whenever /cache
    existed: the listing lives in a private folder now, removed whatever the suite did."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    cache.mkdir(), out.mkdir()
    monkeypatch.setattr(servebuild_bench, "CACHE_ROOT", str(cache))
    census = servebuild_bench.Census("auto")
    census.start()  # the real cache tool writes the listing
    assert census.listing.is_file() and not census.listing.is_relative_to(out)
    with pytest.raises(OSError):
        try:
            raise OSError(28, "No space left on device")
        finally:
            census.stop()
    assert not Path(census.folder).exists() and list(out.iterdir()) == []
    assert servebuild_bench.Census("off").stop() == {}


def test_bisect_counts_compiled_files_not_kinds():
    out = f'{bisect.CACHE_MARK} {{"changed": {{"triton": 5, "flashinfer": 1}}}}\n{{"ttft": 3}}\n'
    assert bisect.parse_metrics(out)["jit_compiled_files"] == 6


# ------------------------------------------------------------------ bisect's run time; the threshold


def test_bisect_run_time_is_the_median_of_the_runs_not_the_last():
    row = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    for run_s in (5.0, 1.0, 30.0):  # median 5, last 30, mean 12
        row.add(0, run_s, {}, "log", None)
    assert row.run_s == 5.0


@pytest.mark.parametrize("value,expected", [(3.0, "pass"), (3, "pass"), (2.999, "fail"), (3.001, "pass")])
def test_a_value_exactly_at_the_threshold_passes(value, expected):
    row = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0, exit=0, metrics={"tok_s": value})
    assert bisect.outcome(row, "tok_s", 3.0) == expected


# ------------------------------------------------------------------ issue 45, item 7: what each summary is made of


class Maker:
    def make(self, tokens, nonce=None):
        return "x" * tokens


def scripted(samples: list, **options) -> "bench_suites.Run":
    """A Run whose requests return `samples` in turn (no server): what a suite makes of what it measured."""
    run = bench_suites.Run(server=None, maker=Maker(), **options)
    queue = list(samples)
    run.warm = lambda *a, **k: None
    run.one = lambda *a, **k: queue.pop(0)
    return run


def sample(**fields) -> "bench_client.Sample":
    return bench_client.Sample("s", "c", 0, ok=True, **fields)


def test_decode_outputs_differ_when_one_run_says_something_else():
    texts = ["a" * 64, "a" * 64, "b" * 64]
    got = bench_suites.decode(scripted([sample(text_sha256=t, ttft_s=0.1, latency_s=1.0) for t in texts], runs=3))
    assert got["decode_outputs_identical"] is False
    same = bench_suites.decode(scripted([sample(text_sha256="a" * 64, ttft_s=0.1, latency_s=1.0)] * 3, runs=3))
    assert same["decode_outputs_identical"] is True


def test_the_tail_e2e_latency_is_the_requests_latency_not_their_ttft():
    got = bench_suites.tail(scripted([sample(ttft_s=0.1, latency_s=2.0 + i) for i in range(5)], requests=5))
    assert got["tail_latency_s_p50"] == 4.0 and got["tail_latency_s_max"] == 6.0
    assert got["tail_ttft_s_p50"] == 0.1


def test_the_prefill_rate_is_prompt_tokens_over_ttft_not_completion_tokens():
    got = bench_suites.prefill(
        scripted([sample(prompt_tokens=2048, completion_tokens=1, ttft_s=0.5) for _ in range(3)], sizes=(2048,))
    )
    assert got["prefill_2048_tps"] == 4096.0 and got["prefill_2048_prompt_tokens"] == 2048


def test_booleans_nan_and_infinities_are_not_numbers_of_a_summary():
    assert bench_suites.numbers([True, False, 1.0, math.nan, math.inf, -math.inf, None, "2", 3]) == [1.0, 3]
    assert bench_suites.spread("x", [True, math.nan, 2.0, math.inf]) == {"x": 2.0, "x_min": 2.0, "x_max": 2.0, "x_n": 1}
    assert bench_suites.spread("x", [True, math.nan]) == {}


def test_a_one_run_row_has_no_spread_and_two_runs_do():
    row = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    row.add(0, 1.0, {"tps": 5.0}, "log", None)
    assert row.spread == {} and row.metrics == {"tps": 5.0}
    row.add(0, 1.0, {"tps": 7.0}, "log", None)
    assert row.spread == {"tps": [5.0, 7.0]}


@pytest.mark.parametrize("odd", [math.nan, math.inf, -math.inf, True])
def test_a_nan_infinite_or_boolean_run_value_is_not_in_the_median(odd):
    row = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    for value in (1.0, odd, 3.0):
        row.add(0, 1.0, {"tps": value}, "log", None)
    assert row.metrics["tps"] == 2.0 and row.spread["tps"] == [1.0, 3.0]
    assert not bisect._number(odd)


def test_the_nonce_check_calls_a_prompt_cached_past_half_its_tokens_a_hit(monkeypatch):
    """A fresh prompt the server counts as more than half cached is a prefix-cache hit; exactly half is not."""
    maker = bench_suites.PromptMaker()
    for cached, hit in ((501, True), (500, False)):

        def stream(server, body, sample, cached=cached):  # stands in for the server: equal times, `cached` of 1000
            sample.ok, sample.ttft_s, sample.prompt_tokens, sample.cached_tokens = True, 0.1, 1000, cached
            return sample

        monkeypatch.setattr(bench_suites, "stream", stream)
        monkeypatch.setattr(bench_suites, "request_body", lambda server, prompt, max_tokens: prompt)
        if hit:
            with pytest.raises(bench_client.BenchError, match="1000 tokens was served from the prefix cache"):
                bench_suites.nonce_check(None, maker, 64)
        else:
            assert bench_suites.nonce_check(None, maker, 64)["nonce_check"].startswith("ok")


def test_the_grid_sends_three_prompts_per_stream_and_at_least_ten():
    sent = {}
    run = bench_suites.Run(server=None, maker=Maker(), grid_sizes=(8,), concurrencies=(1, 5, 20))
    run.warm = lambda *a, **k: None

    def parallel(suite, case, prompts, concurrency, max_tokens):
        sent[concurrency] = len(prompts)
        return [sample(ttft_s=0.1, latency_s=1.0, completion_tokens=4) for _ in prompts]

    run.parallel = parallel
    bench_suites.grid(run)
    assert sent == {1: 10, 5: 15, 20: 60}
