#!/usr/bin/env python3
"""JIT probes: can this image (or host) compile the kernels its engines compile while serving?

Self-contained on purpose (standard library + whatever the host under test has installed), so the
smoke suite can copy it into a container and run it there; see tests/image/test_jit.py.

    python3 jit_probes.py PROBE [PROBE...] [--launch] [--arch 9.0a] [--nvcc-release 13.0] [--keep]
                          [--image-caches]

Probes: cext, nvcc, triton, tvm-ffi, tilelang, flashinfer. Each prints one JSON line
{"probe", "ok", "detail", ...}; the exit status is 1 if any probe failed. Compiles target the
arch given by --arch (default 9.0a) and need no GPU; --launch also runs each compiled kernel on
GPU 0 and checks its result. Every run gets fresh cache directories (a warm cache cannot fake a
compile), unless --image-caches: then the compiles write where the image's own environment sends
them (the smoke suite's check that nothing lands outside /cache). The variable names below were
checked against the installed packages' sources:

  Triton 3.6            TRITON_CACHE_DIR                (triton/knobs.py)
  apache-tvm-ffi 0.1.11 TVM_FFI_CACHE_DIR               (tvm_ffi/cpp/extension.py)
                        arch: TVM_FFI_CUDA_ARCH_LIST    ("9.0a" -> -gencode=arch=compute_90a,code=sm_90a;
                        without it tvm-ffi asks nvidia-smi, i.e. needs a GPU; TORCH_CUDA_ARCH_LIST
                        is not read)
  TileLang 0.1.11       TILELANG_CACHE_DIR, TILELANG_TMP_DIR (tilelang/env.py)
                        arch: the target's -arch (sm_90 becomes sm_90a: contrib/nvcc.get_target_arch)
  FlashInfer 0.6.14     FLASHINFER_WORKSPACE_BASE (cache = BASE/.cache/flashinfer; read at import)
                        arch: FLASHINFER_CUDA_ARCH_LIST (read at import; without it the arch comes
                        from torch.cuda devices, so no GPU = "FlashInfer requires GPUs with sm75")
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback

PROBES = ("cext", "nvcc", "triton", "tvm-ffi", "tilelang", "flashinfer")
EM_CUDA = 190


# ------------------------------------------------------------------ helpers


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _tail(text: str, n: int = 1200) -> str:
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def _arch_parts(arch: str) -> tuple[int, int, str]:
    """'9.0a' -> (9, 0, 'a')."""
    m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch.strip())
    if not m:
        raise ValueError(f"bad --arch {arch!r} (want e.g. 9.0a)")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def sm_name(arch: str) -> str:
    major, minor, suffix = _arch_parts(arch)
    return f"sm_{major}{minor}{suffix}"


def cuda_elf_archs(data: bytes) -> list[str]:
    """SASS archs of the CUDA ELF images in `data` (a cubin, or a .so/.o whose fatbin is not
    compressed). The SM number is in e_flags; the 'a' suffix is an e_flags bit in ABI 7 cubins,
    but nvcc 13.0 writes the same e_flags for sm_90 and sm_90a (ABI 8) and records the suffix only
    in the .note.nv.tkinfo note (ptxas' command line, e.g. '-arch sm_90a'), where cuobjdump 13
    reads it too."""
    found = []
    for m in re.finditer(rb"\x7fELF\x02\x01\x01", data):
        base = m.start()
        try:
            (machine,) = struct.unpack_from("<H", data, base + 18)
            if machine != EM_CUDA:
                continue
            abiver = data[base + 8]
            (flags,) = struct.unpack_from("<I", data, base + 48)
            if abiver >= 8:  # CUDA 13 ptxas: SM in bits 8-15, 0x8 = arch-specific ('a')
                sm, accel = (flags >> 8) & 0xFF, bool(flags & 0x8)
            else:  # ABI 7 (Triton's bundled ptxas): SM in bits 0-7, 0x800 = EF_CUDA_ACCELERATORS
                sm, accel = flags & 0xFF, bool(flags & 0x800)
            (shoff,) = struct.unpack_from("<Q", data, base + 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, base + 0x3A)
            suffix = "a" if accel else ""
            secs = [struct.unpack_from("<IIQQQQIIQQ", data, base + shoff + i * shentsize) for i in range(shnum)]
            stroff = base + secs[shstrndx][4]
            for sec in secs:
                name = data[stroff + sec[0] : data.index(b"\0", stroff + sec[0])]
                if name == b".note.nv.tkinfo":
                    note = data[base + sec[4] : base + sec[4] + sec[5]]
                    t = re.search(rb"(?:-arch|--gpu-name)[ =]sm_(\d+)([af]?)\b", note)
                    if t and int(t.group(1)) == sm:
                        suffix = t.group(2).decode()
            found.append(f"sm_{sm}{suffix}")
        except (struct.error, IndexError, ValueError):
            continue
    return found


def find_cuobjdump() -> str | None:
    cands = []
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "cuobjdump"))
    cands += [shutil.which("cuobjdump") or "", "/usr/local/cuda/bin/cuobjdump"]
    spec = importlib.util.find_spec("triton")  # Triton wheels bundle one (12.8 in triton 3.6)
    if spec and spec.origin:
        cands.append(os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin", "cuobjdump"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def archs_of_file(path: str) -> dict:
    """{'archs': [...], 'how': ...} for a cubin / shared object."""
    with open(path, "rb") as fh:
        data = fh.read()
    archs = cuda_elf_archs(data)
    if archs:
        return {"archs": sorted(set(archs)), "how": "ELF e_flags + .note.nv.tkinfo"}
    tool = find_cuobjdump()
    if tool:  # compressed fatbin (FlashInfer: -Xfatbin=-compress-all): let cuobjdump unpack the cubins
        where = tempfile.mkdtemp(prefix="cuobjdump.")
        try:
            _run([tool, "-xelf", "all", os.path.abspath(path)], cwd=where)
            for f in sorted(glob.glob(os.path.join(where, "*.cubin"))):
                with open(f, "rb") as fh:
                    archs += cuda_elf_archs(fh.read())
        finally:
            shutil.rmtree(where, ignore_errors=True)
        if archs:
            return {"archs": sorted(set(archs)), "how": f"{tool} -xelf all + ELF e_flags/.note.nv.tkinfo"}
    return {"archs": [], "how": "no CUDA ELF found (compressed fatbin and no cuobjdump?)"}


def nvcc_version(path: str) -> str | None:
    try:
        out = _run([path, "--version"], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", out.stdout)
    return m.group(2) if m else None


def primary_nvcc() -> tuple[str | None, str]:
    """The nvcc the JIT paths use: CUDA_HOME/bin/nvcc, else `which nvcc`, else /usr/local/cuda
    (tvm-ffi's and TileLang's order)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return os.path.join(home, "bin", "nvcc"), "CUDA_HOME" if os.environ.get("CUDA_HOME") else "CUDA_PATH"
    which = shutil.which("nvcc")
    if which:
        return which, "PATH"
    return "/usr/local/cuda/bin/nvcc", "/usr/local/cuda"


def link_hint(msg: str, who: str) -> str:
    """Say plainly what a failed JIT link needs (the usual trap of a pip CUDA toolkit)."""
    home = primary_nvcc()[0].rsplit("/bin/", 1)[0]
    hints = []
    if "cannot find -lcudart" in msg:
        hints.append(
            f"{who} links with -L{home}/lib64 -lcudart and there is no {home}/lib64/libcudart.so "
            f"(the pip cuda-toolkit ships lib/libcudart.so.13 only): give CUDA_HOME a lib64 -> lib link "
            f"and lib/libcudart.so -> libcudart.so.13"
        )
    if "cannot find -lcuda:" in msg or "cannot find -lcuda " in msg:
        hints.append(
            f"{who} links with -L{home}/lib64/stubs -lcuda and there is no libcuda.so there (the pip "
            f"cuda-toolkit has no driver stub; the driver's libcuda.so is only mounted with a GPU): "
            f"put the CUDA driver stub libcuda.so (SONAME libcuda.so.1) in {home}/lib64/stubs"
        )
    return "HINT: " + "; ".join(hints) + ". " if hints else ""


def arch_note() -> str:
    """The compiles take the arch from --arch / the *_ARCH_LIST variables, never from a device."""
    return "arch given explicitly, " + ("no GPU visible" if need_gpu() else "the GPU was not consulted")


def need_gpu() -> str | None:
    """None if a CUDA device is usable through torch, else why not."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return f"torch not importable: {exc}"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "no CUDA device visible"
    return None


def gpu_info() -> dict:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0))}


def launch_on_gpu(ctx, out: dict, run) -> dict:
    """After a good compile, with --launch: `run()` on GPU 0 returns (ok, extra fields, what it showed)."""
    if not ctx["launch"]:
        return out
    why = need_gpu()
    if why:
        return {**out, "ok": False, "launched": False, "detail": f"--launch: {why}"}
    ok, extra, shown = run()
    out.update(gpu_info(), **extra, launched=True, ok=ok, detail=f"{out['detail']}; {shown}")
    return out


# ------------------------------------------------------------------ probes

CEXT_SRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "jit_probe_cext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_jit_probe_cext(void) { return PyModule_Create(&mod); }
"""


def probe_cext(ctx) -> dict:
    """What Triton does at its first launch: build a C stub against Python.h and import it."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":  # Debian's python3 (what Triton's build.py works around too)
        scheme = "posix_prefix"
    include = sysconfig.get_paths(scheme=scheme)["include"]
    out = {"cc": cc, "include": include, "python_h": os.path.isfile(os.path.join(include, "Python.h"))}
    if not cc:
        return {
            **out,
            "ok": False,
            "detail": "no C compiler (CC, gcc, clang, cc): Triton fails with 'Failed to find C compiler'",
        }
    if not out["python_h"]:
        return {**out, "ok": False, "detail": f"no Python.h in {include} (install python3-dev)"}
    ver = _run([cc, "--version"])
    out["cc_version"] = (ver.stdout.splitlines() or [""])[0]
    d = os.path.join(ctx["tmp"], "cext")
    os.makedirs(d)
    src = os.path.join(d, "probe.c")
    with open(src, "w") as fh:
        fh.write(CEXT_SRC)
    so = os.path.join(d, "jit_probe_cext" + sysconfig.get_config_var("EXT_SUFFIX"))
    build = _run([cc, src, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", so])
    if build.returncode != 0:
        return {**out, "ok": False, "detail": f"{cc} failed: {_tail(build.stderr)}"}
    spec = importlib.util.spec_from_file_location("jit_probe_cext", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod.add(40, 2)
    ok = got == 42
    return {
        **out,
        "ok": ok,
        "compiled": True,
        "launched": ok,
        "detail": f"built {os.path.basename(so)} with {os.path.basename(cc)}; add(40, 2) = {got}",
    }


def probe_nvcc(ctx) -> dict:
    want = ctx["nvcc_release"]
    path, source = primary_nvcc()
    found = {}
    cands = [path]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        cands.append(os.path.join(d or ".", "nvcc"))
    roots = set(sys.path)
    try:
        import site

        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except Exception:  # noqa: BLE001
        pass
    for r in sorted(x for x in roots if x and os.path.isdir(x)):
        cands += glob.glob(os.path.join(r, "nvidia", "*", "bin", "nvcc"))
    cands += glob.glob("/usr/local/cuda*/bin/nvcc")
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            found.setdefault(c, nvcc_version(c))
    primary = found.get(path)
    others = {p: v for p, v in found.items() if v != primary}
    out = {"nvcc": path, "from": source, "version": primary, "found": found, "CUDA_HOME": os.environ.get("CUDA_HOME")}
    if primary is None:
        return {**out, "ok": False, "detail": f"no working nvcc at {path} (from {source})"}
    if not primary.startswith(want + "."):
        return {
            **out,
            "ok": False,
            "detail": f"{path} is {primary}, want release {want} (nvcc 13.1-13.3 miscompile DSV4 top-k on sm_90a)",
        }
    if others:
        return {
            **out,
            "ok": False,
            "detail": f"{path} is {primary} but other nvcc differ: " + ", ".join(f"{p}={v}" for p, v in others.items()),
        }
    return {**out, "ok": True, "detail": f"{path} ({source}) is {primary}; {len(found)} nvcc found, all {primary}"}


TRITON_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
"""


def _import_source(ctx, name: str, source: str):
    """Import `source` from a real file (triton.jit and TileLang read their kernels' source)."""
    path = os.path.join(ctx["tmp"], f"{name}.py")
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TRITON_PACKAGES = ("triton", "tokenspeed_triton")  # Triton and the forks engines vendor (SGLang 0.5.16)


def triton_ptxas(arch: str) -> dict:
    """{package: (ptxas path, version)} for each installed Triton: the ptxas it would run for `arch`
    (TRITON_PTXAS_PATH, else the one bundled in its wheel)."""
    major, minor, _ = _arch_parts(arch)
    used = {}
    for name in TRITON_PACKAGES:
        if importlib.util.find_spec(name) is None:
            continue
        compiler = importlib.import_module(f"{name}.backends.nvidia.compiler")
        tool = compiler.get_ptxas(major * 10 + minor)
        path = getattr(tool, "path", tool)
        used[name] = (path, nvcc_version(path))
    return used


def probe_triton(ctx) -> dict:
    import triton

    want_release = ctx["nvcc_release"]
    ptxas = triton_ptxas(ctx["arch"])
    stray = {n: v for n, v in ptxas.items() if not (v[1] or "").startswith(want_release + ".")}
    if stray:
        return {
            "ok": False,
            "ptxas": ptxas,
            "detail": "Triton would assemble with "
            + ", ".join(f"{n}: {p} ({v})" for n, (p, v) in stray.items())
            + f"; want release {want_release} "
            f"(set TRITON_PTXAS_PATH and TRITON_PTXAS_BLACKWELL_PATH to the toolkit's ptxas)",
        }
    from triton.backends.compiler import GPUTarget

    major, minor, _ = _arch_parts(ctx["arch"])
    mod = _import_source(ctx, "jit_probe_triton_kernel", TRITON_KERNEL)
    src = triton.compiler.ASTSource(
        fn=mod.add_one,
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": 128},
    )
    t0 = time.time()
    kernel = triton.compile(src, target=GPUTarget("cuda", major * 10 + minor, 32))
    secs = round(time.time() - t0, 1)
    ptx_target = re.search(r"^\.target\s+(\S+)", kernel.asm["ptx"], re.M)
    cubin = os.path.join(ctx["tmp"], "triton_add_one.cubin")
    with open(cubin, "wb") as fh:
        fh.write(kernel.asm["cubin"])
    archs = archs_of_file(cubin)
    want = sm_name(ctx["arch"])
    out = {
        "triton": triton.__version__,
        "ptxas": ptxas,
        "compile_s": secs,
        "ptx_target": ptx_target and ptx_target.group(1),
        "cubin_archs": archs["archs"],
        "arch_check": archs["how"],
        "cache_dir": os.environ["TRITON_CACHE_DIR"],
    }
    if archs["archs"] != [want] or out["ptx_target"] != want:
        return {
            **out,
            "ok": False,
            "compiled": True,
            "detail": f"cubin is {archs['archs']}, PTX .target {out['ptx_target']}; want {want}",
        }
    out.update(
        ok=True,
        compiled=True,
        detail=f"compiled add_one for {want} ({arch_note()}) in {secs}s with ptxas "
        + ", ".join(f"{v} ({n})" for n, (_, v) in ptxas.items()),
    )

    def run():
        import torch

        x = torch.arange(1000, device="cuda", dtype=torch.float32)
        y = torch.empty_like(x)
        compiled = mod.add_one[(triton.cdiv(1000, 128),)](x, y, 1000, BLOCK=128)
        torch.cuda.synchronize()
        good = bool(torch.equal(y, x + 1))
        target = re.search(r"^\.target\s+(\S+)", compiled.asm["ptx"], re.M)
        target = target and target.group(1)
        stubs = [os.path.basename(p) for p in glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "*", "*.so"))]
        return (
            good and bool(stubs),
            {"launch_ptx_target": target, "launcher_stubs": stubs},
            f"launched on GPU 0 ({target}), y == x + 1: {good}; C launcher stubs built into the fresh cache: {stubs}",
        )

    return launch_on_gpu(ctx, out, run)


