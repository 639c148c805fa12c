#!/usr/bin/env python3
"""Benchmark (run by hand on a GPU host with no Docker engine): an engine's first start, from the build's
seed to a warm pack, measured with the image's own tools (issue 32, point 2).

    python scripts/first_start_gpu.py --engine vllm|sglang --model DIR --out DIR
                                      [--spec SPEC.json] [--steps aot,seeded,pack,packed,second]

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
PORT = 8000
# the images' cache variables, from where the renderer takes them (the engine kinds' tables)
sys.path.insert(0, str(ROOT))
from servebuild.engines.base import JIT_CACHE_ENV  # noqa: E402
from servebuild.engines.sglang import SGLang  # noqa: E402
from servebuild.engines.vllm import VLLM  # noqa: E402

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
PROMPTS = [
    "The capital of France is",
    "Write a long story about a dragon and a knight. " * 40,
    "1 2 3 4 5 6 7 8 9 " * 100,
    "Hello",
]


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


def server_argv(engine: str, model: str) -> tuple[list[str], dict]:
    listen = ["--host", "127.0.0.1", "--port", str(PORT)]
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


def start(engine: str, name: str, model: str, out: Path, timeout: float) -> dict:
    before = out / f"listing-{name}-before.json"
    after = out / f"listing-{name}-after.json"
    tool(engine, "census", "--cache", str(CACHE), "--listing", str(before))
    log = out / f"server-{name}.log"
    argv, extra_env = server_argv(engine, model)
    t0 = time.monotonic()
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
        for prompt in PROMPTS:
            post(prompt)
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
    timings = ", ".join(f"{k} {row[k]}" for k in TIMINGS[engine])
    print(
        f"{name}: healthy after {healthy_after} s, {timings}, compiles {row['changed']}, "
        f"rewritten {row['rewritten']}, logs {row['logs']}",
        flush=True,
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=sorted(KINDS), required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", help="the recipe's aot spec (the aot step)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/vfs")
    ap.add_argument("--steps", default="aot,seeded,pack,packed,second")
    ap.add_argument("--timeout", type=float, default=400)
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    seed, warm = work / "seed", work / "warm-seed"
    report_path = out / "first-start.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {"engine": args.engine, "starts": []}
    for step in args.steps.split(","):
        if step == "aot":
            if not args.spec:
                sys.exit("the aot step needs --spec")
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
        elif step in ("seeded", "packed"):
            shutil.rmtree(CACHE, ignore_errors=True)
            CACHE.mkdir()
            (seed / "cache").mkdir(parents=True, exist_ok=True)  # no aot step: an empty seed
            tool(args.engine, "seed", "--cache", str(CACHE), "--seed", str(seed if step == "seeded" else warm))
            report["starts"].append(start(args.engine, step, args.model, out, args.timeout))
        elif step == "second":
            report["starts"].append(start(args.engine, step, args.model, out, args.timeout))
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
        else:
            sys.exit(f"unknown step {step!r}")
        report_path.write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
