#!/usr/bin/env python3
"""Benchmark (run by hand on a GPU host): do the images' ahead-of-time seeds serve a real H200?

    python scripts/warm_h200.py --payload DIR --out DIR

DIR holds what was exported from the images built on a CPU-only machine (scripts/warm_payload.sh):
  sgl-seed/   /opt/servebuild/seed of the SGLang image (+ its manifest.json)
  vllm-seed/  /opt/servebuild/seed of the vLLM image (+ its manifest.json)
  wheels/     the images' pinned sglang, apache-tvm-ffi (0.1.11; 0.1.10 under wheels/vllm/ for
              FlashInfer as the vLLM set pins it), flashinfer-python and their small pure deps,
              for this host's Python (the host brings torch and triton as the images pin them)

Measured, each in a fresh process and a fresh /cache (the path the images use, so build files match):
  tvm-ffi     each SGLang kernel of the seed: first use with the seed (servebuild_cache.py seed, as
              the launchers do) and without it: seconds, new cache files, and the result checked
              (add_constant against x + C, DSV4 top-k against torch.topk)
  record      a small workload (a tvm-ffi module the seed lacks, an SGLang Triton kernel, a seeded
              top-k) with SERVEBUILD_JIT_RECORD=1: the recording, and what it compiled; then the
              recording replayed GPU-free by tools/aot_build.py (as an image build does) into a fresh
              cache, and the workload again on it: new files (0 expected)
  flashinfer  FlashInfer's sampling module (vLLM's sampler) with and without the vLLM seed:
              seconds, new files, top-k=1 sampling against argmax
Writes OUT/h200-warm.json and OUT/jit-record.jsonl; prints one line per measurement.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "servebuild" / "tools"
CACHE = Path("/cache")

CHILD_COMMON = r"""
import json, os, sys, time, importlib, inspect
def files():
    return sum(len(f) for _, _, f in os.walk("/cache"))
def builder(spec):
    m, _, f = spec.partition(":")
    return getattr(importlib.import_module(m), f)
"""

CHILD_TVM = (
    CHILD_COMMON
    + r"""
import torch
aot = json.load(open(sys.argv[1]))
out = []
for k in aot["kernels"]:
    if k["jit"] != "tvm-ffi":
        continue
    before = files(); t = time.monotonic()
    builder(k["builder"])(*k["args"])
    seconds = time.monotonic() - t
    new = files() - before
    name = k["builder"].split(":")[1]
    ok, how = None, ""
    if name == "_jit_add_constant_module":
        from sglang.jit_kernel.add_constant import add_constant
        x = torch.arange(4096, device="cuda", dtype=torch.int32)
        ok = bool(torch.equal(add_constant(x, k["args"][0]), x + k["args"][0])); how = "dst == src + C"
    elif name in ("_jit_topk_v1_module", "_jit_topk_v2_module"):
        from sglang.jit_kernel.dsv4 import topk as T
        K = k["args"][0] if k["args"] else 512
        B, L = 4, 8192
        scores = torch.randn(B, L, device="cuda", dtype=torch.float32)
        seq = torch.full((B,), L, device="cuda", dtype=torch.int32)
        pages = torch.arange(L, device="cuda", dtype=torch.int32).repeat(B, 1)
        got = torch.empty(B, K, device="cuda", dtype=torch.int32)
        if name == "_jit_topk_v1_module":
            T.topk_transform_512(scores, seq, pages, got, 1)
        else:
            T.topk_transform_512_v2(scores, seq, pages, got, 1, T.plan_topk_v2(seq))
        ref = torch.topk(scores, K, dim=1).indices.to(torch.int32)
        ok = bool(torch.equal(got.sort(dim=1).values, ref.sort(dim=1).values)); how = f"top-{K} set == torch.topk"
    torch.cuda.synchronize()
    out.append({"kernel": k["builder"], "args": k["args"], "seconds": round(seconds, 3), "new_files": new,
                "correct": ok, "check": how})
print("RESULT " + json.dumps({"kernels": out}))
"""
)

CHILD_WORKLOAD = (
    CHILD_COMMON
    + r"""
sys.path.append(sys.argv[1])
if os.environ.get("SERVEBUILD_JIT_RECORD"):
    import jit_record; jit_record.install()  # what the image's servebuild-jit-record.pth does
import torch
before = {}
for d in ("tvm-ffi", "triton"):
    before[d] = sum(len(f) for _, _, f in os.walk(f"/cache/{d}"))
