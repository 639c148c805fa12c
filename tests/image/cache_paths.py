#!/usr/bin/env python3
"""Where does each serve-time cache really land? Ask the installed packages' own code.

Self-contained (standard library + the image's packages), copied into the container by the smoke
suite (tests/image/test_cache.py), like jit_probes.py.

    python3 cache_paths.py NAME [NAME...]

Each NAME is a resolver below. Each resolver imports the module that decides the path and reads
what it decided, after every import an engine does at start (SGLang overwrites DG_JIT_CACHE_DIR
when its DeepGEMM wrapper is imported: a grep for the variable's name cannot see that). Prints one
JSON line per resolver: {"name", "ok", "paths": {what: path}, "variables": [...], "detail"}; a
resolver whose package is not installed reports ok false with the ImportError. Exit 1 if any failed.
"""

from __future__ import annotations

import importlib
import json
import os
import sys


def _triton(package):
    def resolve():
        mod = importlib.import_module(package)
        return {f"{package}.knobs.cache.dir": mod.knobs.cache.dir}

    return resolve


def _tvm_ffi():
    # tvm-ffi reads TVM_FFI_CACHE_DIR at each load_inline/load call (tvm_ffi/cpp/extension.py) and SGLang's
    # load_jit at each build (jit_kernel/utils/compile.py): read it after both are imported
    import tvm_ffi.cpp  # noqa: F401

    try:
        import sglang.jit_kernel.utils  # noqa: F401
    except ImportError:
        pass
    return {
        "TVM_FFI_CACHE_DIR at load_inline": os.path.expanduser(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi"))
    }


def _tilelang():
    import tilelang.env as env

    return {
        "tilelang.env.TILELANG_CACHE_DIR": str(env.TILELANG_CACHE_DIR),
        "tilelang.env.TILELANG_TMP_DIR": str(env.TILELANG_TMP_DIR),
    }


def _flashinfer():
    from flashinfer.jit import env

    return {
        "flashinfer.jit.env.FLASHINFER_CACHE_DIR": str(env.FLASHINFER_CACHE_DIR),
        "flashinfer.jit.env.FLASHINFER_JIT_DIR": str(env.FLASHINFER_JIT_DIR),
    }


def _inductor():
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return {"torch._inductor cache_dir()": cache_dir()}


def _humming():
    from humming.utils import jit

    return {
        "humming get_humming_cache_dir()": jit.get_humming_cache_dir(),
        "humming get_humming_tmp_dir()": jit.get_humming_tmp_dir(),
    }


def _huggingface():
    from huggingface_hub import constants

    return {
        "huggingface_hub.constants.HF_HOME": constants.HF_HOME,
        "huggingface_hub.constants.HF_HUB_CACHE": constants.HF_HUB_CACHE,
    }


def _sglang():
    from sglang.srt.environ import envs

    return {"sglang envs.SGLANG_CACHE_DIR": os.path.expanduser(envs.SGLANG_CACHE_DIR.get())}


def _sglang_deep_gemm():
    # SGLang 0.5.16 sets os.environ["DG_JIT_CACHE_DIR"] from SGLANG_DG_CACHE_DIR when this module is
    # imported; DeepGEMM's C++ JIT reads DG_JIT_CACHE_DIR from the environment when it compiles
    importlib.import_module("sglang.srt.layers.deep_gemm_wrapper.compile_utils")
    return {"DG_JIT_CACHE_DIR after sglang's deep_gemm_wrapper": os.environ.get("DG_JIT_CACHE_DIR", "~/.deep_gemm")}


def _vllm():
    import vllm.envs as envs

    return {"vllm.envs.VLLM_CACHE_ROOT": os.path.expanduser(envs.VLLM_CACHE_ROOT)}


# name -> (resolver, the variables that move it)
RESOLVERS = {
    "triton": (_triton("triton"), ["TRITON_CACHE_DIR"]),
    "tokenspeed_triton": (_triton("tokenspeed_triton"), ["TRITON_CACHE_DIR"]),
    "tvm-ffi": (_tvm_ffi, ["TVM_FFI_CACHE_DIR"]),
    "tilelang": (_tilelang, ["TILELANG_CACHE_DIR", "TILELANG_TMP_DIR"]),
    "flashinfer": (_flashinfer, ["FLASHINFER_WORKSPACE_BASE"]),
    "inductor": (_inductor, ["TORCHINDUCTOR_CACHE_DIR"]),
    "humming": (_humming, ["HUMMING_CACHE_DIR", "HUMMING_TMP_DIR"]),
    "huggingface": (_huggingface, ["HF_HOME"]),
    "sglang": (_sglang, ["SGLANG_CACHE_DIR"]),
    "sglang-deep_gemm": (_sglang_deep_gemm, ["SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR"]),
    "vllm": (_vllm, ["VLLM_CACHE_ROOT"]),
}


def resolve(name: str) -> dict:
    func, variables = RESOLVERS[name]
    out = {"name": name, "variables": variables, "set": {v: os.environ.get(v) for v in variables}}
    try:
        paths = {k: str(v) for k, v in func().items()}
    except Exception as exc:  # noqa: BLE001 - a package that cannot be imported is the finding
        return {**out, "ok": False, "paths": {}, "detail": f"{type(exc).__name__}: {str(exc)[:400]}"}
    return {**out, "ok": True, "paths": paths, "detail": ""}


def main(argv: list[str]) -> int:
    unknown = [n for n in argv if n not in RESOLVERS]
    if unknown or not argv:
        print(f"usage: cache_paths.py NAME...; known: {', '.join(RESOLVERS)}; unknown: {unknown}", file=sys.stderr)
        return 2
    failed = 0
    for name in argv:
        res = resolve(name)
        failed += not res["ok"]
        print(json.dumps(res), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