TVM_FFI_SRC = r"""
#include <cuda_runtime.h>

__global__ void AddOneKernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  int64_t n = x.size(0);
  cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  AddOneKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      static_cast<const float*>(x.data_ptr()), static_cast<float*>(y.data_ptr()), n);
}
"""


def probe_tvm_ffi(ctx) -> dict:
    """SGLang 0.5.16's DSV4 kernels: tvm_ffi.cpp.load_inline (nvcc + c++ + ninja)."""
    import importlib.metadata
    import tvm_ffi.cpp

    want = sm_name(ctx["arch"])
    out = {
        "tvm_ffi": importlib.metadata.version("apache-tvm-ffi"),
        "TVM_FFI_CUDA_ARCH_LIST": os.environ.get("TVM_FFI_CUDA_ARCH_LIST"),
        "cache_dir": os.environ["TVM_FFI_CACHE_DIR"],
        "nvcc": primary_nvcc()[0],
    }
    t0 = time.time()
    try:
        mod = tvm_ffi.cpp.load_inline("jit_probe_add_one", cuda_sources=TVM_FFI_SRC, functions=["add_one"])
    except Exception as exc:  # noqa: BLE001
        msg = str(exc)
        return {
            **out,
            "ok": False,
            "compiled": False,
            "detail": f"{link_hint(msg, 'tvm-ffi')}load_inline failed: {_tail(msg, 2000)}",
        }
    out["compile_s"] = round(time.time() - t0, 1)
    libs = glob.glob(os.path.join(os.environ["TVM_FFI_CACHE_DIR"], "jit_probe_add_one*", "*.so"))
    if not libs:
        return {**out, "ok": False, "compiled": False, "detail": "load_inline returned but no .so in the cache dir"}
    archs = archs_of_file(libs[0])
    out.update(library=libs[0], sass_archs=archs["archs"], arch_check=archs["how"], compiled=True)
    if archs["archs"] != [want]:
        return {**out, "ok": False, "detail": f"{os.path.basename(libs[0])} has SASS {archs['archs']}, want {want}"}
    out.update(
        ok=True, detail=f"load_inline built and loaded add_one for {want} ({arch_note()}) in {out['compile_s']}s"
    )

    def run():
        import torch

        x = torch.arange(4096, device="cuda", dtype=torch.float32)
        y = torch.zeros_like(x)
        mod.add_one(x, y)
        torch.cuda.synchronize()
        good = bool(torch.equal(y, x + 1))
        return good, {}, f"launched on GPU 0 with torch tensors, y == x + 1: {good}"

    return launch_on_gpu(ctx, out, run)