t = time.monotonic()
from sglang.jit_kernel.add_constant import add_constant
x = torch.arange(1 << 16, device="cuda", dtype=torch.int32)
ok1 = bool(torch.equal(add_constant(x, 7), x + 7))
from sglang.jit_kernel.triton.sigmoid_gate_mul import sigmoid_gate_mul
a = torch.randn(1 << 16, device="cuda", dtype=torch.bfloat16); g = torch.randn_like(a)
ok2 = bool(torch.allclose(sigmoid_gate_mul(a, g).float(), (a.float() * torch.sigmoid(g.float())), atol=2e-2, rtol=2e-2))
from sglang.jit_kernel.dsv4 import topk as T
B, L = 2, 4096
s = torch.randn(B, L, device="cuda"); seq = torch.full((B,), L, device="cuda", dtype=torch.int32)
pages = torch.arange(L, device="cuda", dtype=torch.int32).repeat(B, 1); got = torch.empty(B, 512, device="cuda", dtype=torch.int32)
T.topk_transform_512(s, seq, pages, got, 1)
ok3 = bool(torch.equal(got.sort(1).values, torch.topk(s, 512, 1).indices.to(torch.int32).sort(1).values))
torch.cuda.synchronize()
after = {d: sum(len(f) for _, _, f in os.walk(f"/cache/{d}")) for d in before}
print("RESULT " + json.dumps({"seconds": round(time.monotonic() - t, 2), "correct": [ok1, ok2, ok3],
                             "new_files": {d: after[d] - before[d] for d in before}}))
"""
)

CHILD_FLASHINFER = (
    CHILD_COMMON
    + r"""
