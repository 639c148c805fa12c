#!/usr/bin/env python3
"""Benchmark (run by hand on a GPU host with no Docker engine): an engine's first start, from the build's
seed to a warm pack, measured with the image's own tools (issue 32, point 2).

    python scripts/first_start_gpu.py --engine vllm|sglang --model DIR --out DIR
                                      [--spec SPEC.json] [--steps aot,seeded,pack,packed,second]
    python scripts/first_start_gpu.py --engine vllm|sglang --workload dsv4 --model DIR --out DIR
                                      [--steps seeded,warmrun,pack,packed,nospec] [--redo]

The host needs the engine's pinned set on its Python (the runs so far: the py3.12 amd64 set less what the
host's torch 2.11.0+cu130 brings, staged in 56 MiB parts and installed with pip --target) and a model
(scripts/tiny_model.py). It runs what the image runs, with the image's cache variables (the engine kind's
table) under one root (/cache, the path the images use, so every path a build file holds is the image's):
  aot      servebuild/tools/aot_build.py with the recipe's aot spec (SPEC, `servebuild.render.aot.aot_spec`),
           the GPU hidden, as the image's aot stage runs it, then every file settled to the step's time as
           the image's settle step does (ninja rebuilds objects newer than its record of them): the seed
           (SEED/cache, SEED/aot.json). Without this step the seed is empty: a start compiles everything.
  seeded   a fresh /cache seeded from SEED (servebuild_cache.py seed, as every launcher does), then the
           engine's server, its health, a few requests, stop: a first start of the image as built
  pack     servebuild_cache.py pack: what that start compiled and the seed lacks, `invoke warm`'s layer;
           unpacked over a copy of the seed (the warm image's /opt/servebuild/seed/cache)
  packed   a fresh /cache seeded from the warm seed, then the server again: a first start of the warm image
  second   the same /cache once more: a second start
The server: vLLM with its defaults (torch.compile and CUDA graphs on); SGLang with the recipe's launch
profile (`sglang-native-fp8`: its env and every flag that applies to a dense model on one GPU, CUDA graphs
on, the profile's prefill-shape warm-up; the flags left out are named in SGLANG_LEFT_OUT with why).
Around each start the image's servebuild_cache.py takes the census (--listing before, --since after): the
compiles per kind, and apart the files rewritten on load and the logs. For each start: healthy-after
seconds, the engine's own init and compile seconds from its log, the census, and the new files per cache
directory. Writes OUT/first-start.json and the server logs; prints one line per start.
DeepSeek-V4 (--workload dsv4, issue 44; the model from scripts/tiny_dsv4.py): vLLM with the recipe
`vllm-dspark`'s profile (fp8 KV cache, block 256, no async scheduling, one sequence, DSpark k=6 greedy,
the JIT monitor; the flags left out are in VLLM_DSV4_LEFT_OUT with why), or SGLang with the recipe
`sglang-native-fp8`'s profile (its env: adaptive prefill; the dsv4 attention backend, Marlin MoE, DSpark
with 6 draft tokens, one request, 12,288-token chunks, the prefill-shape warm-up; the flags left out are
in SGLANG_DSV4_LEFT_OUT with why; its patch stack is the installed wheel's, scripts/dsv4_overlay.py), CuTe
DSL's cache under /cache too, and instead of the four prompts each start runs scripts/dsv4_warm.py (with
--engine: SGLang's own mHC bucket rule, read from the installed sglang):
  seeded   the tail test from the image as built (100 sequential requests, every mHC bucket of this
           GPU hit): TTFT p50/p90/p99 before the warm flow, and what each kind compiled
  precompile  a fresh /cache from the seed and scripts/dsv4_kernels.py: every mHC kernel variant of this
           GPU built at once through vLLM's own wrappers (and FlashInfer's FP8 GEMM module), the census;
           vLLM only (SGLang builds every mHC prenorm bucket itself while it loads the model)
  warmrun  the server on the /cache precompile left (else a fresh one from the seed), `dsv4_warm.py warm`
           (one prefill per bucket, a decode with the DSpark shapes): the run whose compiles `pack` keeps;
           one cut by a call's limit goes on in the next on the same /cache
  packed   the tail test from the warm pack: p99/p50 and compiles (0 is the goal)
  nospec   the same server without --speculative-config (SGLang: without its three --speculative-* flags),
           the same tail plan: each request's greedy text against the DSpark run's (dspark_greedy_equal)
Resumable: every step done is recorded in OUT/first-start.json ("done") and skipped when the script is
run again with the same --out and --work (a device call that ran out of time goes on where it stopped);
--redo runs the given steps again. Every option (--steps: each step once, precompile, warmrun and nospec with dsv4 only;
--timeout a finite number of seconds; --model a folder), --out's and --work's kind and an earlier run's
OUT/first-start.json (a regular JSON object of this engine, its `done` steps known) are checked before any
folder is made or step runs (the record by servebuild_info.py's bounded reader): a bad one is one line on
stderr, exit 2 (scripts/script_args.py).
Figures: docs/benchmarks.md (the first starts on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "servebuild" / "tools"
CACHE = Path("/cache")
KEEP = Path("/tmp/servebuild-keep-cache")  # /cache is for the next warmrun to go on with (precompile, or a cut warmrun)
PORT = 8000
# the images' cache variables, from where the renderer takes them (the engine kinds' tables)
sys.path.insert(0, str(ROOT))
from servebuild.engines.base import JIT_CACHE_ENV  # noqa: E402
from servebuild.engines.sglang import SGLang  # noqa: E402
from servebuild.engines.vllm import VLLM  # noqa: E402

from servebuild.tools.servebuild_info import Bad, read_record  # noqa: E402  (bounded: a FIFO not waited on)

from script_args import BadArgs, OneLineParser, folder_or_absent, positive_float  # noqa: E402

KINDS = {"vllm": VLLM, "sglang": SGLang}
# seconds each engine logs about its own start: {figure: pattern}; every match is summed
TIMINGS = {
    "vllm": {
        "init_engine_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s"),
        "torch_compile_s": re.compile(r"torch\.compile (?:takes|took) ([0-9.]+) s in total"),
    },
    "sglang": {
        "load_weight_s": re.compile(r"Load weight end\. elapsed=([0-9.]+) s"),
        "graph_capture_s": re.compile(r"Capture [a-z ]+ CUDA graph end\. elapsed=([0-9.]+) s"),
        # DSV4: deepseek_v4.py's _prewarm_mhc_pre_kernels, every mHC prenorm bucket compiled at load
        "mhc_prewarm_s": re.compile(r"MHC prenorm prewarm at load: compile ([0-9.]+)s"),
    },
}
# the SGLang profile's flags a dense tiny model on one GPU cannot take, and why
SGLANG_PROFILE = ("sglang-native-fp8", "sglang-native-fp8")  # recipe, launch profile
SGLANG_LEFT_OUT = {
    "--model-path": "the tiny model instead",
    "--served-model-name": "named tiny, as the requests ask",
    "--tp-size": "one GPU here",
    "--context-length": "sized for DSV4's 1M context; the tiny model's own length",
    "--attention-backend": "dsv4 serves only DSV4; triton for the Llama (FA3, SGLang's Hopper default, "
    "is 342 MB of sgl-kernel not staged)",
    "--speculative-algorithm": "DSPARK needs DSV4's draft head",
    "--speculative-num-draft-tokens": "with DSPARK",
    "--speculative-moe-runner-backend": "with DSPARK",
    "--moe-runner-backend": "a dense model has no MoE",
}
# the vllm-dspark profile's flags a tiny DSV4 on one GPU cannot take, and why
VLLM_DSV4_PROFILE = ("vllm-dspark", "vllm-dspark-1m")  # recipe, launch profile
VLLM_DSV4_LEFT_OUT = {
    "serve": "given first, with the tiny model's path",
    "--served-model-name": "named tiny, as the requests ask",
    "--tensor-parallel-size": "one GPU here: the tiny checkpoint holds one TP2 rank's shapes, served at TP1",
    "--distributed-executor-backend": "one GPU: no workers",
    "--max-model-len": "16384: the tail test's prompts (up to 8,192 tokens) and their output; the 1M context's "
    "KV is sized for the real model",
    "--gpu-memory-utilization": "0.85: room for the compilers beside the server",
}
# the sglang-native-fp8 profile's flags a tiny DSV4 on one GPU cannot take, and why (every other flag and the
# whole env are the image launcher's: the dsv4 backend, Marlin, DSpark, the chunk sizes, the prefill-shape warm-up)
SGLANG_DSV4_PROFILE = ("sglang-native-fp8", "sglang-native-fp8")  # recipe, launch profile
SGLANG_DSV4_LEFT_OUT = {
    "--model-path": "given first, with the tiny model's path",
    "--served-model-name": "named tiny, as the requests ask",
    "--tp-size": "one GPU here: the tiny checkpoint holds one TP2 rank's shapes, served at TP1",
    "--context-length": "16384: the tail test's prompts (up to 8,192 tokens) and their output; the 1M context's "
    "KV is sized for the real model",
    "--max-total-tokens": "1,053,184 is the 1M context's KV pool on two GH200s; here the pool is what "
    "--mem-fraction-static leaves",
    "--mem-fraction-static": "0.85: room for the compilers beside the server (0.96 leaves TileLang, DeepGEMM and "
    "nvcc none)",
}
# the nospec step's reference: the same server with no speculation (each of these takes a value)
SGLANG_SPEC_FLAGS = ("--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-moe-runner-backend")
VLLM_DSV4_EXTRA_ENV = {"CUTE_DSL_CACHE_DIR": "cute-dsl"}  # CuTe DSL's cache (CUTLASS >= 4.3.2), not yet in the image
PROMPTS = [
    "The capital of France is",
    "Write a long story about a dragon and a knight. " * 40,
    "1 2 3 4 5 6 7 8 9 " * 100,
    "Hello",
]


WORKLOAD = {"name": "tiny"}  # --workload


def env(engine: str) -> dict:
    out = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        NCCL_NVLS_ENABLE="0",
        TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
        NVSHMEM_DISABLE_NVLS="1",
    )
    out.update({var: str(CACHE / sub) for var, sub in {**JIT_CACHE_ENV, **KINDS[engine].cache_env}.items()})
    if WORKLOAD["name"] == "dsv4":
        out.update({var: str(CACHE / sub) for var, sub in VLLM_DSV4_EXTRA_ENV.items()})
    return out


def tool(engine: str, *args: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, str(TOOLS / "servebuild_cache.py"), *args], env=env(engine), capture_output=True, text=True
    )
    if run.returncode != 0:
        sys.exit(f"servebuild_cache.py {args[0]} failed: {run.stderr.strip()[-800:]}")
    return run


def listing(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def post(prompt: str) -> None:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 32, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        json.loads(resp.read())


def healthy(engine: str, log: Path) -> bool:
    # SGLang answers /health before its warm-ups end; it is ready once it says so
    if engine == "sglang" and "The server is fired up and ready to roll!" not in log.read_text(errors="replace"):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def sglang_profile() -> tuple[list[str], dict]:
    """The recipe's launch profile as the image's launcher gets it (args, env), less SGLANG_LEFT_OUT."""
    from servebuild.recipe.load import load_recipe

    recipe, name = SGLANG_PROFILE
    profile = load_recipe(recipe, ROOT).recipe.launch.profiles[name]
    args, kept, skip = [*profile.args, *profile.extra_args], [], False
    for arg in args:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in SGLANG_LEFT_OUT:
            skip = "=" not in arg  # every flag left out takes a value
            continue
        kept.append(arg)
    return kept, dict(profile.env)


def vllm_dsv4_profile(spec: bool = True) -> tuple[list[str], dict]:
    """The recipe's DSV4 launch profile as the image's launcher gets it (args, env), less VLLM_DSV4_LEFT_OUT;
    spec False drops --speculative-config too (the greedy reference for DSpark's equality)."""
    from servebuild.recipe.load import load_recipe

    recipe, name = VLLM_DSV4_PROFILE
    profile = load_recipe(recipe, ROOT).recipe.launch.profiles[name]
    args, kept, skip = [*profile.args, *profile.extra_args], [], 0
    takes_value = {k for k in VLLM_DSV4_LEFT_OUT if k.startswith("--")} | {"--speculative-config"}
    for i, arg in enumerate(args):
        if skip:
            skip -= 1
            continue
        flag = arg.split("=", 1)[0]
        if arg == "serve":
            skip = 1  # serve MODEL
            continue
        if flag in VLLM_DSV4_LEFT_OUT or (not spec and flag == "--speculative-config"):
            skip = 1 if ("=" not in arg and flag in takes_value) else 0
            continue
        kept.append(arg)
    return kept, dict(profile.env)


def sglang_dsv4_profile(spec: bool = True) -> tuple[list[str], dict]:
    """The recipe's SGLang launch profile as the image's launcher gets it (args, env), less
    SGLANG_DSV4_LEFT_OUT; spec False drops SGLANG_SPEC_FLAGS too (the greedy reference for DSpark's equality).
    A flag left out takes its value with it (`--flag VALUE`, or `--flag=VALUE` whole)."""
    from servebuild.recipe.load import load_recipe

    recipe, name = SGLANG_DSV4_PROFILE
    profile = load_recipe(recipe, ROOT).recipe.launch.profiles[name]
    drop = set(SGLANG_DSV4_LEFT_OUT) | (set() if spec else set(SGLANG_SPEC_FLAGS))
    args, kept, i = [*profile.args, *profile.extra_args], [], 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.split("=", 1)[0] in drop:
            if "=" not in arg and i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        kept.append(arg)
    return kept, dict(profile.env)


def server_argv(engine: str, model: str, spec: bool = True) -> tuple[list[str], dict]:
    listen = ["--host", "127.0.0.1", "--port", str(PORT)]
    if engine == "sglang" and WORKLOAD["name"] == "dsv4":
        args, profile_env = sglang_dsv4_profile(spec)
        return [
            *[sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name", "tiny"],
            *listen,
            *["--context-length", "16384", "--mem-fraction-static", "0.85"],
            *args,
        ], profile_env
    if engine == "vllm" and WORKLOAD["name"] == "dsv4":
        args, profile_env = vllm_dsv4_profile(spec)
        return [
            *[sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--served-model-name", "tiny"],
            *listen,
            *["--max-model-len", "16384", "--gpu-memory-utilization", "0.85"],
            *args,
        ], profile_env
    if engine == "vllm":  # vLLM's defaults: torch.compile and CUDA graphs on
        return [
            *[sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--served-model-name", "tiny"],
            *listen,
            *["--dtype", "bfloat16", "--max-model-len", "4096", "--gpu-memory-utilization", "0.3"],
            *["--max-num-seqs", "16"],
        ], {}
    args, profile_env = sglang_profile()
    return [
        *[sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name", "tiny"],
        *listen,
        *["--dtype", "bfloat16", "--attention-backend", "triton"],
        *args,
    ], profile_env


def stop(server: subprocess.Popen) -> None:
    """SIGINT to the server's process group, then SIGKILL after 60 s; a group already gone is fine."""
    for sig, wait in ((signal.SIGINT, 60), (signal.SIGKILL, None)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            pass
        try:
            server.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# the server's largest prefill step (dsv4_warm.py --max-batched): vLLM's max_num_batched_tokens (its default with
# max-model-len 16384), SGLang's --chunked-prefill-size of the profile
MAX_BATCHED = {"vllm": 8192, "sglang": 12288}
# the engine's own words about what it compiled: vLLM's JIT monitor; SGLang's mHC prewarm and its JIT builds
JIT_LINES = {
    "vllm": re.compile(r"(?i)jit monitor[^\n]*"),
    "sglang": re.compile(r"(?i)(?:MHC prenorm prewarm|jit_kernel|deep_?gemm[^\n]*compil|tilelang[^\n]*compil)[^\n]*"),
}


def dsv4_tool(engine: str, cmd: str, out: Path, name: str, timeout: float) -> dict:
    """scripts/dsv4_warm.py against the running server, with the engine's own mHC rule: its JSON (the tail
    test's rows too)."""
    path = out / f"dsv4-{cmd}-{name}.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dsv4_warm.py"), cmd, "--engine", engine, "--url", f"http://127.0.0.1:{PORT}",
         "--model", "tiny", "--sms", "auto", "--max-batched", str(MAX_BATCHED[engine]), "--out", str(path)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    print(run.stdout[-1500:], run.stderr[-1500:], flush=True)
    if run.returncode != 0:
        raise RuntimeError(f"dsv4_warm.py {cmd} failed: {run.stderr.strip()[-400:]}")
    return json.loads(path.read_text())


def start(engine: str, name: str, model: str, out: Path, timeout: float, load: str = "prompts") -> dict:
    before = out / f"listing-{name}-before.json"
    after = out / f"listing-{name}-after.json"
    tool(engine, "census", "--cache", str(CACHE), "--listing", str(before))
    log = out / f"server-{name}.log"
    argv, extra_env = server_argv(engine, model, spec=load != "nospec")
    t0 = time.monotonic()
    measured: dict = {}
    with open(log, "w") as handle:
        server = subprocess.Popen(
            argv, env={**env(engine), **extra_env}, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while not healthy(engine, log):
            if server.poll() is not None or time.monotonic() - t0 > timeout:
                print(log.read_text()[-4000:])
                sys.exit(f"{name}: the server {'exited' if server.poll() is not None else 'timed out'}")
            time.sleep(0.5)
        healthy_after = round(time.monotonic() - t0, 1)
        if load == "prompts":
            for prompt in PROMPTS:
                post(prompt)
        else:  # dsv4: the warm flow, or the tail test (with or without DSpark)
            measured = dsv4_tool(engine, "warm" if load == "warm" else "tail", out, name, 4 * timeout)
    finally:
        stop(server)
    census = json.loads(
        tool(engine, "census", "--cache", str(CACHE), "--listing", str(after), "--since", str(before)).stdout
    )
    text = log.read_text(errors="replace")
    old, now = listing(before), listing(after)
    new = sorted(p for p in now if p not in old)
    row = {
        "start": name,
        "argv": argv[1:],
        "healthy_after_s": healthy_after,
        **{k: round(sum(map(float, pat.findall(text))), 2) or None for k, pat in TIMINGS[engine].items()},
        "changed": census.get("changed"),
        "rewritten": census.get("rewritten"),
        "logs": census.get("logs"),
        "new_files": {
            k: sum(1 for p in new if p.split("/", 1)[0] == k) for k in sorted({p.split("/", 1)[0] for p in new})
        },
        "new_compiled_host_code": [p for p in new if p.startswith(("humming/", "flashinfer/", "tvm-ffi/"))][:60],
    }
    if measured:
        row["dsv4"] = measured
        jit = re.findall(JIT_LINES[engine], text)
        row["jit_monitor_lines"] = len(jit)
        row["jit_monitor_tail"] = jit[-20:]
    timings = ", ".join(f"{k} {row[k]}" for k in TIMINGS[engine])
    tails = ""
    if measured.get("ttft_s_p50") is not None:
        tails = (f", TTFT p50 {measured['ttft_s_p50']} p90 {measured['ttft_s_p90']} p99 {measured['ttft_s_p99']} s "
                 f"(p99/p50 {measured['p99_over_p50']})")  # fmt: skip
    print(
        f"{name}: healthy after {healthy_after} s, {timings}, compiles {row['changed']}, "
        f"rewritten {row['rewritten']}, logs {row['logs']}{tails}",
        flush=True,
    )
    return row


def fresh_cache(engine: str, seed: Path) -> None:
    """A fresh /cache seeded from SEED (servebuild_cache.py seed, as every launcher does); an empty seed where
    no aot step ran."""
    shutil.rmtree(CACHE, ignore_errors=True)
    CACHE.mkdir()
    (seed / "cache").mkdir(parents=True, exist_ok=True)
    tool(engine, "seed", "--cache", str(CACHE), "--seed", str(seed))


def precompile(engine: str, model: str, out: Path, timeout: float) -> dict:
    """scripts/dsv4_kernels.py with the image's cache variables: its JSON and the census of what it built."""
    before, after = out / "listing-precompile-before.json", out / "listing-precompile-after.json"
    tool(engine, "census", "--cache", str(CACHE), "--listing", str(before))
    path = out / "dsv4-kernels.json"
    t0 = time.monotonic()
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dsv4_kernels.py"), "--model", model, "--out", str(path)],
        env=env(engine), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    print(run.stderr[-2500:], flush=True)
    if run.returncode not in (0, 1) or not path.exists():
        sys.exit(f"precompile: dsv4_kernels.py failed: {run.stderr.strip()[-600:]}")
    census = json.loads(
        tool(engine, "census", "--cache", str(CACHE), "--listing", str(after), "--since", str(before)).stdout
    )
    result = json.loads(path.read_text())
    summary = {k: result[k] for k in ("jobs", "workers", "seconds", "failed")}
    print(f"precompile: {result['jobs']} variants in {round(time.monotonic() - t0, 1)} s with {result['workers']} "
          f"workers, compiles {census.get('changed')}, failed {len(result['failed'])}", flush=True)  # fmt: skip
    return {**summary, "changed": census.get("changed"), "built": result["built"]}


def greedy_equal(starts: list) -> dict:
    """Each tail request's greedy text with DSpark (the last start that had it) against without (nospec)."""
    spec = [r for r in starts if r.get("dsv4", {}).get("rows") and r["start"] != "nospec"]
    plain = [r for r in starts if r["start"] == "nospec" and r.get("dsv4", {}).get("rows")]
    if not spec or not plain:
        return {}
    a, b = spec[-1]["dsv4"]["rows"], plain[-1]["dsv4"]["rows"]
    pairs = [(x, y) for x, y in zip(a, b) if x["prompt_tokens"] == y["prompt_tokens"]]
    equal = sum(1 for x, y in pairs if x["text_sha256"] == y["text_sha256"])
    return {"against": spec[-1]["start"], "compared": len(pairs), "equal": equal,
            "differ": [x["i"] for x, y in pairs if x["text_sha256"] != y["text_sha256"]][:20]}  # fmt: skip


STEPS = ("aot", "seeded", "pack", "packed", "second")  # --workload tiny
DSV4_STEPS = ("aot", "seeded", "precompile", "warmrun", "pack", "packed", "nospec", "second")  # --workload dsv4


def steps_list(text: str) -> list[str]:
    steps = text.split(",")
    if not 1 <= len(steps) <= 32 or any(s not in DSV4_STEPS for s in steps) or len(set(steps)) != len(steps):
        raise argparse.ArgumentTypeError(
            f"--steps {text!r}: give steps once each, separated by commas, of {', '.join(DSV4_STEPS)}"
        )
    return steps


def parse_args(argv: list[str]):
    """Every option, --out's record and --work checked before a folder is made or a step runs (BadArgs)."""
    ap = OneLineParser(prog="first_start_gpu.py", description="an engine's first start, seed to warm pack")
    ap.add_argument("--engine", choices=sorted(KINDS), required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", help="the recipe's aot spec (the aot step)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/vfs")
    ap.add_argument("--steps", type=steps_list, default=list(STEPS))
    ap.add_argument("--timeout", type=positive_float("--timeout", 86400), default=400)
    ap.add_argument("--workload", choices=("tiny", "dsv4"), default="tiny")
    ap.add_argument("--redo", action="store_true", help="run the given steps again even where done")
    args = ap.parse_args(argv)
    if args.workload == "dsv4" and args.engine == "sglang" and "precompile" in args.steps:
        raise BadArgs(
            "--steps precompile: vllm only (scripts/dsv4_kernels.py builds vLLM's mHC variants through "
            "vLLM's wrappers; SGLang builds every mHC prenorm bucket itself while it loads the model)"
        )
    allowed = DSV4_STEPS if args.workload == "dsv4" else STEPS
    wrong = [s for s in args.steps if s not in allowed]
    if wrong:
        raise BadArgs(f"--steps: {', '.join(wrong)} only with --workload dsv4 (tiny: {', '.join(STEPS)})")
    if not Path(args.model).is_dir():
        raise BadArgs(f"--model {args.model}: not a folder (a model made by scripts/tiny_model.py or tiny_dsv4.py)")
    if args.spec is not None and not Path(args.spec).is_file():
        raise BadArgs(f"--spec {args.spec}: not a file")
    out = folder_or_absent("--out", args.out)
    folder_or_absent("--work", args.work)
    report = {"engine": args.engine, "starts": [], "done": []}
    path = out / "first-start.json"
    if os.path.lexists(path):
        try:
            report = read_record(str(path), "record of an earlier run", required=True)
        except Bad as exc:
            raise BadArgs(str(exc)) from None
        if report.get("engine") != args.engine:
            raise BadArgs(f"{path}: engine: {report.get('engine')!r}, not --engine {args.engine}'s record")
        done, starts = report.setdefault("done", []), report.setdefault("starts", [])
        if not isinstance(done, list) or any(s not in DSV4_STEPS for s in done):
            raise BadArgs(f"{path}: done: not a list of steps ({', '.join(DSV4_STEPS)})")
        if not isinstance(starts, list) or not all(isinstance(s, dict) for s in starts):
            raise BadArgs(f"{path}: starts: not a list of objects")
    pending = [s for s in args.steps if args.redo or s not in report["done"]]
    if "aot" in pending and not args.spec:
        raise BadArgs("the aot step needs --spec")
    return args, report


def main(argv: list[str] | None = None) -> int:
    try:
        args, report = parse_args(sys.argv[1:] if argv is None else argv)
    except BadArgs as exc:
        print(f"first_start_gpu.py: {exc}", file=sys.stderr)
        return 2
    WORKLOAD["name"] = args.workload
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    seed, warm = work / "seed", work / "warm-seed"
    report_path = out / "first-start.json"
    report["workload"] = args.workload
    dsv4 = args.workload == "dsv4"
    for step in args.steps:
        if step in report["done"] and not args.redo:
            print(f"{step}: done in an earlier run ({report_path}), skipped", flush=True)
            continue
        if step == "aot":
            shutil.rmtree(CACHE, ignore_errors=True)
            shutil.rmtree(seed, ignore_errors=True)
            t0 = time.monotonic()
            settled = int(time.time())  # the image's aot stage runs with the step's settled time, then settles
            run = subprocess.run(
                [
                    sys.executable,
                    str(TOOLS / "aot_build.py"),
                    "--spec",
                    args.spec,
                    "--cache",
                    str(CACHE),
                    "--seed",
                    str(seed),
                ],
                env=dict(env(args.engine), CUDA_VISIBLE_DEVICES="", SERVEBUILD_SETTLED=str(settled)),
                capture_output=True,
                text=True,
            )
            print(run.stdout[-1500:], run.stderr[-1500:])
            if run.returncode != 0:
                sys.exit("aot_build failed")
            for path in [seed, *seed.rglob("*")]:  # what render/settle.py's step does to the files it wrote
                os.utime(path, (settled, settled), follow_symlinks=False)
            aot = json.loads((seed / "aot.json").read_text())
            report["aot"] = {"seconds": round(time.monotonic() - t0, 1), "aot": aot}
            print(f"aot: {report['aot']['seconds']} s", flush=True)
        elif step == "precompile":  # dsv4: every mHC kernel variant at once, into a fresh /cache the warmrun keeps
            fresh_cache(args.engine, seed)
            report["precompile"] = precompile(args.engine, args.model, out, args.timeout)
            KEEP.write_text("precompile\n")
        elif step in ("seeded", "packed", "warmrun", "nospec"):
            if step == "warmrun" and KEEP.exists():
                print("warmrun: on the /cache the precompile step (or a warmrun cut short) left", flush=True)
            else:
                fresh_cache(args.engine, warm if step in ("packed", "nospec") else seed)
            if step == "warmrun":
                KEEP.write_text("warmrun\n")  # a warmrun cut short by a call's limit goes on with what it built
            load = "prompts" if not dsv4 else {"warmrun": "warm", "nospec": "nospec"}.get(step, "tail")
            report["starts"].append(start(args.engine, step, args.model, out, args.timeout, load))
            if step == "nospec":
                report["dspark_greedy_equal"] = greedy_equal(report["starts"])
            if step == "warmrun":
                KEEP.unlink(missing_ok=True)
        elif step == "second":
            load = "tail" if dsv4 else "prompts"
            report["starts"].append(start(args.engine, step, args.model, out, args.timeout, load))
        elif step == "pack":
            packed = work / "warm.tar"
            tool(args.engine, "pack", "--cache", str(CACHE), "--seed", str(seed), "--out", str(packed))
            shutil.rmtree(warm, ignore_errors=True)
            shutil.copytree(seed, warm, symlinks=True)
            with tarfile.open(packed) as tar:
                names = tar.getnames()
                tar.extractall(warm / "cache", filter="tar")
            kinds: dict[str, int] = {}
            for name in names:
                kinds[name.split("/", 1)[0]] = kinds.get(name.split("/", 1)[0], 0) + 1
            report["pack"] = {"bytes": packed.stat().st_size, "files": len(names), "kinds": kinds}
            print(f"pack: {packed.stat().st_size} bytes, {len(names)} files {kinds}", flush=True)
        report["done"] = sorted(set(report["done"]) | {step})
        report_path.write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
