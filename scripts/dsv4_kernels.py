"""Compile DeepSeek-V4's mHC kernels for every bucket of this GPU at once, through vLLM's own wrappers
(issue 44, the first half of the warm flow on a GPU host).

usage: python dsv4_kernels.py --model DIR [--jobs N] [--sms N|auto] [--source PATH] [--max-batched N]
                              [--out FILE]

Why: a server compiles the mHC kernels one at a time, inside the step that first reaches a split factor
(7-20 s each on an H100, about 45 of them: the seed's 11.5 s p99 TTFT). Every kernel is a pure function of
its compile-time arguments (the split factor, the shapes, the model's epsilons), so they can all be built
before the server starts, in parallel: this runs vLLM's own mHC wrappers (vllm/model_executor/kernels/mhc/
tilelang.py, the functions the DSV4 decoder layer calls) with the checkpoint's own config values and one
step of T tokens per kernel variant, T taken from dsv4_warm.py's plan (the engine's split rule and this
GPU's SM count). Each wrapper also builds what it calls: DeepGEMM's tf32 hc-prenorm GEMM per split, and
the post / head kernels. FlashInfer's sm90 FP8 block-scale GEMM module (the FP8 linears' kernel, minutes of
nvcc) is built alongside. The caches are the ones the environment names (TILELANG_CACHE_DIR, DG_JIT_CACHE_DIR,
FLASHINFER_WORKSPACE_BASE...: first_start_gpu.py sets the images' values), so the server that starts next
finds them; the warm flow through the server (dsv4_warm.py warm) then proves it: whatever still compiles
there is counted by the census.

The values that key a kernel are read from config.json (hidden_size, hc_mult, rms_norm_eps, hc_eps,
hc_sinkhorn_iters) and the decoder's constant hc_post_alpha 2.0 is checked against the engine's text of
the model: a kernel built here with another value would be a different kernel, never used.

Needs torch, vLLM and a GPU (the kernels compile for the GPU they run on). JSON on stdout (and --out): the
variants built, seconds per job and in all.
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv4_warm  # noqa: E402

MODEL_FILE = "vllm/models/deepseek_v4/nvidia/model.py"
HC_POST_ALPHA = 2.0  # DeepseekV4DecoderLayer: `self.hc_post_alpha = 2.0`, checked against the engine's text
CONFIG_KEYS = ("hidden_size", "hc_mult", "rms_norm_eps", "hc_eps", "hc_sinkhorn_iters")


# the wrappers build() calls and the parameters it passes them by name, checked against the engine's text
WRAPPERS = {
    "mhc_pre_broadcast_tilelang": ("residual", "fn", "hc_scale", "hc_base", "rms_eps", "hc_pre_eps",
                                   "hc_sinkhorn_eps", "hc_post_mult_value", "sinkhorn_repeat", "n_splits",
                                   "norm_weight", "norm_eps", "fn_broadcast"),
    "mhc_fused_post_pre_tilelang": ("x", "residual", "post_layer_mix", "comb_res_mix", "fn", "hc_scale", "hc_base",
                                    "rms_eps", "hc_pre_eps", "hc_sinkhorn_eps", "hc_post_mult_value",
                                    "sinkhorn_repeat", "n_splits", "tile_n", "norm_weight", "norm_eps"),
    "mhc_post_tilelang": ("x", "residual", "post_layer_mix", "comb_res_mix"),
    "hc_head_fused_kernel_tilelang": ("hs_flat", "fn", "hc_scale", "hc_base", "rms_eps", "hc_eps"),
}  # fmt: skip


class KernelError(Exception):
    """One line for the user."""


def model_values(model: str, source: str | None) -> dict:
    path = Path(model) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KernelError(f"{path}: cannot read the model's config ({exc})") from None
    if not isinstance(config, dict):
        raise KernelError(f"{path}: not a JSON object")
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise KernelError(f"{path}: no {', '.join(missing)} (not a DeepSeek-V4 config)")
    text = dsv4_warm.engine_source(MODEL_FILE, source)
    if f"self.hc_post_alpha = {HC_POST_ALPHA}" not in text:
        raise KernelError(f"{MODEL_FILE}: 'self.hc_post_alpha = {HC_POST_ALPHA}' is gone: re-read the decoder layer")
    return {k: config[k] for k in CONFIG_KEYS}


def check_wrappers(text: str) -> None:
    """The wrappers build() calls take the parameters it passes, in that order, or one line naming what moved."""
    found = {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
    for name, params in WRAPPERS.items():
        if name not in found:
            raise KernelError(f"{dsv4_warm.CALLS_FILE}: no {name}: the mHC wrappers changed, re-read them")
        have = tuple(a.arg for a in found[name].args.args)
        if have != params:
            raise KernelError(f"{dsv4_warm.CALLS_FILE}: {name}({', '.join(have)}) is not the ({', '.join(params)}) "
                              f"this script passes: re-read it")  # fmt: skip


def jobs_of(plan: dict) -> list[tuple[str, int]]:
    """One (call site, T) per kernel variant: the first T of each split factor per site, and the small path's
    T values (which the residual site's wrapper takes at T <= 16)."""
    out = [("pre", t) for t in plan["small"]]
    for site, per_split in sorted(plan["variants"].items()):
        if site != "small":
            out += [(site, t) for t in sorted(set(per_split.values()))]
    return sorted(set(out), key=lambda j: (j[1], j[0]))


def build(site: str, t: int, v: dict) -> dict:
    """In a worker: one step of T tokens through the wrapper the decoder layer calls at this site."""
    import torch
    from vllm.model_executor.kernels.mhc import tilelang as mhc

    t0 = time.monotonic()
    dev = torch.device("cuda", 0)
    hid, hc = v["hidden_size"], v["hc_mult"]
    mix = hc * (2 + hc)
    eps = (v["rms_norm_eps"], v["hc_eps"], v["hc_eps"], HC_POST_ALPHA, v["hc_sinkhorn_iters"])
    gen = torch.Generator(device=dev).manual_seed(t)

    def rnd(*shape, dtype=torch.float32, scale=0.02):
        return (torch.randn(*shape, generator=gen, device=dev) * scale).to(dtype)

    fn, scale, base = rnd(mix, hc * hid), rnd(3) + 1.0, rnd(mix)
    norm = torch.ones(hid, dtype=torch.bfloat16, device=dev)
    if site == "layer0":  # the first layer's pre, its residual broadcast from (T, H)
        x = rnd(t, hid, dtype=torch.bfloat16, scale=1.0)
        fn_b = fn.view(-1, hc, hid).sum(dim=1).contiguous()
        mhc.mhc_pre_broadcast_tilelang(x, fn, scale, base, *eps, norm_weight=norm, norm_eps=v["rms_norm_eps"],
                                       fn_broadcast=fn_b)  # fmt: skip
    elif site == "pre":  # every later pre, fused with the post before it, then the last post and the head
        x = rnd(t, hid, dtype=torch.bfloat16, scale=1.0)
        residual = rnd(t, hc, hid, dtype=torch.bfloat16, scale=1.0)
        post = torch.rand(t, hc, 1, generator=gen, device=dev)
        comb = torch.rand(t, hc, hc, generator=gen, device=dev)
        res, post2, comb2, layer_in = mhc.mhc_fused_post_pre_tilelang(
            x, residual, post, comb, fn, scale, base, *eps, n_splits=1, tile_n=1, norm_weight=norm,
            norm_eps=v["rms_norm_eps"],
        )  # fmt: skip
        out = mhc.mhc_post_tilelang(layer_in, res, post2, comb2)
        mhc.hc_head_fused_kernel_tilelang(out, rnd(hc, hc * hid), rnd(1) + 1.0, rnd(hc), v["rms_norm_eps"], v["hc_eps"])
    else:
        raise KernelError(f"unknown call site {site!r}")
    torch.cuda.synchronize()
    return {"site": site, "tokens": t, "seconds": round(time.monotonic() - t0, 2)}


def flashinfer_fp8_gemm() -> dict:
    """In a worker: FlashInfer's sm90 FP8 block-scale GEMM module, built and loaded as vLLM's FP8 linears do."""
    t0 = time.monotonic()
    from flashinfer.gemm.gemm_base import get_fp8_blockscale_gemm_runner_sm90

    get_fp8_blockscale_gemm_runner_sm90()
    return {"site": "flashinfer_fp8_blockscale_gemm_sm90", "seconds": round(time.monotonic() - t0, 2)}


def run(args) -> dict:
    values = model_values(args.model, args.source)
    if values["hidden_size"] != dsv4_warm.HIDDEN or values["hc_mult"] != dsv4_warm.HC_MULT:
        raise KernelError(
            f"{args.model}/config.json: hidden_size {values['hidden_size']}, hc_mult {values['hc_mult']}: the "
            f"plan's call sites assume {dsv4_warm.HIDDEN} and {dsv4_warm.HC_MULT} (DeepSeek-V4-Flash)"
        )
    check_wrappers(dsv4_warm.engine_source(dsv4_warm.CALLS_FILE, args.source))
    plan = dsv4_warm.make_plan(argparse.Namespace(sms=args.sms, source=args.source, max_batched=args.max_batched))
    jobs = [j for j in jobs_of(plan) if j[1] <= args.max_batched]
    t0 = time.monotonic()
    done, failed = [], []
    # the first job alone: it builds the kernels every other job also reaches (post, head, the
    # T-independent parts), so no two workers write the same cache entry at once
    first = next((j for j in jobs if j[0] == "pre" and j[1] > dsv4_warm.SMALL_MAX), jobs[0])
    rest = [j for j in jobs if j != first]
    # spawn, not fork: the plan asked torch for the SM count, and CUDA does not survive a fork
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        fi = pool.submit(flashinfer_fp8_gemm) if not args.no_flashinfer else None
        try:
            done.append(pool.submit(build, *first, values).result())
        except Exception as exc:  # noqa: BLE001 - reported per job, one line each
            failed.append({"site": first[0], "tokens": first[1], "error": f"{type(exc).__name__}: {exc}"[:400]})
        futures = {pool.submit(build, s, t, values): (s, t) for s, t in rest}
        if fi is not None:
            futures[fi] = ("flashinfer_fp8_blockscale_gemm_sm90", 0)
        for fut in as_completed(futures):
            try:
                done.append(fut.result())
            except Exception as exc:  # noqa: BLE001
                s, t = futures[fut]
                failed.append({"site": s, "tokens": t, "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(f"dsv4_kernels: {len(done) + len(failed)}/{len(jobs) + (fi is not None)} "
                  f"({round(time.monotonic() - t0)} s)", file=sys.stderr, flush=True)  # fmt: skip
    return {"sms": plan["sms"], "values": values, "jobs": len(jobs), "workers": args.jobs,
            "seconds": round(time.monotonic() - t0, 1), "built": sorted(done, key=lambda d: d.get("tokens", 0)),
            "failed": failed}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dsv4_kernels.py")
    p.add_argument("--model", required=True, help="the DeepSeek-V4 checkpoint folder (its config.json)")
    p.add_argument("--jobs", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    p.add_argument("--sms", default="auto", help="the GPU's SM count, or auto (torch asks the GPU)")
    p.add_argument("--source", help="a vLLM wheel or a folder holding vllm/ (default: the installed vLLM)")
    p.add_argument("--max-batched", type=int, default=8192, help="the server's max_num_batched_tokens")
    p.add_argument("--no-flashinfer", action="store_true", help="leave FlashInfer's FP8 GEMM module out")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    try:
        if args.jobs < 1 or args.max_batched < 1:
            raise KernelError("--jobs and --max-batched: give whole numbers above 0")
        result = run(args)
    except (KernelError, dsv4_warm.WarmError) as exc:
        print(f"dsv4_kernels: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
