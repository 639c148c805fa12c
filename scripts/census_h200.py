#!/usr/bin/env python3
"""Benchmark (run by hand on a GPU host): what do torch.compile (Inductor) and Triton write under the
cache root on a first start, and what on a warm second and third start that compiles nothing?

    python scripts/census_h200.py --out DIR [--cache /tmp/census-cache]

Each start is a fresh process with the image's cache variables under one root (TORCHINDUCTOR_CACHE_DIR,
TRITON_CACHE_DIR), compiling a small model with torch.compile (mode max-autotune-no-cudagraphs, so
Inductor autotunes and writes .best_config files, as vLLM's compile does) at two shapes. Around each
start the image's own tool (servebuild/tools/servebuild_cache.py census --listing/--since) takes the
census. Writes DIR/census-h200.json: per start, the seconds, the census and every path that was new,
rewritten or removed (size before and after), which the census's compile rule is tested against.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "servebuild" / "tools"

WORKLOAD = r"""
import torch
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 512)
        self.b = torch.nn.Linear(512, 256)
    def forward(self, x):
        return torch.nn.functional.layer_norm(self.b(torch.nn.functional.gelu(self.a(x))) + x, (256,))
m = M().cuda().half()
c = torch.compile(m, mode="max-autotune-no-cudagraphs", dynamic=False)
for n in (64, 128):
    x = torch.randn(n, 256, device="cuda", dtype=torch.half)
    torch.testing.assert_close(c(x), m(x), rtol=2e-2, atol=2e-2)
torch.cuda.synchronize()
print("workload ok")
"""


def listing(path: Path) -> dict:
    return json.loads(path.read_text())


def census(cache: Path, listing_out: Path, since: Path | None) -> dict:
    cmd = [
        sys.executable,
        str(TOOLS / "servebuild_cache.py"),
        "census",
        "--cache",
        str(cache),
        "--listing",
        str(listing_out),
    ] + (["--since", str(since)] if since else [])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=TOOLS, check=True)
    return json.loads(done.stdout)


def diff(before: dict, after: dict) -> dict:
    new = {p: after[p] for p in after if p not in before}
    rewritten = {p: [before[p], after[p]] for p in after if p in before and before[p] != after[p]}
    removed = sorted(p for p in before if p not in after)
    return {"new": new, "rewritten": rewritten, "removed": removed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default="/tmp/census-cache")
    ap.add_argument("--starts", type=int, default=3)
    args = ap.parse_args()
    out, cache = Path(args.out), Path(args.cache)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        PYTHONUNBUFFERED="1",
    )
    report = {"torch": None, "starts": []}
    prev = out / "listing-0.json"
    census(cache, prev, None)
    for i in range(1, args.starts + 1):
        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True)
        seconds = round(time.monotonic() - t0, 1)
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:])
            return 1
        now = out / f"listing-{i}.json"
        result = census(cache, now, prev)
        changes = diff(listing(prev), listing(now))
        report["starts"].append({"start": i, "seconds": seconds, "census": result, **changes})
        print(
            f"start {i}: {seconds} s, files {result['files']}, census changed {result.get('changed')}, "
            f"compiled {result.get('compiled')}, new {len(changes['new'])}, rewritten {len(changes['rewritten'])}"
        )
        prev = now
    import torch  # noqa: PLC0415 - only for the record

    report["torch"] = torch.__version__
    (out / "census-h200.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
