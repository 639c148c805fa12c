"""Record every JIT build an engine asks for, as JSON lines (in the image; off unless SERVEBUILD_JIT_RECORD=1).

The image's site-packages holds `servebuild-jit-record.pth`, which imports this module and calls
install() only when SERVEBUILD_JIT_RECORD is set, in every Python process (the server's workers too).
Each JIT build then appends one line to $SERVEBUILD_JIT_RECORD_FILE (default
/cache/servebuild/jit-record.jsonl), written with one O_APPEND write so processes do not interleave:

  tvm-ffi   SGLang's module builder (`module:function`, found on the stack above tvm_ffi.cpp.load_inline
            or load) and its arguments, the module name and its cache key (the build directory name),
            the arch SGLang targets; replayable when every argument is an int, float, bool, str or dtype
  triton    the kernel (`module:qualname`), Triton's own specialization data (signature, constexprs,
            attrs, options: what JITFunction.preload takes) and the target; from
            knobs.runtime.jit_post_compile_hook, i.e. only kernels really compiled (not cache hits)
  tilelang  the kernel's cache key as TileLang computes it (record only: the target is in the key)

Every line also names the engine and its version (from the image's manifest) and the tvm-ffi and
Triton versions: a recording replays only into an image of the same engine version and arch.
Standard library only at import; the hooks import what they wrap.
"""

from __future__ import annotations

import json
import os
import sys
import time

from servebuild_files import load_json, open_dir, open_regular

VERSION = 1
_installed = False


def _out_path() -> str:
    return os.environ.get("SERVEBUILD_JIT_RECORD_FILE") or "/cache/servebuild/jit-record.jsonl"


def _engine() -> dict:
    try:
        manifest = load_json(os.environ.get("SERVEBUILD_MANIFEST", "/opt/servebuild/manifest.json"))
    except (OSError, ValueError):
        return {"engine": None, "engine_version": None}
    engine = (manifest.get("engine") if isinstance(manifest, dict) else None) or {}
    if not isinstance(engine, dict):  # a hostile manifest: the line names no engine, the server goes on
        return {"engine": None, "engine_version": None}
    return {"engine": engine.get("name"), "engine_version": engine.get("version")}


def _versions() -> dict:
    from importlib import metadata
    found = {}
    for dist in ("apache-tvm-ffi", "triton", "tilelang", "flashinfer-python"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def write(entry: dict) -> None:
    """Append one line (O_APPEND); never blocks (a FIFO at the path is skipped), never writes through a
    link at the path or at its directory, never raises into the server (whatever fails, one stderr
    line and the server goes on)."""
    path = _out_path()
    try:
        line = json.dumps({"v": VERSION, **_engine(), "versions": _versions(), "pid": os.getpid(),
                           "time": round(time.time(), 3), **entry}, sort_keys=True, default=str) + "\n"
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, exist_ok=True)
        dir_fd = open_dir(folder)  # a linked record directory (/cache/servebuild -> /etc) is refused too
        try:
            fd = open_regular(os.path.basename(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except Exception as exc:  # noqa: BLE001 - recording must never break the server
        try:
            print(f"servebuild jit-record: cannot write {path}: {exc}"[:500].replace("\n", " "), file=sys.stderr)
        except Exception:  # noqa: BLE001 - not even a closed stderr
            pass


def _plain(value):
    """A builder argument as the recipe spells it, or None when it has no such spelling."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if type(value).__name__ == "dtype" and str(value).startswith("torch."):
        return str(value)
    return None


def _builder_frame():
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name.startswith("_jit_") and module.startswith("sglang.jit_kernel"):
            return frame
        frame = frame.f_back
    return None


def _sglang_arch():
    try:
        from sglang.jit_kernel.utils.arch import get_jit_cuda_arch
        return get_jit_cuda_arch().target_name
    except Exception:  # noqa: BLE001
        return os.environ.get("TVM_FFI_CUDA_ARCH_LIST")


def _wrap_tvm_ffi(cpp, name: str) -> None:
    original = getattr(cpp, name)

    def recorded(module_name, *args, **kwargs):
        start = time.monotonic()
        result = original(module_name, *args, **kwargs)
        frame = _builder_frame()
        entry = {"jit": "tvm-ffi", "module": module_name, "seconds": round(time.monotonic() - start, 2),
                 "key": os.path.basename(str(kwargs.get("build_directory") or "")) or None, "arch": _sglang_arch()}
        if frame is not None:
            code = frame.f_code
            values = [frame.f_locals.get(n) for n in code.co_varnames[:code.co_argcount]]
            plain = [_plain(v) for v in values]
            entry.update(builder=f"{frame.f_globals['__name__']}:{code.co_name}", args=plain,
                         replayable=all(p is not None for p in plain))
        else:
            entry.update(builder=None, args=None, replayable=False)
        write(entry)
        return result
    setattr(cpp, name, recorded)


def _triton_hook(package: str):
    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled, **_):
        target = None
        try:  # the GPUTarget this device compiles for: (backend, arch, warp_size)
            t = fn.jit_function.device_caches[compile["device"]][2]
            target = [t.backend, t.arch, t.warp_size]
        except Exception:  # noqa: BLE001
            pass
        write({"jit": "triton", "package": package, "kernel": f"{fn.module}:{fn.name}", "repr": repr,
               "specialization": _portable(package, compile.get("specialization_data")), "target": target,
               "warmup": bool(is_manual_warmup), "replayable": target is not None and "<locals>" not in fn.name})
        return False
    return hook


def _portable(package: str, data):
    """Paths inside the Triton package (libdevice in extern_libs) as {triton}/...: the replay puts back
    the image's own, which is what the image's runtime has in the same options."""
    try:
        root = os.path.dirname(__import__(package).__file__)
        spec = json.loads(data)
        libs = spec.get("options", {}).get("extern_libs") or []
        spec["options"]["extern_libs"] = [[n, "{triton}" + p[len(root):] if p.startswith(root + "/") else p]
                                          for n, p in libs]
        return json.dumps(spec)
    except Exception:  # noqa: BLE001 - keep what Triton gave
        return data


def _install_triton(package: str) -> None:
    try:
        knobs = __import__(f"{package}.knobs", fromlist=["runtime"])
    except Exception:  # noqa: BLE001 - not installed
        return
    previous = knobs.runtime.jit_post_compile_hook
    mine = _triton_hook(package)

    def chained(**kwargs):
        mine(**kwargs)
        return previous(**kwargs) if previous else False
    knobs.runtime.jit_post_compile_hook = chained


def _install_tilelang() -> None:
    try:
        from tilelang.cache import kernel_cache
    except Exception:  # noqa: BLE001
        return
    cls = getattr(kernel_cache, "KernelCache", None)
    original = getattr(cls, "_generate_key", None) if cls else None
    if original is None:
        return

    def recorded(self, *args, **kwargs):
        key = original(self, *args, **kwargs)
        write({"jit": "tilelang", "key": str(key), "target": str(kwargs.get("target")), "replayable": False})
        return key
    cls._generate_key = recorded


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    try:
        import tvm_ffi.cpp as cpp
        for name in ("load_inline", "load"):
            if hasattr(cpp, name):
                _wrap_tvm_ffi(cpp, name)
    except Exception:  # noqa: BLE001 - no tvm-ffi in this image
        pass
    for package in ("triton", "tokenspeed_triton"):
        _install_triton(package)
    _install_tilelang()
