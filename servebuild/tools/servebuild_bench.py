"""servebuild-bench: the seed's benchmarks against an OpenAI-compatible streaming server.

    servebuild-bench --suite prefill,decode,story,tail,grid [--url http://127.0.0.1:30000] [--out DIR]
    servebuild-bench --serve "$SERVEBUILD_LAUNCHER" --suite tail      # start the server, wait, measure, stop
    servebuild-bench --suite ksweep --ks 0,5,6,7 --serve "launcher --speculative-num-draft-tokens {k}"

It waits for GET /health (--health-timeout), calibrates, checks that its nonce keeps the prefix cache
out, warms up, measures, and writes DIR/bench.json (one flat object: medians, ranges, percentiles,
accept length, live compiles), DIR/samples.jsonl (every request as it finished) and DIR/bench.md (the
seed's tables), bench.json and bench.md again as each suite ends; the flat object is also the last line
printed. TPOT, ITL, E2E latency and output throughput are defined as vLLM's `vllm bench serve` and
SGLang's `bench_serving` define them (README, Benchmarks). A request that fails (refused, cut,
malformed chunk, HTTP error), a server that dies or never becomes healthy, Ctrl-C: one line on stderr
(which suite, which suites were kept), exit 2 (130, 143), every finished suite's figures kept with
"partial": true, failed_suite and the error. --progress on: progress lines on stderr.

Standard library only: the images carry it in /opt/servebuild/tools (the host runs it as `invoke bench`).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client import (BenchError, Server, ServerProcess, accept_length, first_model, open_out,  # noqa: E402
                          scrape, wait_healthy)
from bench_suites import RUNNERS, SUITES, PromptMaker, Run, nonce_check, spread, table, write_samples  # noqa: E402

# the image's cache tool (beside this file in the project: servebuild/tools)
CACHE_TOOL = next((p for p in (Path(__file__).resolve().parent / "servebuild_cache.py",
                               Path("/opt/servebuild/tools/servebuild_cache.py")) if p.is_file()),
                  Path("/opt/servebuild/tools/servebuild_cache.py"))
CACHE_ROOT = "/cache"


# bounds on what a run may ask for: a 1M-token context fits the sizes, and none of them exhausts the host
LIMITS = {"--sizes": 2_097_152, "--grid-sizes": 2_097_152, "--concurrencies": 1024, "--ks": 1024}
COUNT_LIMITS = {"runs": 1000, "max_tokens": 1_048_576, "requests": 100_000, "warmup": 100}


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 1e6):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0 to 1000000")
    return value


def numbers(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or any(v < 0 for v in values):
        raise BenchError(f"{flag} {text!r}: give comma-separated whole numbers")
    if len(values) > 64 or max(values) > LIMITS[flag]:
        raise BenchError(f"{flag} {text!r}: at most 64 values, each at most {LIMITS[flag]:,}")
    return values


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage plus a line
        raise BenchError(message)


def parse_args(argv: list[str]) -> argparse.Namespace:
    health = os.environ.get("SERVEBUILD_HEALTH_URL", "")  # set in the images from the default profile's port
    default_url = health.rsplit("/health", 1)[0] if health.endswith("/health") else "http://127.0.0.1:30000"
    p = OneLineParser(prog="servebuild-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="check the options and exit (bisect does, before it builds)")
    p.add_argument("--suite", default="decode", help=f"comma-separated: {', '.join(SUITES)}, or ksweep")
    p.add_argument("--url", default=default_url, help="the server, http://HOST:PORT")
    p.add_argument("--model", default="", help="model name (default: the first of /v1/models)")
    p.add_argument("--api", choices=("completions", "chat"), default="completions")
    p.add_argument("--ignore-eos", choices=("on", "off"), default="on",
                   help="send ignore_eos (fixed output length: SGLang, vLLM); off for servers that refuse it")
    p.add_argument("--serve", help="shell command that starts the server (stopped at the end); ksweep: with {k}")
    p.add_argument("--health-timeout", type=seconds, default=1800.0, help="seconds to wait for /health")
    p.add_argument("--request-timeout", type=seconds, default=600.0, help="seconds per request, all of it")
    p.add_argument("--out", help="directory for bench.json, samples.jsonl, bench.md (default: a new "
                                 "bench-out/SUITE-TIME for each run, never an earlier run's)")
    p.add_argument("--sizes", default="2048,8192,32768", help="prefill: prompt sizes in tokens")
    p.add_argument("--runs", type=int, default=3, help="prefill and decode: runs per case")
    p.add_argument("--max-tokens", type=int, default=256, help="decode, story, grid: tokens generated")
    p.add_argument("--requests", type=int, default=100, help="tail: sequential requests")
    p.add_argument("--grid-sizes", default="5000,10000,20000", help="grid: input sizes in tokens")
    p.add_argument("--concurrencies", default="1,5,10,20", help="grid: concurrent streams")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured requests per suite and shape")
    p.add_argument("--ks", default="", help="ksweep: the DSpark k values, substituted for {k} in --serve")
    p.add_argument("--ksweep-workload", choices=("decode", "story"), default="decode")
    p.add_argument("--calibrate", choices=("on", "off"), default="on",
                   help="two 1-token requests first to fit prompt sizes to the tokenizer; off: nothing precedes "
                        "the measured requests (with --warmup 0, the first pays any live compile)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress lines on stderr (the health wait, each suite, request i of n, elapsed); "
                        "auto: when stderr is a terminal")
    p.add_argument("--nonce-check", choices=("on", "off"), default="on",
                   help="after calibration (--calibrate on): eight one-token requests (a second batch if the first "
                        "looks cached) that refuse the run when a fresh prompt is served from the prefix cache "
                        "(the nonce failed)")
    p.add_argument("--census", choices=("auto", "off"), default="auto",
                   help="count files the run writes under /cache (live compiles) where the image has the tool")
    args = p.parse_args(argv)
    args.suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = [s for s in args.suites if s not in SUITES + ("ksweep",)]
    if unknown or not args.suites:
        raise BenchError(f"--suite {args.suite!r}: one or more of {', '.join(SUITES)}, or ksweep")
    if "ksweep" in args.suites and (len(args.suites) > 1 or not args.serve or "{k}" not in args.serve or not args.ks):
        raise BenchError("--suite ksweep runs alone and needs --ks K,K,... and --serve with {k} in it")
    for name, limit in COUNT_LIMITS.items():
        low = 0 if name == "warmup" else 1
        if not low <= getattr(args, name) <= limit:
            raise BenchError(f"--{name.replace('_', '-')} {getattr(args, name)}: give a whole number from {low} "
                             f"to {limit:,}")
    for flag, value, longest in (("--url", args.url, 2048), ("--model", args.model, 512)):
        # urlsplit drops tabs and line breaks without a word, and a model name goes into every request
        # and the summary: a control character in either is refused, not silently changed or sent
        shown = repr(value) if len(repr(value)) <= 80 else f"{repr(value)[:80]}... ({len(value)} characters)"
        if not value.isprintable():
            raise BenchError(f"{flag} {shown}: holds a line break, tab or other control character")
        if len(value) > longest:
            raise BenchError(f"{flag} {shown}: longer than {longest} characters")
    Server(args.url).parts()  # a URL it can reach: http://HOST:PORT
    if args.out is None:
        args.out = fresh_out(args.suite)
    args.size_list = numbers(args.sizes, "--sizes")
    args.grid_list = numbers(args.grid_sizes, "--grid-sizes")
    args.conc_list = numbers(args.concurrencies, "--concurrencies")
    args.k_list = numbers(args.ks, "--ks") if args.ks else ()
    if 0 in args.size_list + args.grid_list + args.conc_list:
        raise BenchError("sizes and concurrencies are at least 1")
    return args


def fresh_out(suite: str) -> str:
    """bench-out/SUITE-TIME, a directory no earlier run wrote (a suffix -2, -3... within one second)."""
    base = f"bench-out/{suite.replace(',', '+')}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while os.path.exists(out):
        n += 1
        out = f"{base}-{n}"
    return out


class Census:
    """Files written under /cache between start and stop: the live compiles of the measured run. Its
    listing lives in a private temporary folder, removed by stop(), never in --out (a run that fails
    half-way leaves nothing of it beside the results)."""

    def __init__(self, mode: str):
        self.on = mode == "auto" and CACHE_TOOL.is_file() and os.path.isdir(CACHE_ROOT)
        self.folder = tempfile.mkdtemp(prefix="servebuild-census-") if self.on else None
        self.listing = Path(self.folder or os.devnull) / "listing.json"

    def _tool(self, *args: str) -> Optional[dict]:
        proc = subprocess.run([sys.executable, str(CACHE_TOOL), "census", "--cache", CACHE_ROOT, *args],
                              capture_output=True, text=True, timeout=600)
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
        except (ValueError, IndexError):
            return None

    def start(self) -> None:
        if self.on:
            self._tool("--listing", str(self.listing))

    def stop(self) -> dict:
        if not self.on:
            return {}
        try:
            found = self._tool("--since", str(self.listing)) if self.listing.exists() else None
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        changed = found.get("changed") if isinstance(found, dict) else None
        return {"jit_compiled_files": sum(changed.values())} if isinstance(changed, dict) else {}


class Progress:
    """Lines on stderr while the bench runs: what the health wait waits for, each suite as it starts,
    and request i of n with the seconds since the suite started (the first, the last, and at most one
    every `every_s` seconds between: a 100-request tail is a few lines, not a hundred)."""

    def __init__(self, on: bool, every_s: float = 2.0):
        self.on, self.every_s = on, every_s
        self.lock = threading.Lock()
        self.suite_start = self.last = time.monotonic()

    def say(self, text: str) -> None:
        if self.on:
            print(f"servebuild-bench: {text}", file=sys.stderr, flush=True)

    def suite(self, name: str, number: int, of: int) -> None:
        self.suite_start = self.last = time.monotonic()
        self.say(f"suite {name} ({number} of {of}) started")

    def request(self, suite: str, case: str, done: int, of: int) -> None:
        with self.lock:
            now = time.monotonic()
            if done in (1, of) or now - self.last >= self.every_s:
                self.last = now
                self.say(f"{suite} {case}: request {done}{f' of {of}' if of else ''}, "
                         f"{now - self.suite_start:.1f} s into the suite")


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.progress = Progress(args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty()))
        self.out = Path(args.out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            open_out(self.out / "samples.jsonl").close()  # made empty, never through a link planted there
        except OSError as exc:
            raise BenchError(f"cannot write the bench output {self.out}: {exc.strerror}") from None
        self.summary: dict = {"suite": args.suite, "url": args.url, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                                time.gmtime())}
        self.tables: list[str] = []
        self.run: Optional[Run] = None
        self.server_log = str(self.out / "server.log")
        self.process: Optional[ServerProcess] = None
        self.finished: list[str] = []          # suites whose figures are in the summary
        self.current: Optional[str] = None     # the suite running now
        self.suite_first_sample = 0            # its first sample's index in run.samples

    def server(self) -> Server:
        return Server(self.args.url, self.args.model, self.args.api, os.environ.get("SERVEBUILD_BENCH_API_KEY", ""),
                      self.args.request_timeout, self.args.ignore_eos == "on")

    def measure(self, suites: list[str], prefix: str = "") -> dict:
        """Health, model, calibration, then each suite, its figures put in the summary (and bench.json
        written) as it ends."""
        server = self.server()
        wait_healthy(server, self.args.health_timeout, self.process, report=self.progress.say)
        if not server.model:
            server = dataclasses.replace(server, model=first_model(server))
        self.summary["model"] = server.model
        maker = PromptMaker()
        self.run = Run(server, maker, sizes=self.args.size_list, runs=self.args.runs, max_tokens=self.args.max_tokens,
                       requests=self.args.requests, concurrencies=self.args.conc_list, grid_sizes=self.args.grid_list,
                       warmup=self.args.warmup, on_sample=write_samples(self.out / "samples.jsonl"),
                       samples=self.run.samples if self.run else [], progress=self.progress.request)
        if self.args.calibrate == "on":
            self.summary[f"{prefix}calibration_prompt_tokens"] = maker.calibrate(server)
            if self.args.nonce_check == "on":
                self.progress.say("nonce check: eight one-token requests (fourteen if the first batch looks cached)")
                self.summary.update({prefix + k: v for k, v in nonce_check(server, maker).items()})
        for number, suite in enumerate(suites, start=1):
            self.current, self.suite_first_sample = prefix + suite, len(self.run.samples)
            self.progress.suite(prefix + suite, number, len(suites))
            before = scrape(server)
            census = Census(self.args.census)
            try:
                census.start()
                started = time.monotonic()
                found = RUNNERS[suite](self.run)
                found[f"{suite}_s"] = round(time.monotonic() - started, 2)
            finally:
                compiled = census.stop()
            found.update({f"{suite}_{k}": v for k, v in compiled.items()})
            cached = [x.cached_tokens for x in self.run.samples[self.suite_first_sample:]
                      if x.ok and x.cached_tokens is not None]
            if cached:  # the server's own count of prompt tokens it served from its prefix cache
                found[f"{suite}_cached_tokens_max"] = max(cached)
            accepted = accept_length(before, scrape(server))
            if accepted is not None:
                found[f"{suite}_metrics_accept_length"] = round(accepted, 3)
            # the suite's figures are the summary's as it ends, and on disk at once: a later suite that
            # fails (or a kill) cannot take them with it
            self.summary.update({prefix + k: v for k, v in found.items()})
            self.finished.append(prefix + suite)
            self.summary["suites_finished"] = list(self.finished)
            if not prefix:
                self.tables.append(f"### {suite}\n\n" + table(suite, found))
            self.current = None
            self.checkpoint()
        return self.summary

    def start_server(self, command: str) -> None:
        """Start --serve; first, nothing may listen where it will (an old server would be measured)."""
        if self.server().port_in_use():
            raise BenchError(f"something already listens at {self.args.url} before --serve started its server "
                             f"(a server left from an earlier run?)")
        self.process = ServerProcess(command, self.server_log)

    def stop_server(self) -> None:
        """Stop --serve's process group; a server that left it (setsid, a daemon) and still listens is one line."""
        if self.process is not None:
            self.process.stop()
            self.process = None
            deadline = time.monotonic() + 10
            while self.server().port_in_use():
                if time.monotonic() > deadline:
                    raise BenchError(f"a process still listens at {self.args.url} after the server was stopped: it "
                                     f"left the --serve command's process group (setsid, a daemon?); stop it")
                time.sleep(0.5)

    def main(self) -> dict:
        args = self.args
        if "ksweep" in args.suites:
            for k in args.k_list:
                self.start_server(args.serve.replace("{k}", str(k)))
                try:
                    found = self.measure([args.ksweep_workload], prefix=f"ksweep_k{k}_")
                finally:
                    self.stop_server()
                w = args.ksweep_workload
                self.summary.update({f"ksweep_k{k}_tg_tps": found.get(f"ksweep_k{k}_{w}_tg_tps"),
                                     f"ksweep_k{k}_tpot_ms": found.get(f"ksweep_k{k}_{w}_tpot_ms"),
                                     f"ksweep_k{k}_accept_length": found.get(f"ksweep_k{k}_{w}_accept_length",
                                                                              found.get(f"ksweep_k{k}_{w}_metrics_accept_length"))})
            self.tables.append("### ksweep\n\n" + table("ksweep", self.summary))
            return self.summary
        if args.serve:
            self.start_server(args.serve)
        try:
            self.measure(args.suites)
        finally:
            self.stop_server()
        return self.summary

    def checkpoint(self) -> None:
        """bench.json and bench.md as they stand after a suite ends (partial until the run ends); a write
        that fails here is left to the final write to report."""
        try:
            self.write(dict(self.summary, partial=True), None)
        except OSError:
            pass

    def write(self, summary: dict, error: Optional[str]) -> None:
        for name, text in (("bench.json", json.dumps(finite(summary), sort_keys=True, indent=1, allow_nan=False)
                            + "\n"),
                           ("bench.md", "\n".join(self.tables) + ("\n" if self.tables else "")
                            + (f"\n**partial**: {error}\n" if error else ""))):
            write_whole(self.out / name, text)

    def finish(self, error: Optional[str]) -> dict:
        """Write bench.json and bench.md, whether the run completed or not: every finished suite's figures,
        and for a failure the suite it stopped in, the error, and that suite's own finished requests'
        TTFT (`partial_ttft_s`: never mixed with other suites')."""
        samples = self.run.samples if self.run else []
        ok = [s for s in samples if s.ok]
        self.summary.update(requests_ok=len(ok), requests_failed=len(samples) - len(ok), partial=error is not None,
                            suites_finished=list(self.finished))
        # the rates count the tokens streamed; where the server's usage count disagreed, it is named here
        disagreed = [s for s in samples if s.token_disagreement]
        self.summary["token_count_disagreements"] = len(disagreed)
        if disagreed:
            first = disagreed[0]
            self.summary["token_count_disagreement"] = (f"{first.suite} {first.case} request {first.index + 1}: "
                                                        f"{first.token_disagreement}")
            self.tables.append(f"\n**token counts**: {len(disagreed)} of {len(samples)} requests: the server's "
                               f"count disagreed with the stream; first: {self.summary['token_count_disagreement']}")
        if error:
            self.summary["error"] = error
            if self.current:
                self.summary["failed_suite"] = self.current
                mine = [s for s in samples[self.suite_first_sample:] if s.ok]
                self.summary.update(spread("partial_ttft_s", [s.ttft_s for s in mine]))
        if self.process is None and Path(self.server_log).exists():
            self.summary["server_log"] = self.server_log
        self.summary = finite(self.summary)
        self.write_error = None
        for name, text in (("bench.json", json.dumps(self.summary, sort_keys=True, indent=1, allow_nan=False) + "\n"),
                           ("bench.md", "\n".join(self.tables) + ("\n" if self.tables else "")
                            + (f"\n**partial**: {error}\n" if error else ""))):
            try:
                write_whole(self.out / name, text)
            except OSError as exc:
                self.write_error = self.write_error or f"cannot write {self.out / name}: {exc.strerror or exc}"
        return self.summary

    def kept(self) -> str:
        """What a failed run kept, for its one line."""
        suites = ", ".join(self.finished) if self.finished else "none"
        return f"finished suites kept: {suites}"