TILELANG_KERNEL = """
import tilelang
import tilelang.language as T


def add_one(N, block):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] + 1.0
    return main
"""


def probe_tilelang(ctx) -> dict:
    """SGLang's DSV4 mHC prewarm path: a TileLang JIT kernel, lowered and compiled with nvcc."""
    import importlib.metadata
    import tilelang

    want = sm_name(ctx["arch"])
    # TileLang reads the arch from the target (contrib/nvcc.get_target_compute_version strips any
    # 'a'/'f' and get_target_arch appends 'a' again for sm_90+), else from GPU 0
    target = {"kind": "cuda", "arch": want}
    try:  # TileLang 0.1.9 (vLLM's set) takes a Target object, 0.1.11 (SGLang's) a dict or a Target
        from tilelang import tvm as tl_tvm

        target = tl_tvm.target.Target(target)
    except Exception:  # noqa: BLE001
        pass
    mod = _import_source(ctx, "jit_probe_tilelang_kernel", TILELANG_KERNEL)
    out = {
        "tilelang": importlib.metadata.version("tilelang"),
        "target": target,
        "cache_dir": os.environ["TILELANG_CACHE_DIR"],
    }
    t0 = time.time()
    try:
        kernel = tilelang.compile(mod.add_one(4096, 128), out_idx=[1], target=target)
    except Exception as exc:  # noqa: BLE001
        return {**out, "ok": False, "compiled": False, "detail": f"tilelang.compile failed: {_tail(str(exc), 2000)}"}
    out["compile_s"] = round(time.time() - t0, 1)
    out["execution_backend"] = getattr(kernel, "execution_backend", None)
    # the device code: TileLang keeps the nvcc output (cubin) in the runtime module it built
    cubins = []
    for root in (os.environ["TILELANG_CACHE_DIR"], ctx["tmp"]):
        cubins += [
            p
            for p in glob.glob(os.path.join(root, "**", "*"), recursive=True)
            if os.path.isfile(p) and (p.endswith((".cubin", ".so")))
        ]
    archs = set()
    for p in cubins:
        archs.update(archs_of_file(p)["archs"])
    if not archs:
        blob = _tilelang_device_blob(kernel)
        if blob:
            archs.update(cuda_elf_archs(blob))
    out.update(sass_archs=sorted(archs), compiled=True)
    if sorted(archs) != [want]:
        return {**out, "ok": False, "detail": f"TileLang kernel SASS is {sorted(archs)}, want {want}"}
    out.update(ok=True, detail=f"tilelang.compile built add_one for {want} ({arch_note()}) in {out['compile_s']}s")

    def run():
        import torch

        a = torch.arange(4096, device="cuda", dtype=torch.float32)
        b = kernel(a)
        torch.cuda.synchronize()
        good = bool(torch.equal(b, a + 1))
        return good, {}, f"launched on GPU 0, B == A + 1: {good}"

    return launch_on_gpu(ctx, out, run)


