"""DeepSeek-V4's mHC buckets, the warm flow that reaches each of them, and the seed's tail test (issue 44).

usage: python dsv4_warm.py plan [--engine vllm|sglang] [--sms N|auto] [--source PATH] [--max-batched N]
       python dsv4_warm.py warm --url http://127.0.0.1:8000 [--serve CMD] [--sms N|auto] [--source PATH]
                                [--max-batched N] [--out FILE]
       python dsv4_warm.py tail --url http://127.0.0.1:8000 [--sms N|auto] [--source PATH] [--requests 100]
                                [--min-tokens 17] [--max-tokens 8192] [--output-tokens 64] [--out FILE]

Why: vLLM 0.26.0's mHC TileLang kernels take a split-K factor fixed at compile time and chosen per step
from its token count T (`compute_num_split` in vllm/model_executor/kernels/mhc/tilelang_kernels.py:
n_SMs // ceil(T / 64), capped by K / 64 / 4 and at least 1; T <= 16 takes the small-FMA path with two
variants). Every prefill that reaches a split factor no earlier step reached compiles a kernel inside
that request; vLLM's own mHC warm-up acts on the AMD model only. So the buckets are computed here from
the engine's own rule, read out of the installed (or given) vLLM source and run with the GPU's SM
count, never typed in: a changed rule or call site in the engine fails here in one line.

plan   the buckets for this GPU: the first T of each new split factor per call site (the residual
       mHC pre/post-pre at K = hc_mult x hidden, layer 0's broadcast pre at K = hidden), the small
       path's variants, the prefill edges a step of at most --max-batched tokens reaches, and the tail
       test's prompt lengths. JSON on stdout.
warm   one prefill per reachable edge (distinct random token ids: no prefix-cache hit shortens a step),
       then one greedy decode of 64 tokens for the speculative-decode shapes (the CUDA-graph sizes are
       captured by the engine at its start). The cache census before and after is the caller's
       (servebuild_cache.py census); JSON of what was sent and each request's TTFT.
tail   the seed's tail test: --requests sequential streamed requests, prompt lengths from
       --min-tokens to --max-tokens spread so that every bucket is hit at least once (seeded, shuffled),
       --output-tokens each at temperature 0; TTFT p50/p90/p99, and per request its length, bucket
       and TTFT (a compile shows as a spike on the first request of a bucket).

With --serve CMD (warm, tail) the tool starts the server itself, waits for its health and stops it after:
the form `invoke warm` runs, the tools folder mounted into the container (until it is in the payload):
    invoke warm --recipe vllm-dspark --volume $PWD/scripts:/opt/dsv4:ro \
      --run '/opt/venv/bin/python /opt/dsv4/dsv4_warm.py warm --serve "$SERVEBUILD_LAUNCHER"'

SGLang (--engine sglang; the rule read out of the installed or given SGLang 0.5.16): its DSV4 mHC pre
(`mhc_pre` in sglang/kernels/ops/layernorm/mhc.py, called by deepseek_v4.py's hc_pre for every attention and
FFN residual) keys its kernels on one split factor, `_compute_num_split_for_mhc_pre(T, hc_mult x hidden)`:
the DeepGEMM tf32_hc_prenorm_gemm and the TileLang big-fuse kernel after it (SGLANG_OPT_DEEPGEMM_HC_PRENORM,
on by default). That is vLLM's rule at the residual site (n_SMs // ceil(T / 64), capped by K / 64 / 4), with
neither vLLM's small-FMA path (T <= 16) nor its layer-0 site (K = hidden): SGLang's buckets are the
residual site's, from T = 1. And SGLang builds them itself: `_prewarm_mhc_pre_kernels` (once per process,
`_mhc_prewarmed_at_load`, on with SGLANG_DSV4_MHC_PREWARM) runs mhc_pre at one representative T of every
split factor up to --chunked-prefill-size (get_mhc_pre_token_count_representatives) before the memory pool
is made, so a first start pays the mHC compiles at load, not inside a request. The plan says which edges
that prewarm covers (`prewarmed_at_load`, with --max-batched the chunked prefill size); the tail test's
lengths come from the same generator over SGLang's edges, so every split factor is still hit by a request
(what a request still compiles there is another kind: DeepGEMM's FP8 GEMM shapes, FlashInfer, the JIT
kernels of the DSV4 attention), and the warm flow's one prefill per edge stays: the pack keeps what
those requests built.

Standard library only, beside bench_client.py and bench_suites.py (the image's Python). Not yet in the
images' payload (render/payload.py): adding it moves every committed image id, so for now it runs from
the project (scripts/first_start_gpu.py) or mounted into a container (`invoke warm --volume`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import math
import os
import random
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

SPLIT_FILE = "vllm/model_executor/kernels/mhc/tilelang_kernels.py"
SG_SPLIT_FILE = "sglang/kernels/ops/layernorm/mhc.py"  # SGLang 0.5.16: the rule, its prewarm buckets, mhc_pre
SG_MODEL_FILE = "sglang/srt/models/deepseek_v4.py"  # hc_pre -> mhc_pre; the prewarm at load
SG_CALL_TEXTS = {  # each checked against the engine's text (sg_call_sites())
    SG_SPLIT_FILE: ("n_splits = _compute_num_split_for_mhc_pre(num_tokens, hc_hidden_size)",
                    "max_num_tokens = get_server_args().chunked_prefill_size",
                    "if envs.SGLANG_OPT_DEEPGEMM_HC_PRENORM.get():"),
    SG_MODEL_FILE: ("from sglang.kernels.ops.layernorm.mhc import mhc_pre", "self._prewarm_mhc_pre_kernels()",
                    "if self._mhc_prewarmed_at_load:"),
}  # fmt: skip
CALLS_FILE = "vllm/model_executor/kernels/mhc/tilelang.py"
HIDDEN, HC_MULT = 4096, 4  # DeepSeek-V4-Flash (and scripts/tiny_dsv4.py)
SMALL_MAX = 16  # T <= 16: the small-FMA path (`use_small_fma = num_tokens <= 16`)
# The call sites' arguments, each checked against the engine's text of tilelang.py (call_sites()):
# (name, K, block_k, block_m, the text that passes them)
SITES = (
    ("pre", HC_MULT * HIDDEN, 64, 64, "compute_num_split(block_k, hc_hidden_size, cdiv(num_tokens, block_m))"),
    ("layer0", HIDDEN, 64, 64, "compute_num_split(64, hidden_size, cdiv(num_tokens, 64))"),
)
CALL_TEXTS = ("block_k = 64", "block_m = 64", "use_small_fma = num_tokens <= 16",
              "n_splits = 8 if (num_tokens < 8 and hidden_size <= 4096) else 4")  # fmt: skip
FIRST_TOKEN, LAST_TOKEN = 4, 260  # scripts/tiny_dsv4.py's byte tokens: any id decodes, none is special


class WarmError(Exception):
    """One line for the user."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def engine_source(rel: str, source: Optional[str] = None) -> str:
    """The text of an engine file: from --source (the engine's wheel, or a folder holding vllm/ or sglang/),
    else from the engine installed on this Python (the package the path starts with), found without
    importing it."""
    if source:
        if zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as whl:
                try:
                    return whl.read(rel).decode()
                except KeyError:
                    raise WarmError(f"{source}: no {rel} in the wheel") from None
        path = os.path.join(source, rel)
    else:
        package = rel.split("/", 1)[0]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise WarmError(f"{package} is not installed on this Python: give --source (its wheel or folder)")
        path = os.path.join(os.path.dirname(list(spec.submodule_search_locations)[0]), rel)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise WarmError(f"cannot read {path}: {exc.strerror}") from None