def write_whole(path: Path, text: str) -> None:
    """`text` at `path`, whole or not at all (a temp file renamed over it; a full disk leaves the old file,
    or none, never an empty or half-written one)."""
    if os.path.islink(path):  # replaced by the rename, never followed; but refused, as every file in --out is
        raise OSError(errno.ELOOP, "it is a symbolic link; the bench writes no file through a link (remove it)")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def finite(value):
    """The summary as strict JSON holds it: NaN and infinities (a hostile server's numbers) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class Terminated(BaseException):
    """SIGTERM: stop the server and keep what was measured, as for Ctrl-C."""


def _terminate(signum, frame):
    raise Terminated()


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
        if args.check:
            return 0
        bench = Bench(args)
    except BenchError as exc:
        print(f"servebuild-bench: error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    error, code = None, 2
    try:
        try:
            bench.main()
        finally:
            bench.stop_server()
    except BenchError as exc:
        error = str(exc)
    except (KeyboardInterrupt, Terminated) as exc:
        error, code = ("interrupted", 130) if isinstance(exc, KeyboardInterrupt) else ("terminated", 143)
        error += f" during suite {bench.current}" if bench.current else " before any suite started"
    except Exception as exc:  # noqa: BLE001  one line, never a traceback; the partial record is still written
        error = f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    summary = bench.finish(error)
    print("\n".join(bench.tables))
    print(json.dumps(summary, sort_keys=True), flush=True)
    if error or bench.write_error:
        kept = f"{len(bench.run.samples) if bench.run else 0} requests in samples.jsonl"
        if error and bench.write_error:  # one line for both: the run's fault, then what could not be kept
            line = f"{error}; and {bench.write_error}, so no partial results were kept ({kept})"
        elif error:
            line = f"{error} (partial results in {bench.out}/bench.json, {bench.kept()}; {kept})"
        else:
            line = bench.write_error
        print(f"servebuild-bench: error: {line}", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