def _tilelang_device_blob(kernel) -> bytes | None:
    """The compiled device module's bytes, if the kernel object exposes them."""
    for attr in ("artifact", "rt_mod"):
        obj = getattr(kernel, attr, None)
        if obj is None:
            continue
        for sub in (getattr(obj, "rt_mod", None), getattr(obj, "device_mod", None), obj):
            try:
                for m in getattr(sub, "imports", []) or []:
                    data = m.inspect_source("cubin") if hasattr(m, "inspect_source") else None
                    if data:
                        return data.encode("latin-1") if isinstance(data, str) else bytes(data)
            except Exception:  # noqa: BLE001
                continue
    return None


def probe_flashinfer(ctx) -> dict:
    """FlashInfer JIT (vLLM's sampler, SGLang kernels): the silu_and_mul activation module."""
    import importlib.metadata

    want = sm_name(ctx["arch"])
    out = {
        "flashinfer": importlib.metadata.version("flashinfer-python"),
        "FLASHINFER_CUDA_ARCH_LIST": os.environ.get("FLASHINFER_CUDA_ARCH_LIST"),
        "workspace_base": os.environ["FLASHINFER_WORKSPACE_BASE"],
    }
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.activation import gen_act_and_mul_module

    spec = gen_act_and_mul_module("silu")
    out["jit_dir"] = str(jit_env.FLASHINFER_JIT_DIR)
    out["aot_available"] = spec.is_aot  # a prebuilt flashinfer-jit-cache module: we still compile
    if not str(jit_env.FLASHINFER_JIT_DIR).startswith(os.environ["FLASHINFER_WORKSPACE_BASE"]):
        return {
            **out,
            "ok": False,
            "detail": f"FlashInfer's JIT dir {jit_env.FLASHINFER_JIT_DIR} is not under "
            f"FLASHINFER_WORKSPACE_BASE (imported before the probe set it?)",
        }
    t0 = time.time()
    try:
        spec.build(verbose=False)
    except Exception as exc:  # noqa: BLE001
        msg = str(exc)
        return {
            **out,
            "ok": False,
            "compiled": False,
            "detail": f"{link_hint(msg, 'FlashInfer')}JIT build failed: {_tail(msg, 2000)}",
        }
    out["compile_s"] = round(time.time() - t0, 1)
    lib = str(spec.jit_library_path)
    if not os.path.isfile(lib):
        return {**out, "ok": False, "compiled": False, "detail": f"build returned but {lib} is missing"}
    archs = archs_of_file(lib)
    out.update(library=lib, sass_archs=archs["archs"], arch_check=archs["how"], compiled=True)
    if archs["archs"] != [want]:
        return {**out, "ok": False, "detail": f"{os.path.basename(lib)} has SASS {archs['archs']}, want {want}"}
    out.update(ok=True, detail=f"JIT-built {spec.name} for {want} ({arch_note()}) in {out['compile_s']}s")

    def run():
        import torch

        module = spec.load(spec.jit_library_path)
        x = torch.randn(64, 2 * 512, device="cuda", dtype=torch.float16)
        y = torch.empty(64, 512, device="cuda", dtype=torch.float16)
        module.silu_and_mul(y, x, False)
        torch.cuda.synchronize()
        ref = torch.nn.functional.silu(x[:, :512].float()) * x[:, 512:].float()
        err = float((y.float() - ref).abs().max())
        return err < 1e-2, {"max_abs_err": err}, f"launched silu_and_mul on GPU 0, max |err| vs torch = {err:.2e}"

    return launch_on_gpu(ctx, out, run)