import torch
before = files(); t = time.monotonic()
import flashinfer.sampling as S
module = S.get_sampling_module()
seconds = time.monotonic() - t
new = files() - before
probs = torch.softmax(torch.randn(64, 32000, device="cuda"), dim=-1)
samples = S.top_k_sampling_from_probs(probs, top_k=1)
ok = bool(torch.equal(samples.long(), probs.argmax(dim=-1)))
base = "/cache/flashinfer/.cache/flashinfer"
arch_dirs = {v: sorted(os.listdir(os.path.join(base, v))) for v in os.listdir(base)} if os.path.isdir(base) else {}
print("RESULT " + json.dumps({"seconds": round(seconds, 2), "new_files": new, "correct": ok, "arch_dirs": arch_dirs}))
"""
)


def unpack(wheels: list[Path], site: Path, mtime: int | None = None) -> None:
    """The wheels as an installed site; `mtime` for every file (pip's install time in an image is older
    than anything its aot stage built, and ninja compares them)."""
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    if mtime is not None:
        for d, _, files in os.walk(site):
            for name in files:
                os.utime(os.path.join(d, name), (mtime, mtime))


# This host lacks most of SGLang's import closure (transformers, IPython, pydantic, its frontend and server),
# none of which the JIT kernels use. So SGLang's top-level __init__ and sglang.utils (frontend) shrink to
# what the jit_kernel modules read, and sglang.srt.utils(.common) to the shipped definitions the kernels
# import (their source, taken from the wheel's own common.py). The kernels' builders, load_jit, the arch
# detection, the cache keys and tvm-ffi run as shipped.
COMMON_NAMES = (
    "get_cuda_version",
    "is_hip",
    "direct_register_custom_op",
    "sglang_lib",
    "get_current_device_stream_fast",
    "get_int_env_var",
    "torch_release",
    "get_device_sm",
)
SGLANG_SHIMS = {
    "sglang/__init__.py": "",
    # its re-exports import the DeepGEMM wrapper -> the model configs -> transformers; topk.py
    # (the modules the seed holds) imports none of that
    "sglang/jit_kernel/dsv4/__init__.py": "",
    "sglang/utils.py": "def is_in_ci():\n    return False\n",
    "sglang/srt/utils/__init__.py": "from sglang.srt.utils.common import *  # noqa\n"
    "from sglang.srt.utils.common import __getattr__  # noqa\n",
}
COMMON_HEAD = (
    "import functools\nimport os\nimport torch\nfrom packaging import version as pkg_version\nfrom typing import Callable, List, Optional\nfrom torch.library import Library\n\n\n"
    "def __getattr__(name):  # the other platform probes (is_xpu, is_npu, ...): a CUDA host\n"
    "    if name.startswith('is_'):\n        return lambda *a, **k: False\n"
    "    raise AttributeError(name)\n\n\n"
    "for _name in ('is_npu', 'is_xpu', 'is_cpu', 'is_musa', 'is_hpu', 'is_mps', 'is_host_cpu_arm64'):\n"
    "    globals()[_name] = lambda *a, **k: False\n\n\n"
)
STUB_FINDER = ""


def shim_sglang(site: Path) -> None:
    common = site / "sglang/srt/utils/common.py"
    source = common.read_text()
    kept = []
    for node in ast.parse(source).body:
        names = (
            [node.name]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        )
        if any(n in COMMON_NAMES for n in names):
            kept.append(ast.get_source_segment(source, node))
    common.write_text(COMMON_HEAD + "\n\n\n".join(kept) + "\n")
    for rel, text in SGLANG_SHIMS.items():
        (site / rel).write_text(text)


def image_paths(manifest: Path) -> tuple[Path, Path]:
    """The image's site-packages and CUDA_HOME: FlashInfer writes both into its build.ninja, so the
    same module is up to date only where they are the same paths."""
    python = json.loads(manifest.read_text())["python"]
    site = Path(f"/opt/venv/lib/python{python}/site-packages")
    return site, site / "nvidia" / "cu13"


def fresh_cache(seed: Path | None, manifest: Path | None = None) -> None:
    shutil.rmtree(CACHE, ignore_errors=True)
    for d in ("tvm-ffi", "triton", "flashinfer", "servebuild"):
        (CACHE / d).mkdir(parents=True)
    if seed is not None:
        env = {**os.environ, "SERVEBUILD_MANIFEST": str(manifest or seed / "manifest.json")}
        subprocess.run(
            [sys.executable, str(TOOLS / "servebuild_cache.py"), "seed", "--cache", str(CACHE), "--seed", str(seed)],
            check=True,
            env=env,
        )


def census(*flags: str) -> dict:
    """The images' own cache census (servebuild_cache.py): --since counts files new or rewritten."""
    out = subprocess.run(
        [sys.executable, str(TOOLS / "servebuild_cache.py"), "census", "--cache", str(CACHE), *flags],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def child(code: str, env: dict, *args: str, timeout: int = 900) -> dict:
    """One fresh process (a server start, as far as the JIT caches can tell), with the census around it."""
    census("--listing", "/tmp/census-before.json")
    proc = subprocess.run(
        [sys.executable, "-c", STUB_FINDER + code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )
    changed = census("--since", "/tmp/census-before.json")["changed"]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-3:], "written": changed}
    return {**json.loads(lines[-1][len("RESULT ") :]), "written": changed}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--payload", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--only",
        default="tvm-ffi,record,flashinfer",
        help="comma-separated: tvm-ffi, record, image-seed, flashinfer (flashinfer-seeded: without the empty run)",
    )
    args = parser.parse_args()
    payload, out = Path(args.payload).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    wheels = payload / "wheels"
    sgl_site = Path("/tmp/site-sgl")
    deps = sorted((wheels / "deps").glob("*.whl"))
    unpack(
        [
            *wheels.glob("sglang-*.whl"),
            *wheels.glob("apache_tvm_ffi-0.1.11-*.whl"),
            *wheels.glob("flashinfer_python-*.whl"),
            *deps,
        ],
        sgl_site,
    )
    shim_sglang(sgl_site)
    vseed = payload / "vllm-seed"
    fi_site, fi_cuda = image_paths(vseed / "manifest.json")  # this host plays the image's layout
    unpack(
        [*wheels.glob("flashinfer_python-*.whl"), *(wheels / "vllm").glob("apache_tvm_ffi-*.whl"), *deps],
        fi_site,
        mtime=946684800,
    )
    fi_cuda.parent.mkdir(parents=True, exist_ok=True)
    if not fi_cuda.exists():
        fi_cuda.symlink_to("/usr/local/cuda")  # the image's pip CUDA 13.0 toolkit; here the host's 13.0.88
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    report = {"gpu": gpu, "python": sys.version.split()[0]}
    sgl_env = {
        "PYTHONPATH": str(sgl_site),
        "TVM_FFI_CACHE_DIR": "/cache/tvm-ffi",
        "TRITON_CACHE_DIR": "/cache/triton",
        "FLASHINFER_WORKSPACE_BASE": "/cache/flashinfer",
    }
    seed = payload / "sgl-seed"
    if "tvm-ffi" in only:
        for mode in ("seeded", "empty"):
            fresh_cache(seed if mode == "seeded" else None)
            report[f"tvm-ffi {mode}"] = child(CHILD_TVM, sgl_env, str(seed / "aot.json"))
            print(f"tvm-ffi {mode}: {json.dumps(report[f'tvm-ffi {mode}'])}", flush=True)
    if "record" in only:
        fresh_cache(seed)
        record_file = CACHE / "servebuild" / "jit-record.jsonl"
        rec_env = {
            **sgl_env,
            "SERVEBUILD_JIT_RECORD": "1",
            "SERVEBUILD_JIT_RECORD_FILE": str(record_file),
            "SERVEBUILD_MANIFEST": str(seed / "manifest.json"),
        }
        report["record run"] = child(CHILD_WORKLOAD, rec_env, str(TOOLS))
        lines = record_file.read_text().splitlines() if record_file.exists() else []
        shutil.copyfile(record_file, out / "jit-record.jsonl") if lines else None
        report["recording lines"] = len(lines)
        print(f"record run: {json.dumps(report['record run'])}; {len(lines)} lines", flush=True)
        report["same cache, second process"] = child(CHILD_WORKLOAD, sgl_env, str(TOOLS))
        print(f"second process: {json.dumps(report['same cache, second process'])}", flush=True)
        # replay GPU-free, as the image build's aot stage does, then the workload on that cache alone
        kernels = []
        for n, line in enumerate(lines, 1):
            e = json.loads(line)
            if e.get("replayable") and e["jit"] in ("tvm-ffi", "triton"):
                k = {
                    "where": f"jit-record.jsonl:{n}",
                    "jit": e["jit"],
                    "builder": e.get("builder") or e.get("kernel"),
                    "args": e.get("args") or [],
                }
                if e["jit"] == "triton":
                    k.update(package=e["package"], specialization=e["specialization"], target=e["target"])
                kernels.append(k)
        spec = out / "replay-spec.json"
        spec.write_text(
            json.dumps({"recipe": "h200-replay", "arch_list": "9.0a", "max_bytes": 1 << 30, "kernels": kernels})
        )
        fresh_cache(None)
        # Triton's launcher links -lcuda (in an image: the libcuda stub on LIBRARY_PATH); here the driver's
        found = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
        libcuda = next((ln.split()[-1] for ln in found.splitlines() if "libcuda.so.1" in ln), None)
        libdir = Path("/tmp/libcuda-link")
        libdir.mkdir(exist_ok=True)
        if libcuda and not (libdir / "libcuda.so").exists():
            (libdir / "libcuda.so").symlink_to(libcuda)
        replay_seed = Path("/tmp/replay-seed")
        shutil.rmtree(replay_seed, ignore_errors=True)
        t = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                str(TOOLS / "aot_build.py"),
                "--spec",
                str(spec),
                "--cache",
                "/cache",
                "--seed",
                str(replay_seed),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **sgl_env, "CUDA_VISIBLE_DEVICES": "", "LIBRARY_PATH": str(libdir)},
        )
        report["replay"] = {
            "rc": proc.returncode,
            "seconds": round(time.monotonic() - t, 1),
            "lines": [ln for ln in proc.stdout.splitlines() if ln.startswith(("aot:", "servebuild:"))],
        }
        print(f"replay (no GPU): {json.dumps(report['replay'])}", flush=True)
        fresh_cache(seed)
        if replay_seed.exists():
            subprocess.run(
                [
                    sys.executable,
                    str(TOOLS / "servebuild_cache.py"),
                    "seed",
                    "--cache",
                    "/cache",
                    "--seed",
                    str(replay_seed),
                ],
                check=True,
                env={**os.environ, "SERVEBUILD_MANIFEST": str(seed / "manifest.json")},
            )
        report["after replay"] = child(CHILD_WORKLOAD, sgl_env, str(TOOLS))
        print(f"workload on seed + replayed cache: {json.dumps(report['after replay'])}", flush=True)
    if "image-seed" in only:
        # the image's own seed, with what its build replayed from the committed H200 recording
        fresh_cache(seed)
        report["image seed"] = child(CHILD_WORKLOAD, sgl_env, str(TOOLS))
        print(f"workload on the image's seed: {json.dumps(report['image seed'])}", flush=True)
    if "flashinfer" in only or "flashinfer-seeded" in only:
        fi_env = {
            "PYTHONPATH": str(fi_site),
            "FLASHINFER_WORKSPACE_BASE": "/cache/flashinfer",
            "CUDA_HOME": str(fi_cuda),
            "CXX": "c++",  # the image's: FlashInfer writes $CXX into build.ninja
            "PATH": f"{fi_cuda}/bin:{os.environ.get('PATH', '')}",
        }
        for mode in ("seeded", "empty") if "flashinfer" in only else ("seeded",):
            fresh_cache(vseed if mode == "seeded" else None)
            report[f"flashinfer {mode}"] = child(CHILD_FLASHINFER, fi_env)
            if mode == "seeded":  # the build file FlashInfer wrote, against the one the image built
                ninja = next((vseed / "cache").rglob("sampling/build.ninja"), None)
                here = CACHE / ninja.relative_to(vseed / "cache") if ninja else None
                if ninja and here and here.exists():
                    a, b = ninja.read_text().splitlines(), here.read_text().splitlines()
                    diff = [f"{x!r} != {y!r}" for x, y in zip(a, b) if x != y]
                    report["flashinfer seeded"]["build.ninja"] = "identical" if a == b else diff[:4]
            print(f"flashinfer {mode}: {json.dumps(report[f'flashinfer {mode}'])}", flush=True)
    (out / "h200-warm.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