def split_rule(
    text: str, n_sms: int, name: str = "compute_num_split", where: str = SPLIT_FILE, extra: Optional[dict] = None
) -> Callable:
    """The engine's own split rule (vLLM's compute_num_split, or SGLang's _compute_num_split_for_mhc_pre),
    lifted out of its source and run with `n_sms` SMs (its only input from the GPU:
    torch.cuda.get_device_properties(0).multi_processor_count). `extra`: other lifted functions it may call."""
    tree = ast.parse(text)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(found) != 1:
        raise WarmError(f"{where}: no single {name} (the engine's mHC rule moved)")
    func = found[0]
    func.decorator_list = []  # @cache: one GPU per process in the engine, many SM counts here
    func.returns = None  # annotations are no input
    for a in func.args.args:
        a.annotation = None
    params = {a.arg for a in func.args.args}
    assigned = {x.id for n in ast.walk(func) if isinstance(n, ast.Assign) for t in n.targets for x in ast.walk(t)
                if isinstance(x, ast.Name)}  # fmt: skip
    free = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    loops = {
        t.id for n in ast.walk(func) if isinstance(n, ast.For) for t in ast.walk(n.target) if isinstance(t, ast.Name)
    }
    known = {"torch", "cdiv", "min", "max", "range", "sorted", "tuple", *(extra or {})}
    unknown = free - params - assigned - loops - known
    if unknown:
        raise WarmError(f"{where}: {name} reads {sorted(unknown)}: re-read the engine's rule")
    props = SimpleNamespace(multi_processor_count=n_sms)
    torch = SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda _i: props))
    scope: dict = {"torch": torch, "cdiv": cdiv, **(extra or {})}
    exec(compile(ast.Module(body=[func], type_ignores=[]), where, "exec"), scope)  # noqa: S102
    return scope[name]


