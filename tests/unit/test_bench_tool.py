"""The bench's pieces that need no server (the servers are in tests/integration/test_bench.py), and
bisect's reading of what a row printed: percentiles, Prometheus text, SSE chunks, metrics files,
per-variant profiles, medians over repeats."""

from __future__ import annotations

import base64
import json
import random
import statistics
import sys

import pytest

from servebuild.check import bisect
from servebuild.errors import InputError, RecipeError
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "servebuild" / "tools"))
import bench_client  # noqa: E402
import bench_suites  # noqa: E402


def test_percentiles_interpolate_like_the_inclusive_quantiles():
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 101):
        values = [rng.expovariate(1.0) for _ in range(n)]
        if n > 1:
            cuts = statistics.quantiles(values, n=100, method="inclusive")
            for q in (50, 90, 99):
                assert bench_suites.percentile(values, q) == pytest.approx(cuts[q - 1])
        assert bench_suites.percentile(values, 100) == max(values)
        assert bench_suites.percentile(values, 0) == min(values)
    assert bench_suites.percentile([], 99) is None


VLLM_METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="dsv4"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="dsv4"} 180.0
vllm:num_requests_running{engine="0",model_name="dsv4"} 1.0
"""
SGLANG_METRICS = 'sglang:spec_accept_length{model_name="dsv4",tp_rank="0"} 5.22\nsglang:num_running_reqs 1\n'


def parsed(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line[: line.index("{")] if "{" in line else line.split(" ")[0]
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_accept_length_from_vllm_counters_and_the_sglang_gauge(monkeypatch):
    for text, expected in ((VLLM_METRICS, parsed(VLLM_METRICS)), (SGLANG_METRICS, parsed(SGLANG_METRICS))):
        monkeypatch.setattr(bench_client, "get", lambda server, path, **kw: (200, text.encode()))
        assert bench_client.scrape(bench_client.Server("http://x:1")) == expected
    before = {"vllm:spec_decode_num_drafts_total": 10.0, "vllm:spec_decode_num_accepted_tokens_total": 30.0}
    assert bench_client.accept_length(before, parsed(VLLM_METRICS)) == pytest.approx(1 + 150 / 30)
    assert bench_client.accept_length({}, parsed(SGLANG_METRICS)) == pytest.approx(5.22)
    assert bench_client.accept_length({}, {"vllm:num_requests_running": 1.0}) is None


def test_a_chat_role_opener_is_not_the_first_token():
    assert bench_client._chunk_text({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, "chat") is None
    assert bench_client._chunk_text({"choices": [{"delta": {"content": "hi"}}]}, "chat") == "hi"
    assert bench_client._chunk_text({"choices": [{"text": ""}]}, "completions") == ""  # a partial UTF-8 token
    assert bench_client._chunk_text({"choices": [], "usage": {"completion_tokens": 3}}, "completions") is None
    assert bench_client._chunk('{"choices": "x"}') is None and bench_client._chunk("[1]") is None


def test_tpot_and_decode_rate_come_from_ttft_and_the_end_of_the_stream():
    s = bench_client.Sample(
        "decode", "x", 0, ok=True, completion_tokens=5, ttft_s=0.5, latency_s=0.9, token_times=[0.5, 0.6, 0.7, 0.8, 0.9]
    )
    assert s.tpot_s == pytest.approx(0.1) and s.decode_tps == pytest.approx(10.0)
    assert "token_times" not in s.record() and s.record()["tpot_s"] == pytest.approx(0.1)


def marked(text: str) -> str:
    return f"noise\n{bisect.METRICS_MARK} {base64.b64encode(text.encode()).decode()}\n"


def test_a_jsonl_metrics_file_counts_its_last_object():
    jsonl = '{"run": 1, "ttft": 9}\n{"run": 2, "ttft": 3}\n'
    assert bisect.parse_metrics(marked(jsonl)) == {"run": 2, "ttft": 3}
    pretty = json.dumps({"a": 1, "b": {"c": 2}}, indent=2)
    assert bisect.parse_metrics(marked(pretty)) == {"a": 1, "b": {"c": 2}}
    assert bisect.parse_metrics(marked("not json")) == {}
    assert bisect.parse_metrics('x\n{"last": 1}\ny\n') == {"last": 1}  # no file: the last JSON line printed
    assert bisect.parse_metrics(f"{bisect.METRICS_MARK} !!!not-base64\n") == {}


def test_row_metrics_are_medians_and_a_failed_run_shows():
    row = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    for code, value in ((0, 3.0), (0, 9.0), (1, 4.0)):
        row.add(code, 10.0, {"tps": value, "name": "x"}, "logs/v-run1.log", None)
    assert row.metrics == {"tps": 4.0, "name": "x"} and row.spread == {"tps": [3.0, 9.0]} and row.exit == 1
    row.add(None, 900.0, {}, "logs/v-run4.log", None)
    assert row.exit is None
    line = bisect.table([row]).splitlines()[2]
    assert "| timeout |" in line and "4 (3-9)" in line and "logs/v-run{1..4}.log" in line


def test_a_row_that_only_built_shows_no_exit():
    row = bisect.Row(variant="v", patches=["p"], tag="t", image_id="i", build_s=5.0)
    assert "| 0 | - | - | -" in bisect.table([row]).splitlines()[2]  # no run: neither an exit nor a timeout


def test_profiles_default_to_the_recipes_and_may_be_chosen_per_variant():
    loaded = load_recipe("sglang-native-fp8-bookworm", REPO_ROOT)
    variants = ["local-stack", "original-fix"]
    assert bisect.profile_names(loaded, None, variants) == {v: ["sglang-native-fp8"] for v in variants}
    got = bisect.profile_names(loaded, "sglang-native-fp8,local-stack:sglang-native-fp8-fixed-prefill", variants)
    assert got == {"local-stack": ["sglang-native-fp8-fixed-prefill"], "original-fix": ["sglang-native-fp8"]}
    with pytest.raises(InputError, match="'final' is not a variant of this run"):
        bisect.profile_names(loaded, "final:sglang-native-fp8", variants)
    with pytest.raises(RecipeError, match="no profile 'nope'"):
        bisect.profile_names(loaded, "original-fix:nope", variants)
    with pytest.raises(InputError, match="twice"):
        bisect.profile_names(loaded, "sglang-native-fp8,sglang-native-fp8", variants)


def test_the_default_run_starts_the_launcher_and_runs_the_bench():
    from servebuild.check.container import RunOptions

    probe = bisect.bench_probe("tail --requests 50", 7200, RunOptions())
    assert probe.command.startswith('servebuild-bench --serve "$SERVEBUILD_LAUNCHER" --url "$SERVEBUILD_BENCH_URL"')
    assert probe.command.endswith("--suite tail --requests 50") and "--health-timeout 6900" in probe.command
    assert probe.metrics_file == bisect.BENCH_OUT + "/bench.json" and probe.artifacts == bisect.BENCH_OUT
    assert bisect.DEFAULT_TIMEOUT_S >= 3600


def test_gpu_devices_become_dockers_device_list():
    from servebuild.check.container import RunOptions

    assert RunOptions(gpus="0,1").docker_args("0,1")[:4] == ["--network", "none", "--gpus", '"device=0,1"']
    args = RunOptions(network="host", shm_size="32g", env=(("A", "b c"),)).docker_args("all")
    assert args == ["--network", "host", "--gpus", "all", "--shm-size", "32g", "-e", "A=b c"]