FUNCS = {
    "cext": probe_cext,
    "nvcc": probe_nvcc,
    "triton": probe_triton,
    "tvm-ffi": probe_tvm_ffi,
    "tilelang": probe_tilelang,
    "flashinfer": probe_flashinfer,
}


# ------------------------------------------------------------------ main


def setup_env(tmp: str, arch: str, image_caches: bool = False) -> dict:
    """Fresh caches for this run (or the environment's own, `image_caches`), and the arch for the
    no-GPU compiles (kept if already set)."""
    for name in ("TVM_FFI_CUDA_ARCH_LIST", "FLASHINFER_CUDA_ARCH_LIST"):
        os.environ.setdefault(name, arch)
    if image_caches:
        missing = [
            v
            for v in ("TRITON_CACHE_DIR", "TVM_FFI_CACHE_DIR", "TILELANG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")
            if not os.environ.get(v)
        ]
        if missing:
            raise SystemExit(f"--image-caches: the environment does not set {', '.join(missing)}")
        return {}
    env = {
        "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
        "TVM_FFI_CACHE_DIR": os.path.join(tmp, "tvm-ffi"),
        "TILELANG_CACHE_DIR": os.path.join(tmp, "tilelang"),
        "TILELANG_TMP_DIR": os.path.join(tmp, "tilelang", "tmp"),
        "FLASHINFER_WORKSPACE_BASE": os.path.join(tmp, "flashinfer"),
    }
    for path in env.values():
        os.makedirs(path, exist_ok=True)
    os.environ.update(env)
    return env