def sg_rules(source: Optional[str], n_sms: int) -> tuple[Callable, Callable]:
    """SGLang's split rule and its prewarm's bucket representatives, out of its mhc.py, after checking that
    mhc_pre and the model still call them as read here."""
    text = engine_source(SG_SPLIT_FILE, source)
    for rel, needles in SG_CALL_TEXTS.items():
        body = text if rel == SG_SPLIT_FILE else engine_source(rel, source)
        for needle in needles:
            if needle not in body:
                raise WarmError(f"{rel}: {needle!r} is gone: SGLang's mHC path changed, re-read it")
    split = split_rule(text, n_sms, "_compute_num_split_for_mhc_pre", SG_SPLIT_FILE)
    reps = split_rule(text, n_sms, "get_mhc_pre_token_count_representatives", SG_SPLIT_FILE,
                      {"_compute_num_split_for_mhc_pre": split})  # fmt: skip
    return split, reps


def sg_buckets(split: Callable, hi: int = 8192) -> dict:
    """SGLang's walk: one site (K = hc_mult x hidden), no small path; the first T of every split factor."""
    seen: dict[int, int] = {}
    for t in range(1, hi + 1):
        seen.setdefault(split(t, HC_MULT * HIDDEN), t)
    edges = sorted(t for t in seen.values() if t > 1)
    return {"edges": edges, "variants": {"pre": {str(n): t for n, t in sorted(seen.items(), key=lambda kv: kv[1])}},
            "small": []}  # fmt: skip


def call_sites(text: str) -> None:
    """The arguments SITES assumes are the ones tilelang.py passes, or one line naming what moved."""
    for needle in [s[4] for s in SITES] + list(CALL_TEXTS):
        if needle not in text:
            raise WarmError(f"{CALLS_FILE}: {needle!r} is gone: the mHC call sites changed, re-read them")


def variants(split: Callable, t: int) -> set[tuple[str, int]]:
    """The (call site, split factor) kernels a step of T tokens reaches."""
    if t <= SMALL_MAX:
        return {("small", 8 if t < 8 else 4)}
    return {(name, split(block_k, k, cdiv(t, block_m))) for name, k, block_k, block_m, _ in SITES}


def buckets(split: Callable, hi: int = 8192) -> dict:
    """Walk T = 1..hi: the first T of every kernel variant, and the prefill edges (T > 16 where a new one
    first appears). A split factor keyed on ceil(T/64) changes only at T = 64 m + 1, so the walk is exact."""
    seen: dict[tuple[str, int], int] = {}
    edges: list[int] = []
    for t in range(1, hi + 1):
        new = [v for v in sorted(variants(split, t)) if v not in seen]
        for v in new:
            seen[v] = t
        if new and t > SMALL_MAX:
            edges.append(t)
    per_site: dict[str, dict[str, int]] = {}
    for (name, n), t in sorted(seen.items(), key=lambda kv: kv[1]):
        per_site.setdefault(name, {})[str(n)] = t
    return {"edges": edges, "variants": per_site, "small": sorted({t for (s, _), t in seen.items() if s == "small"})}


def tail_lengths(edges: list[int], n: int = 100, lo: int = 17, hi: int = 8192, seed: int = 0) -> list[int]:
    """The tail test's prompt lengths: one in every bucket [edge, next edge) within [lo, hi], the rest
    log-uniform over [lo, hi], shuffled (seeded: the same plan on every run)."""
    if not 1 <= lo <= hi:
        raise WarmError(f"prompt lengths {lo}..{hi}: give 1 <= min <= max")
    rng = random.Random(seed)
    bounds = [e for e in edges if lo <= e <= hi]
    if not bounds or bounds[0] > lo:
        bounds = [lo, *bounds]
    spans = [(a, (bounds[i + 1] - 1) if i + 1 < len(bounds) else hi) for i, a in enumerate(bounds)]
    if n < len(spans):
        raise WarmError(f"{n} requests cannot hit {len(spans)} buckets: give --requests {len(spans)} or more")
    out = [rng.randint(a, b) for a, b in spans]
    while len(out) < n:
        out.append(min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))))
    rng.shuffle(out)
    return out


