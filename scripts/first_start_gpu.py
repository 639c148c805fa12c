#!/usr/bin/env python3
"""Benchmark (run by hand on a GPU host with no Docker engine): vLLM's first start, from an empty seed to
a warm pack, measured with the image's own tools (issue 32, point 2).

    python scripts/vllm_first_start_h200.py --model DIR --spec SPEC.json --out DIR [--steps aot,seeded,pack,packed,second]

The host needs vLLM's pinned set on its Python (the 2026-12-06 run: the py3.12 amd64 set less what the
host's torch 2.11.0+cu130 brings, 163 wheels, staged in 56 MiB parts and installed with pip --target) and
a model (scripts/tiny_model.py). It runs what the image runs, with the image's cache variables under one
root (/cache, the path the images use, so every path a build file holds is the image's):
  aot      servebuild/tools/aot_build.py with the recipe's aot spec (SPEC, `servebuild.render.aot.aot_spec`),
           the GPU hidden, as the image's aot stage runs it, then every file settled to the step's time as
           the image's settle step does (ninja rebuilds objects newer than its record of them): the seed
           (SEED/cache, SEED/aot.json)
  seeded   a fresh /cache seeded from SEED (servebuild_cache.py seed, as every launcher does), then vLLM's
           server, its health, a few requests, stop: a first start of the image as built
  pack     servebuild_cache.py pack: what that start compiled and the seed lacks, `invoke warm`'s layer;
           unpacked over a copy of the seed (the warm image's /opt/servebuild/seed/cache)
  packed   a fresh /cache seeded from the warm seed, then the server again: a first start of the warm image
  second   the same /cache once more: a second start
Around each start the image's servebuild_cache.py takes the census (--listing before, --since after): the
compiles per kind, and apart the files rewritten on load and the logs. For each start: healthy-after
seconds, vLLM's own "init engine" and "torch.compile" seconds from its log, the census, and every new
file under humming/ and flashinfer/ (what those JITs compiled). Writes OUT/first-start.json and the
server logs; prints one line per start. Figures: docs/benchmarks.md (vLLM's first start, 2026-12-06).
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
# the vLLM image's cache variables, from where the renderer takes them (the engine kinds' tables)
sys.path.insert(0, str(ROOT))
from servebuild.engines.base import JIT_CACHE_ENV  # noqa: E402
from servebuild.engines.vllm import VLLM  # noqa: E402

CACHE_ENV = {**JIT_CACHE_ENV, **VLLM.cache_env}
INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")
COMPILE = re.compile(r"torch\.compile (?:takes|took) ([0-9.]+) s in total")
PROMPTS = [
    "The capital of France is",
    "Write a long story about a dragon and a knight. " * 40,
    "1 2 3 4 5 6 7 8 9 " * 100,
    "Hello",
]


def env() -> dict:
    out = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        NCCL_NVLS_ENABLE="0",
        TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
        NVSHMEM_DISABLE_NVLS="1",
    )
    out.update({var: str(CACHE / sub) for var, sub in CACHE_ENV.items()})
    return out


def tool(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, str(TOOLS / "servebuild_cache.py"), *args], env=env(), capture_output=True, text=True
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


def healthy() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def start(name: str, model: str, out: Path, timeout: float) -> dict:
    before = out / f"listing-{name}-before.json"
    after = out / f"listing-{name}-after.json"
    tool("census", "--cache", str(CACHE), "--listing", str(before))
    log = out / f"server-{name}.log"
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(PORT),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "4096",
        "--gpu-memory-utilization",
        "0.3",
        "--max-num-seqs",
        "16",
    ]
    t0 = time.monotonic()
    with open(log, "w") as handle:
        server = subprocess.Popen(argv, env=env(), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while not healthy():
            if server.poll() is not None or time.monotonic() - t0 > timeout:
                print(log.read_text()[-4000:])
                sys.exit(f"{name}: the server {'exited' if server.poll() is not None else 'timed out'}")
            time.sleep(0.5)
        healthy_after = round(time.monotonic() - t0, 1)
        for prompt in PROMPTS:
            post(prompt)
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    census = json.loads(tool("census", "--cache", str(CACHE), "--listing", str(after), "--since", str(before)).stdout)
    text = log.read_text()
    old, now = listing(before), listing(after)
    new = sorted(p for p in now if p not in old)
    row = {
        "start": name,
        "healthy_after_s": healthy_after,
        "init_engine_s": float(m[-1]) if (m := INIT.findall(text)) else None,
        "torch_compile_s": float(m[-1]) if (m := COMPILE.findall(text)) else None,
        "changed": census.get("changed"),
        "rewritten": census.get("rewritten"),
        "logs": census.get("logs"),
        "new_files": {
            k: sum(1 for p in new if p.split("/", 1)[0] == k) for k in sorted({p.split("/", 1)[0] for p in new})
        },
        "new_humming_flashinfer": [p for p in new if p.startswith(("humming/", "flashinfer/"))][:60],
    }
    print(
        f"{name}: healthy after {healthy_after} s, init {row['init_engine_s']} s, torch.compile "
        f"{row['torch_compile_s']} s, compiles {row['changed']}, rewritten {row['rewritten']}, logs {row['logs']}",
        flush=True,
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", required=True)
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
    report = json.loads(report_path.read_text()) if report_path.exists() else {"starts": []}
    for step in args.steps.split(","):
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
                env=dict(env(), CUDA_VISIBLE_DEVICES="", SERVEBUILD_SETTLED=str(settled)),
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
            tool("seed", "--cache", str(CACHE), "--seed", str(seed if step == "seeded" else warm))
            report["starts"].append(start(step, args.model, out, args.timeout))
        elif step == "second":
            report["starts"].append(start(step, args.model, out, args.timeout))
        elif step == "pack":
            packed = work / "warm.tar"
            tool("pack", "--cache", str(CACHE), "--seed", str(seed), "--out", str(packed))
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