def run_probe(name: str, ctx: dict) -> dict:
    t0 = time.time()
    try:
        res = FUNCS[name](ctx)
    except Exception as exc:  # noqa: BLE001
        tb = traceback.format_exc().strip().splitlines()
        res = {"ok": False, "detail": f"{type(exc).__name__}: {_tail(str(exc), 1500)}", "traceback": tb[-8:]}
    res = {"probe": name, **res, "seconds": round(time.time() - t0, 1)}
    res.setdefault("detail", "")
    return res


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("probes", nargs="+", choices=PROBES + ("all",))
    p.add_argument("--launch", action="store_true", help="also run each kernel on GPU 0 and check it")
    p.add_argument("--arch", default="9.0a", help="CUDA arch to compile for (default 9.0a)")
    p.add_argument("--nvcc-release", default="13.0", help="required nvcc release (default 13.0)")
    p.add_argument("--keep", action="store_true", help="keep the temporary cache dirs")
    p.add_argument(
        "--image-caches",
        action="store_true",
        help="compile into the caches the environment names, not fresh temporary ones",
    )
    args = p.parse_args(argv)
    names = list(PROBES) if "all" in args.probes else list(dict.fromkeys(args.probes))
    tmp = tempfile.mkdtemp(prefix="jit-probes.")
    ctx = {
        "tmp": tmp,
        "arch": args.arch,
        "launch": args.launch,
        "nvcc_release": args.nvcc_release,
        "env": setup_env(tmp, args.arch, args.image_caches),
    }
    failed = 0
    try:
        for name in names:
            res = run_probe(name, ctx)
            failed += not res["ok"]
            print(json.dumps(res, default=str), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
