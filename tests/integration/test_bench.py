"""invoke bench against a real OpenAI-compatible server on the CPU: `transformers serve` (PyPI,
requirements-serve.txt) serving a tiny random Llama with a tokenizer made here (scripts/tiny_model.py),
every suite's fields filled from its real responses; and against stand-ins (standin_server.py) that die
mid-run, never become healthy, or stream malformed chunks: one line each, exit 2, partial results kept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from support import REPO_ROOT

INVOKE = str(Path(sys.executable).parent / "invoke")
SERVE_VENV = REPO_ROOT / ".venv-serve" / "bin"
STANDIN = Path(__file__).with_name("standin_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, proc: subprocess.Popen, log: Path, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited: {log.read_text()[-2000:]}"
        try:
            if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"no /health after {seconds} s: {log.read_text()[-2000:]}")


def serve_command(model: Path, port: int) -> str:
    return f"HF_HUB_OFFLINE=1 {SERVE_VENV / 'transformers'} serve {model} --port {port} --device cpu"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    if not (SERVE_VENV / "transformers").exists():  # made on first use: the quick start does not need it
        subprocess.run(["bash", str(REPO_ROOT / "scripts" / "setup_serve.sh")], check=True, timeout=1200)
    out = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    subprocess.run(
        [str(SERVE_VENV / "python"), str(REPO_ROOT / "scripts" / "tiny_model.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def cpu_server(tiny_model, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            serve_command(tiny_model, port), shell=True, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, proc, log)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)


def bench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([INVOKE, "bench", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def test_every_suite_fills_every_field_from_a_real_server(cpu_server, tmp_path):
    out = tmp_path / "all"
    proc = bench(
        "--url",
        cpu_server,
        "--suite",
        "prefill,decode,story,tail,grid",
        "--ignore-eos",
        "off",
        "--sizes",
        "256,1024",
        "--runs",
        "3",
        "--max-tokens",
        "24",
        "--requests",
        "12",
        "--grid-sizes",
        "300,600",
        "--concurrencies",
        "1,3",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "bench.json").read_text())
    assert summary["partial"] is False and summary["requests_failed"] == 0
    # the flat object is also the last line printed (what a bisect row reads)
    assert json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]) == summary
    for size in (256, 1024):  # the server's own count, calibrated: within 5 % of what was asked
        assert abs(summary[f"prefill_{size}_prompt_tokens"] - size) <= 0.05 * size, summary
        assert summary[f"prefill_{size}_ttft_s"] > 0 and summary[f"prefill_{size}_tps"] > 0
        assert summary[f"prefill_{size}_ttft_s_n"] == 3
    assert summary["decode_tg_tps"] > 0 and summary["decode_tpot_ms"] > 0 and summary["decode_tg_tps_n"] == 3
    assert summary["decode_outputs_identical"] is True  # temperature 0: the same text three times
    assert summary["story_tg_tps_n"] == 5 and len(summary["story_outputs_sha256"]) == 16
    assert summary["tail_requests"] == 12
    assert 0 < summary["tail_ttft_s_p50"] <= summary["tail_ttft_s_p90"] <= summary["tail_ttft_s_p99"]
    assert abs(summary["tail_prompt_tokens"] - 1569) <= 80
    for size in (300, 600):
        for conc in (1, 3):
            assert summary[f"grid_{size}_c{conc}_ttft_ms_mean"] > 0 and summary[f"grid_{size}_c{conc}_output_tps"] > 0
    samples = [json.loads(ln) for ln in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == summary["requests_ok"] == 6 + 3 + 5 + 12 + (10 + 10) * 2
    assert all(s["ok"] and s["prompt_tokens"] and s["completion_tokens"] and s["ttft_s"] for s in samples)
    prompts = {s["case"] for s in samples if s["suite"] == "prefill"}
    assert prompts == {"256", "1024"}
    table = (out / "bench.md").read_text()
    for head in (
        "| Requested tokens | Actual prompt tokens | Median TTFT | Prefill rate |",
        "| Workload | Single-stream 1/TPOT (median) | 1/TPOT range | Median TPOT | Output throughput |",
        "| TTFT p50 | TTFT p90 | TTFT p99 | Latency p99 |",
        "| Input | Concurrency | TTFT mean (ms) |",
    ):
        assert head in table
    assert (out / "ttft.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_prompt_nonce_defeats_the_prefix_cache(cpu_server, tmp_path):
    """Every prefill prompt opens with its own nonce: no two measured prompts share their first block."""
    sys.path.insert(0, str(REPO_ROOT / "servebuild" / "tools"))
    import bench_suites

    maker = bench_suites.PromptMaker()
    heads = {maker.make(2048)[:64] for _ in range(20)}
    assert len(heads) == 20


def test_ksweep_starts_one_server_per_k_and_plots_it(tiny_model, tmp_path):
    port = free_port()
    out = tmp_path / "ks"
    serve = "SERVEBUILD_K={k} " + serve_command(tiny_model, port)
    proc = bench(
        "--suite",
        "ksweep",
        "--ks",
        "1,2",
        "--serve",
        serve,
        "--url",
        f"http://127.0.0.1:{port}",
        "--ignore-eos",
        "off",
        "--max-tokens",
        "16",
        "--runs",
        "2",
        "--health-timeout",
        "240",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "bench.json").read_text())
    assert summary["ksweep_k1_tg_tps"] > 0 and summary["ksweep_k2_tg_tps"] > 0
    assert (
        "| DSpark k | Single-stream 1/TPOT (median) | Median TPOT | Accept length | Note |"
        in (out / "bench.md").read_text()
    )
    assert (out / "ksweep.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "server.log").read_text().count("Uvicorn running") == 2  # two starts, both logged
    with socket.socket() as s:  # and the last server was stopped
        assert s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def standin(tmp_path):
    started = []

    def start(mode: str, after: int = 0) -> str:
        port = free_port()
        log = tmp_path / f"standin-{mode}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, str(STANDIN), str(port), mode, str(after)], stdout=fh, stderr=subprocess.STDOUT
            )
        started.append(proc)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return f"http://127.0.0.1:{port}"
            time.sleep(0.1)
        raise AssertionError(log.read_text())

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "mode,words",
    [
        (
            "die-mid-stream",
            "tail request 6 (tail): the stream ended before a finish_reason or [DONE] (the server closed it; POST http",
        ),
        ("malformed", "tail request 6 (tail): malformed stream chunk at line"),
        ("http-error", "tail request 6 (tail): HTTP 500 from /v1/completions"),
    ],
)
def test_a_server_failing_mid_run_is_one_line_with_partial_results(standin, tmp_path, mode, words):
    url = standin(mode, after=6)  # the warm-up and five measured requests succeed, the sixth fails
    out = tmp_path / mode
    proc = bench("--url", url, "--suite", "tail", "--requests", "20", "--out", str(out), timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert words in lines[0] and "partial results in" in lines[0] and "Traceback" not in proc.stderr, lines[0]
    summary = json.loads((out / "bench.json").read_text())
    assert summary["partial"] is True and words in summary["error"]
    assert summary["requests_ok"] == 5 and summary["requests_failed"] == 1
    assert summary["partial_ttft_s_n"] == 5
    samples = [json.loads(ln) for ln in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["ok"] for s in samples] == [True] * 5 + [False]
    assert "partial" in (out / "bench.md").read_text()


def test_a_server_that_never_becomes_healthy_is_one_line(standin, tmp_path):
    url = standin("never-healthy")
    proc = bench("--url", url, "--suite", "decode", "--health-timeout", "3", "--out", str(tmp_path / "nh"), timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"the server at {url} was not healthy after 3 s (GET /health: HTTP 503)" in lines[0]
    assert json.loads((tmp_path / "nh" / "bench.json").read_text())["partial"] is True


def test_a_server_command_that_exits_is_one_line_naming_its_log(tmp_path):
    out = tmp_path / "dead"
    proc = bench(
        "--suite",
        "decode",
        "--serve",
        "echo loading weights; echo 'CUDA error: no device'; exit 3",
        "--url",
        f"http://127.0.0.1:{free_port()}",
        "--out",
        str(out),
        timeout=60,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "the server exited with code 3 before it was healthy (last log line: CUDA error: no device" in lines[0]
    assert (out / "server.log").read_text() == "loading weights\nCUDA error: no device\n"


@pytest.mark.parametrize(
    "args,words",
    [
        (["--suite", "nope"], "--suite 'nope': one or more of prefill"),
        (["--suite", "prefill", "--sizes", "1,x"], "--sizes '1,x': give comma-separated whole numbers"),
        (["--suite", "tail", "--url", "ftp://x"], "--url 'ftp://x': give http://HOST:PORT"),
        (["--suite", "ksweep", "--ks", "5"], "--suite ksweep runs alone and needs"),
        (["--suite", "tail", "--requests", "0"], "--requests 0: give a whole number from 1 to 100,000"),
    ],
)
def test_bad_bench_options_are_one_line(tmp_path, args, words):
    proc = bench(*args, "--out", str(tmp_path / "x"), timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr


@pytest.mark.parametrize(
    "mode,words",
    [
        ("trickle", "no end of stream after 3 s (--request-timeout)"),
        ("continue-forever", "no end of stream after 3 s (--request-timeout)"),
        ("nested", "malformed stream chunk at line"),
        ("event-error", 'the server sent an error event: {"message": "CUDA out of memory"}'),
        ("endless", "the server streamed over 80 chunks for max_tokens 4"),
    ],
)
def test_a_hostile_stream_is_bounded_and_one_line(standin, tmp_path, mode, words):
    """A server that trickles bytes or sends endless 100 Continues is cut at the request deadline (the
    socket timeout alone would never fire); nesting, error events and endless streams are one line."""
    url = standin(mode)
    out = tmp_path / mode
    start = time.monotonic()
    proc = bench(
        "--url",
        url,
        "--suite",
        "decode",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--calibrate",
        "off",
        "--max-tokens",
        "4",
        "--request-timeout",
        "3",
        "--out",
        str(out),
        timeout=60,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
    assert time.monotonic() - start < 30
    summary = json.loads((out / "bench.json").read_text())  # strict JSON, partial, the error kept
    assert summary["partial"] is True and words in summary["error"]


def test_numbers_no_count_can_be_are_not_counts(standin, tmp_path):
    url = standin("huge-usage")
    proc = bench(
        "--url",
        url,
        "--suite",
        "decode",
        "--runs",
        "2",
        "--calibrate",
        "off",
        "--max-tokens",
        "8",
        "--out",
        str(tmp_path / "h"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "h" / "bench.json").read_text())
    assert summary["decode_completion_tokens"] == 8 and summary["decode_tg_tps"] > 0  # counted from the chunks


def test_a_server_left_listening_is_found_before_and_after(standin, tmp_path):
    """--serve may not start where something already listens (an old server would be measured), and a
    server that escapes its process group (setsid) is named after the stop, not left silently."""
    url = standin("ok")
    proc = bench("--url", url, "--suite", "decode", "--serve", "sleep 60", "--out", str(tmp_path / "a"), timeout=60)
    assert proc.returncode == 2 and f"something already listens at {url} before --serve" in proc.stderr, proc.stderr
    port = free_port()
    pidfile = tmp_path / "leaked.pid"
    serve = f"setsid {sys.executable} {STANDIN} {port} ok >/dev/null 2>&1 & echo $! > {pidfile}; sleep 600"
    try:
        proc = bench(
            "--url",
            f"http://127.0.0.1:{port}",
            "--suite",
            "decode",
            "--runs",
            "1",
            "--max-tokens",
            "4",
            "--serve",
            serve,
            "--out",
            str(tmp_path / "b"),
            timeout=120,
        )
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "still listens at" in lines[0] and "left the --serve command's process group" in lines[0]
        assert json.loads((tmp_path / "b" / "bench.json").read_text())["decode_tg_tps"] > 0  # measured, kept
    finally:
        os.kill(int(pidfile.read_text()), 9)