def bucket_of(t: int, edges: list[int]) -> int:
    """The edge of the bucket a step of T tokens falls in (0: the small path)."""
    return max([e for e in edges if e <= t], default=0)


def sm_count(given: str) -> int:
    if given != "auto":
        try:
            value = int(given)
        except ValueError:
            raise WarmError(
                f"--sms {given!r}: give a whole number of SMs (132 on an H100 SXM or H200) or auto"
            ) from None
        if not 1 <= value <= 1024:
            raise WarmError(f"--sms {value}: outside 1..1024")
        return value
    try:
        import torch
    except ImportError:
        raise WarmError("--sms auto needs torch on this Python: give --sms N") from None
    if not torch.cuda.is_available():
        raise WarmError("--sms auto: no CUDA device here: give --sms N")
    return int(torch.cuda.get_device_properties(0).multi_processor_count)


def make_plan(args) -> dict:
    n_sms = sm_count(args.sms)
    engine = getattr(args, "engine", "vllm")
    hi = max(args.max_batched, getattr(args, "max_tokens", 8192))
    if engine == "sglang":
        split, reps = sg_rules(args.source, n_sms)
        found = sg_buckets(split, hi)
    else:
        split = split_rule(engine_source(SPLIT_FILE, args.source), n_sms)
        call_sites(engine_source(CALLS_FILE, args.source))
        found = buckets(split, hi)
    reachable = [e for e in found["edges"] if e <= args.max_batched]
    out = {"engine": engine, "sms": n_sms, "max_batched": args.max_batched, **found, "warm_prefills": reachable,
           "unreachable_edges": [e for e in found["edges"] if e > args.max_batched]}  # fmt: skip
    if engine == "sglang":  # what SGLang compiles at load, with --max-batched as its chunked_prefill_size
        at_load = list(reps(args.max_batched, HC_MULT * HIDDEN))
        factors = {split(t, HC_MULT * HIDDEN) for t in at_load}
        out["prewarm_at_load"] = at_load
        out["prewarmed_at_load"] = [e for e in found["edges"] if split(e, HC_MULT * HIDDEN) in factors]
    if hasattr(args, "requests"):
        out["tail_lengths"] = tail_lengths(reachable, args.requests, args.min_tokens, args.max_tokens, args.seed)
    return out


def prompt_ids(length: int, rng: random.Random) -> list[int]:
    return [rng.randrange(FIRST_TOKEN, LAST_TOKEN) for _ in range(length)]


def one(server, index: int, suite: str, ids: list[int], max_tokens: int):
    from bench_client import Sample, request_body, stream

    sample = Sample(suite=suite, case=str(len(ids)), index=index)
    stream(server, request_body(server, ids, max_tokens), sample)
    if not sample.ok:
        raise WarmError(f"{suite} request {index} ({len(ids)} tokens): {sample.error}")
    return sample


def server_of(args):
    from bench_client import Server, first_model

    server = Server(url=args.url, model=args.model or "", request_timeout_s=args.request_timeout)
    if not server.model:
        server = Server(url=args.url, model=first_model(server), request_timeout_s=args.request_timeout)
    return server


def serving(args, run: Callable) -> dict:
    """run(args) against the server at --url; with --serve CMD, CMD is started first (its output in
    --serve-log), waited for (GET /health, --health-timeout) and stopped after, whatever happened: the
    form `invoke warm --run` takes, where the command brings its own server."""
    if not args.serve:
        return run(args)
    # the bench's client: beside this script's checkout (servebuild/tools), or where an image keeps it
    here = Path(__file__).resolve().parent
    for folder in (here.parent / "servebuild" / "tools", Path("/usr/local/share/servebuild-bench")):
        if (folder / "bench_client.py").is_file() and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    from bench_client import BenchError, Server, ServerProcess, wait_healthy

    process = ServerProcess(args.serve, args.serve_log)
    try:
        try:
            healthy = wait_healthy(Server(url=args.url), args.health_timeout, process)
        except BenchError as exc:
            raise WarmError(str(exc)) from None
        out = run(args)
        out["healthy_after_s"] = round(healthy, 1)
        return out
    finally:
        process.stop()


