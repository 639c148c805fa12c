#!/usr/bin/env python3
"""Does each kernel of the image's ahead-of-time seed load from /cache with no compile?

Self-contained (standard library + the image's packages), copied into the container by the smoke
suite (test_cache.py). It seeds the cache root as every launcher does (servebuild_cache.py seed),
counts its files, asks each kernel listed in /opt/servebuild/seed/aot.json from the engine's own
builder, exactly as the server would on first use, and counts again: any new file is a compile.
No GPU is needed: tvm-ffi builders run under SGLang's arch override with the arch they were built
for, FlashInfer's with FLASHINFER_CUDA_ARCH_LIST. One JSON line per kernel; exit 1 if any compiled
or failed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import time

SEED = "/opt/servebuild/seed"
TOOL = "/opt/servebuild/tools/servebuild_cache.py"


LISTING = "/tmp/aot-check-census.json"


def census(*flags: str) -> dict:
    """The image's own census: files per kind, and with --since those new or rewritten (a rebuild in place)."""
    out = subprocess.run([sys.executable, TOOL, "census", *flags], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def args_of(values):
    out = []
    for v in values:
        if isinstance(v, str) and v.startswith("torch."):
            import torch

            v = getattr(torch, v[len("torch.") :])
        out.append(v)
    return out


def libcuda_stub() -> None:
    """The image's libcuda stub (SONAME libcuda.so.1, on LIBRARY_PATH) loaded first, as aot_build does."""
    import ctypes
    import tempfile

    stub = next(
        (
            os.path.join(d, "libcuda.so")
            for d in os.environ.get("LIBRARY_PATH", "").split(":")
            if d and os.path.isfile(os.path.join(d, "libcuda.so"))
        ),
        None,
    )
    if stub is None:
        raise ValueError("no libcuda stub on LIBRARY_PATH")
    links = tempfile.mkdtemp(prefix="libcuda-stub.")
    os.symlink(stub, os.path.join(links, "libcuda.so.1"))
    ctypes.CDLL(os.path.join(links, "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)


def load(kernel: dict, arch: str) -> None:
    module_name, _, func_name = kernel["builder"].partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    if kernel["jit"] == "tvm-ffi":
        from sglang.jit_kernel.utils.arch import override_jit_cuda_arch

        major, minor, suffix = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch).groups()
        with override_jit_cuda_arch(int(major), int(minor), suffix):
            inspect.unwrap(func)(*args_of(kernel["args"]))
    elif kernel["jit"] == "flashinfer":
        func(*args_of(kernel["args"])).build_and_load()
    elif kernel["jit"] == "humming":
        libcuda_stub()  # the launcher is linked with -lcuda; no driver is mounted here
        func(*args_of(kernel["args"]))  # humming's own path: ninja finds nothing to do, then it loads
    else:
        raise ValueError(f"no load check for {kernel['jit']}")


def main() -> int:
    with open(os.path.join(SEED, "aot.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    subprocess.run([sys.executable, TOOL, "seed"], check=True, capture_output=True)
    failed = 0
    for kernel in record["kernels"]:
        if kernel["jit"] == "triton":
            continue  # replayed specialisations load through a kernel launch: the H200 run checks them
        arch = kernel["archs"][0]
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", arch)
        census("--listing", LISTING)
        start = time.monotonic()
        try:
            load(kernel, arch)
            error = None
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {str(exc)[-300:]}"
        seconds = time.monotonic() - start
        new = sum(census("--since", LISTING)["changed"].values())
        ok = error is None and new == 0
        failed += not ok
        print(
            json.dumps(
                {
                    "kernel": kernel["builder"],
                    "args": kernel["args"],
                    "ok": ok,
                    "new_files": new,
                    "seconds": round(seconds, 3),
                    "error": error,
                }
            ),
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["HUMMING_DISABLE_PARALLEL_BUILD"] = "1"  # `import humming` starts no background build
    sys.exit(main())