def warm(args) -> dict:
    plan = make_plan(args)
    server = server_of(args)
    rng = random.Random(args.seed + 1)
    sent = []
    for i, t in enumerate(plan["warm_prefills"]):
        s = one(server, i, "warm", prompt_ids(t, rng), 1)
        sent.append({"prompt_tokens": t, "ttft_s": round(s.ttft_s, 4)})
    s = one(server, len(sent), "warm", prompt_ids(32, rng), 64)  # decode + DSpark draft/verify shapes
    sent.append({"prompt_tokens": 32, "output_tokens": 64, "ttft_s": round(s.ttft_s, 4)})
    return {"plan": {k: plan[k] for k in ("sms", "edges", "warm_prefills", "unreachable_edges")}, "sent": sent}


def tail(args) -> dict:
    from bench_client import accept_length, scrape
    from bench_suites import percentile

    plan = make_plan(args)
    server = server_of(args)
    rng = random.Random(args.seed + 2)
    before = scrape(server)
    rows = []
    t0 = time.monotonic()
    for i, t in enumerate(plan["tail_lengths"]):
        s = one(server, i, "tail", prompt_ids(t, rng), args.output_tokens)
        rows.append({"i": i, "prompt_tokens": t, "bucket": bucket_of(t, plan["edges"]), "ttft_s": round(s.ttft_s, 4),
                     "latency_s": round(s.latency_s, 4), "completion_tokens": s.completion_tokens,
                     "text_sha256": s.text_sha256})  # fmt: skip
        if args.out:  # what a run cut short (a device call's limit) still leaves: the rows so far
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump({"partial": True, "plan": {"sms": plan["sms"], "edges": plan["edges"]}, "rows": rows}, f)
    ttfts = [r["ttft_s"] for r in rows]
    p50 = percentile(ttfts, 50)
    return {
        "plan": {k: plan[k] for k in ("sms", "edges", "unreachable_edges")},
        "requests": len(rows),
        "duration_s": round(time.monotonic() - t0, 2),
        "ttft_s_p50": round(p50, 4),
        "ttft_s_p90": round(percentile(ttfts, 90), 4),
        "ttft_s_p99": round(percentile(ttfts, 99), 4),
        "ttft_s_max": max(ttfts),
        "p99_over_p50": round(percentile(ttfts, 99) / p50, 2) if p50 else None,
        "accept_length": accept_length(before, scrape(server)),
        "rows": rows,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dsv4_warm.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "warm", "tail"):
        s = sub.add_parser(name)
        s.add_argument("--engine", choices=("vllm", "sglang"), default="vllm", help="whose mHC rule (default vllm)")
        s.add_argument("--sms", default="auto", help="the GPU's SM count, or auto (torch asks the GPU)")
        s.add_argument("--source", help="the engine's wheel or a folder holding vllm/ or sglang/ (default: installed)")
        s.add_argument("--max-batched", type=int, default=8192, help="the server's max_num_batched_tokens")
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--out", help="also write the JSON here")
        if name != "plan":
            s.add_argument("--url", default="http://127.0.0.1:8000")
            s.add_argument("--serve", help="start this shell command as the server first ($SERVEBUILD_LAUNCHER)")
            s.add_argument("--serve-log", default="/tmp/dsv4-server.log")
            s.add_argument("--health-timeout", type=float, default=3600.0)
            s.add_argument("--model", default="")
            s.add_argument("--request-timeout", type=float, default=900.0)
        if name != "warm":
            s.add_argument("--requests", type=int, default=100)
            s.add_argument("--min-tokens", type=int, default=17)
            s.add_argument("--max-tokens", type=int, default=8192)
            s.add_argument("--output-tokens", type=int, default=64)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_client, bench_suites
    try:
        for name in ("max_batched", "requests", "output_tokens"):
            if getattr(args, name, 1) < 1:
                raise WarmError(f"--{name.replace('_', '-')} {getattr(args, name)}: give a whole number above 0")
        if args.cmd == "plan":
            result = make_plan(args)
        else:
            result = serving(args, warm if args.cmd == "warm" else tail)
    except WarmError as exc:
        print(f"dsv4_warm: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text if args.cmd == "plan" else json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
