"""Compile an image's serve-time JIT kernels ahead of time, with no GPU (runs in the image's aot stage).

usage: python aot_build.py --spec SPEC.json --cache /cache --seed DIR [--reuse-from DIR --changed PATH...]

SPEC (written by servebuild's renderer) names the recipe, its CUDA arch list and the kernels: each
a JIT kind, the builder the engine itself calls (`module:function`) and its arguments. Each builder
runs with the image's own packages and nvcc, for each arch, where the engine's runtime would put it:
under --cache, the image's cache root, so every path baked into a build file is the one the server
uses. Then the whole cache tree moves to DIR/cache (the launcher copies what /cache lacks at each
start, `servebuild-cache seed`) and DIR/aot.json records each kernel's cache keys, files and bytes.

The seed is a function of the inputs (issue 20): temporary directories get names from a counter
(Triton's C helpers keep their source's path in their symbol table), nvcc's tmpxft_PID names in the
objects are made one (canonical_nvcc_names), and ninja's state files written
under the cache (.ninja_log, .ninja_deps) get the step's settled time ($SERVEBUILD_SETTLED, which
the settle step then gives every file it wrote) in place of the clock's times: ninja compares the
recorded times with the files' mtimes, which are that settled time too, so it finds nothing to redo.
The seconds each kernel took are printed, not recorded.

JIT kinds:
  tvm-ffi     SGLang's jit_kernel module builders (`sglang.jit_kernel.M:_jit_X_module`), called under
              sglang.jit_kernel.utils.arch.override_jit_cuda_arch: the cache key then holds the
              same arch (9.0a) a GPU run detects (measured on an H200: identical keys)
  flashinfer  FlashInfer's JIT spec generators (`flashinfer.jit.M:gen_X_module`): the returned
              JitSpec is built with FLASHINFER_CUDA_ARCH_LIST set to the arch
  humming     humming's host-side helpers, which it builds the first time each is needed (in a
              background process that `import humming` starts): the launcher
              (`humming.ops.utils:init_humming_launcher`, C++ built by torch's cpp_extension under
              HUMMING_CACHE_DIR/launcher/) and the NVRTC driver program
              (`humming.utils.nvrtc:may_build_nvrtc_compile_binary`, g++ against libnvrtc, under
              HUMMING_CACHE_DIR/nvrtc_compile/). Host code, no GPU code: built once, not per arch, the
              launcher linked against the image's libcuda stub (LIBRARY_PATH). vLLM 0.26.0's first start
              wrote the launcher's 6 files (H200) and, with the launcher seeded, the program (H100).
              HUMMING_DISABLE_PARALLEL_BUILD=1 here: importing a builder's module would otherwise start
              that background build beside this one

A variant whose patches change kernel sources (headers, .cu files: not Python) compiles only the kernels
that read one of them (--reuse-from DIR --changed PATH...): DIR holds the release's seed and the
record of what each of its kernels wrote and read (aot-files.json: the paths its build.ninja and
.ninja_deps name, the compiler's own list of the headers it opened); a kernel none of whose inputs
changed is copied from there, its ninja state settled again to this step's time, and one whose
inputs are not recorded is compiled. The record is written beside the seed (--seed's parent, never in
the image), so the seed itself is what it was.

A string argument "torch.NAME" is the torch dtype NAME. A bad builder or argument is one line
starting with `servebuild: ` (the build surfaces it) and exit 1. Standard library + the image's
packages: it runs without servebuild installed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import inspect
import itertools
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import time

ANNOTATIONS = {"int": int, "bool": bool, "float": float, "str": str}


class Refused(Exception):
    """What is wrong with one kernel entry, in one line."""


def cache_files(root: str) -> set[str]:
    found = set()
    for d, _, files in os.walk(root):
        for name in files:
            found.add(os.path.relpath(os.path.join(d, name), root))
    return found


def arch_parts(arch: str) -> tuple[int, int, str]:
    m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch.strip())
    if not m:
        raise Refused(f"cuda_arch_list entry {arch!r} is not of the form 9.0a")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def resolve_builder(spec: str):
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the engine's own import error is the finding
        raise Refused(f"module {module_name} cannot be imported: {type(exc).__name__}: {str(exc)[:200]}") from None
    func = getattr(module, func_name, None)
    if func is None or not callable(func):
        known = sorted(n for n in dir(module) if n.startswith(("_jit_", "gen_")) and callable(getattr(module, n)))
        raise Refused(f"{module_name} has no builder {func_name}" + (f" (it has: {', '.join(known[:12])})" if known else ""))
    return func


def converted_args(func, args: list):
    """The arguments as the builder takes them, checked against its signature and annotations."""
    values = []
    for value in args:
        if isinstance(value, str) and value.startswith("torch."):
            import torch
            dtype = getattr(torch, value[len("torch."):], None)
            if not isinstance(dtype, torch.dtype):
                raise Refused(f"argument {value!r} is not a torch dtype")
            value = dtype
        values.append(value)
    target = inspect.unwrap(func)
    try:
        bound = inspect.signature(target).bind(*values)
    except TypeError as exc:
        raise Refused(f"arguments {args!r} do not fit {target.__name__}{inspect.signature(target)}: {exc}") from None
    for name, value in bound.arguments.items():
        want = target.__annotations__.get(name)
        want = getattr(want, "__name__", want)
        if want in ANNOTATIONS:
            ok = isinstance(value, ANNOTATIONS[want]) and not (want in ("int", "float") and isinstance(value, bool))
        elif want in ("torch.dtype", "dtype"):
            ok = type(value).__name__ == "dtype" and str(value).startswith("torch.")
        else:
            continue  # unannotated or a type we do not know: the builder itself decides
        if not ok:
            raise Refused(f"argument {name} is {value!r} ({type(value).__name__}); {target.__name__} wants {want}")
    return values


def build_tvm_ffi(func, values, archs):
    from sglang.jit_kernel.utils.arch import _cuda_arch_suffix, override_jit_cuda_arch
    target = inspect.unwrap(func)  # past cache_once: each arch really builds
    done = []
    for arch in archs:
        major, minor, suffix = arch_parts(arch)
        suffix = suffix or _cuda_arch_suffix(major, minor)  # the suffix SGLang's runtime detection adds
        name = f"{major}.{minor}{suffix}"
        if name in done:
            continue
        with override_jit_cuda_arch(major, minor, suffix):
            target(*values)
        done.append(name)
    return done


def build_flashinfer(func, values, archs):
    spec = func(*values)
    if not hasattr(spec, "build"):
        raise Refused(f"{func.__name__} returned {type(spec).__name__}, not a FlashInfer JitSpec")
    spec.build(verbose=False)
    return list(archs)


def triton_kernel(package: str, name: str):
    """The JITFunction under `module:qualname` (past autotuner and heuristics wrappers)."""
    module_name, _, qualname = name.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001
        raise Refused(f"module {module_name} cannot be imported: {type(exc).__name__}: {str(exc)[:200]}") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise Refused(f"{module_name} has no kernel {qualname}")
    jit = importlib.import_module(f"{package}.runtime.jit")
    while not isinstance(obj, jit.JITFunction):
        inner = getattr(obj, "fn", None)
        if inner is None or inner is obj:
            raise Refused(f"{name} is a {type(obj).__name__}, not a {package}.jit kernel")
        obj = inner
    return obj


def build_triton(entry: dict) -> list[str]:
    """What JITFunction.preload does, with the recorded target instead of the current device: the same
    ASTSource, options and target give the cache key the runtime computes."""
    package = entry.get("package", "triton")
    triton = importlib.import_module(package)
    language = importlib.import_module(f"{package}.language")
    from_backend = importlib.import_module(f"{package}.backends.compiler")
    compiler = importlib.import_module(f"{package}.compiler.compiler")
    fn = triton_kernel(package, entry["builder"])
    data = json.loads(entry["specialization"])
    if data.get("name") != fn._fn_name:
        raise Refused(f"the recording is for {data.get('name')}, the image's kernel is {fn._fn_name}")
    constexprs = {tuple(k): (language.dtype(v) if language.dtype.is_dtype(v) else
                             language.constexpr(v["constexpr"]) if isinstance(v, dict) and "constexpr" in v else v)
                  for k, v in zip(data["constant_keys"], data["constant_vals"])}
    attrs = dict(zip(map(tuple, data["attrs_keys"]), data["attrs_vals"]))
    signature = {k: tuple(v) if isinstance(v, list) else v for k, v in data["signature"].items()}
    root = os.path.dirname(triton.__file__)
    libs = []
    for name, path in data["options"].get("extern_libs") or []:
        path = root + path[len("{triton}"):] if path.startswith("{triton}/") else path
        if not os.path.isfile(path):
            raise Refused(f"the recording names {path} ({name}), which this image lacks: record in the image itself")
        libs.append((name, path))
    if libs:
        data["options"]["extern_libs"] = libs
    options = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
               for k, v in data["options"].items()}
    backend_name, arch, warp = entry["target"]
    target = from_backend.GPUTarget(backend_name, arch, warp)
    backend = compiler.make_backend(target)
    src = compiler.ASTSource(fn, signature, constexprs, attrs)
    kernel = triton.compile(src, target=target, options=backend.parse_options(options).__dict__)
    launcher_stubs(package, src, kernel)
    return [f"{backend_name}:{arch}"]


def libcuda_stub(what: str) -> str:
    """The image's libcuda stub (SONAME libcuda.so.1, on LIBRARY_PATH) loaded into this process, since no
    driver is mounted: a module linked with -lcuda then loads (its DT_NEEDED is met by the stub's SONAME).
    Returns a directory holding libcuda.so and libcuda.so.1 links to it."""
    stub = next((os.path.join(d, "libcuda.so") for d in os.environ.get("LIBRARY_PATH", "").split(":")
                 if d and os.path.isfile(os.path.join(d, "libcuda.so"))), None)
    if stub is None:
        raise Refused(f"no libcuda stub on LIBRARY_PATH to link {what} against")
    links = tempfile.mkdtemp(prefix="libcuda-stub.")
    os.symlink(stub, os.path.join(links, "libcuda.so.1"))
    os.symlink(stub, os.path.join(links, "libcuda.so"))
    ctypes.CDLL(os.path.join(links, "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)  # the modules' DT_NEEDED
    return links


def launcher_stubs(package: str, src, kernel) -> None:
    """The C helpers a GPU host builds at a kernel's first launch: the driver's cuda_utils and this
    kernel's __triton_launcher (cached by their source and platform, not by libcuda's path), linked
    here against the image's libcuda stub since no driver is mounted."""
    driver = importlib.import_module(f"{package}.backends.nvidia.driver")
    os.environ["TRITON_LIBCUDA_PATH"] = libcuda_stub("Triton's launcher")
    driver.CudaUtils()
    driver.CudaLauncher(src, kernel.metadata)


def build_humming(func, values, archs):
    libcuda_stub("humming's helpers")  # the launcher is linked with -lcuda and loaded once built
    func(*values)
    return ["host"]


BUILDERS = {"tvm-ffi": build_tvm_ffi, "flashinfer": build_flashinfer, "humming": build_humming}
NINJA_LOGS = ("# ninja log v6", "# ninja log v7")  # start, end, mtime (ns), output, hash: tab-separated
NINJA_DEPS = b"# ninjadeps\n"  # version 4: records of uint32 size (high bit: deps) + payload


def fixed_temp_names() -> None:
    """tempfile's names from a counter instead of a random source, for this process."""
    counter = itertools.count(1)
    tempfile._get_candidate_names = lambda: (f"servebuild{n:04d}" for n in counter)


def settle_ninja_state(cache: str, paths: list[str], settled_ns: int) -> None:
    """Put `settled_ns` in place of the build's clock in ninja's log (start and end become 0) and in
    each dependency record of its deps log; other files are left as they are."""
    for rel in paths:
        path = os.path.join(cache, rel)
        name = os.path.basename(rel)
        if name == ".ninja_log":
            with open(path, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
            if not lines or lines[0] not in NINJA_LOGS:
                continue
            rows = [line.split("\t") for line in lines[1:]]
            rows = [["0", "0", str(settled_ns), *row[3:]] if len(row) == 5 else row for row in rows]
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("\n".join([lines[0]] + ["\t".join(row) for row in rows]) + "\n")
        elif name == ".ninja_deps":
            with open(path, "rb") as handle:
                data = bytearray(handle.read())
            if data[:len(NINJA_DEPS)] != NINJA_DEPS or struct.unpack_from("<I", data, len(NINJA_DEPS))[0] != 4:
                continue
            offset = len(NINJA_DEPS) + 4
            while offset + 4 <= len(data):
                head = struct.unpack_from("<I", data, offset)[0]
                if head & 0x80000000 and offset + 16 <= len(data):  # deps: int32 output id, uint64 mtime, ids
                    struct.pack_into("<Q", data, offset + 8, settled_ns)
                offset += 4 + (head & 0x7FFFFFFF)
            with open(path, "wb") as handle:
                handle.write(data)


NVCC_TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")
CANONICAL_TEMP_NAME = b"tmpxft_00000000_00000000"


def canonical_nvcc_names(cache: str, paths: list[str]) -> int:
    """nvcc names its intermediate files tmpxft_PID_COUNTER, and the name stays in each object's symbol
    table (`_GLOBAL__sub_I_tmpxft_..._renorm.cudafe1.cpp` and the `.file` entry): with ninja running
    nvcc jobs in parallel, which job gets which PID changes from build to build (measured: the same
    three FlashInfer sampling objects with PIDs 0x11 and 0x12 swapped), and the PIDs also count every
    thread the build started before. The name is rewritten in place to one of the same length (as
    Debian's strip-nondeterminism rewrites archive timestamps): each object keeps its own source name
    after it, so the local symbols stay distinct, and no offset in the file moves. Returns the count."""
    changed = 0
    for rel in paths:
        path = os.path.join(cache, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as handle:
            data = handle.read()
        if b"tmpxft_" not in data:
            continue
        fixed = NVCC_TEMP_NAME.sub(CANONICAL_TEMP_NAME, data)
        if fixed != data:
            with open(path, "r+b") as handle:  # same length: written over in place, the mode kept
                handle.write(fixed)
            changed += 1
    return changed


def ninja_reads(cache: str, paths: list[str]) -> list[str] | None:
    """Every path the ninja files among `paths` name (build.ninja's words with a slash, .ninja_deps' path
    records: what the compiler reported opening), normalised; None when no deps log records a dependency
    (the headers a build read are then not known)."""
    reads: set[str] = set()
    recorded = False
    for rel in paths:
        path = os.path.join(cache, rel)
        name = os.path.basename(rel)
        if name == "build.ninja":
            with open(path, encoding="utf-8", errors="replace") as handle:
                reads.update(os.path.normpath(w) for w in re.split(r"[\s=]+", handle.read()) if w.startswith("/"))
        elif name == ".ninja_deps":
            with open(path, "rb") as handle:
                data = handle.read()
            if data[:len(NINJA_DEPS)] != NINJA_DEPS:
                continue
            offset = len(NINJA_DEPS) + 4
            while offset + 4 <= len(data):
                head = struct.unpack_from("<I", data, offset)[0]
                size = head & 0x7FFFFFFF
                payload = data[offset + 4:offset + 4 + size]
                if head & 0x80000000:
                    recorded = True  # a dependency record: output id, mtime, the inputs the depfile named
                elif len(payload) >= 4:  # a path, NUL-padded to 4 bytes, then its checksum
                    reads.add(os.path.normpath(payload[:-4].rstrip(b"\0").decode(errors="replace")))
                offset += 4 + size
    return sorted(reads) if recorded else None


def kernel_id(entry: dict) -> str:
    return f"{entry['jit']} {entry['builder']} {json.dumps(entry.get('args', []))}"


def reuse_reason(entry: dict, release: dict | None, changed: list[str]) -> str | None:
    """Why the kernel must be compiled here (None: the release's build of it stands). `changed`: the
    site-relative paths the patches change (none of them Python)."""
    if release is None:
        return "the release's seed has no such kernel"
    if entry["jit"] == "triton":
        return None  # a Triton kernel is its Python source: no header or .cu file is read
    reads = release.get("reads")
    if reads is None:
        return "its build recorded no inputs"
    for path in changed:
        hit = next((r for r in reads if r == path or r.endswith("/" + path)), None)
        if hit:
            return f"it reads {path}, which the patches change"
    return None


def reused_one(entry: dict, release_dir: str, release: dict, cache: str) -> dict:
    """The release's files of one kernel copied into the cache (ninja's state settled to this step)."""
    source = os.path.join(release_dir, "seed", "cache")
    for rel in release["files"]:
        target = os.path.join(cache, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(source, rel), target, follow_symlinks=False)
    settled = os.environ.get("SERVEBUILD_SETTLED", "")
    if settled.isdigit():
        settle_ninja_state(cache, release["files"], int(settled) * 10**9)
    return dict(release["record"])


def compile_one(entry: dict, archs: list[str], cache: str) -> tuple[dict, float]:
    if entry["jit"] == "triton":
        func = values = None
    else:
        func = resolve_builder(entry["builder"])
        values = converted_args(func, entry.get("args", []))
    before = cache_files(cache)
    start = time.monotonic()
    try:
        built = build_triton(entry) if func is None else BUILDERS[entry["jit"]](func, values, archs)
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - a compile error is the finding
        text = " ".join(str(exc).split())
        raise Refused(f"the build failed: {type(exc).__name__}: {text[-400:]}") from None
    seconds = time.monotonic() - start
    new = sorted(cache_files(cache) - before)
    if not new:
        raise Refused(f"the builder returned but wrote nothing under {cache} (already built by an earlier entry?)")
    canonical_nvcc_names(cache, new)
    settled = os.environ.get("SERVEBUILD_SETTLED", "")
    if settled.isdigit():
        settle_ninja_state(cache, new, int(settled) * 10**9)
    # the cache key: the directory of each loadable output (.so, .cubin), as the runtime looks it up
    keys = sorted({os.path.dirname(p) for p in new if p.endswith((".so", ".cubin"))}
                  or {"/".join(p.split("/")[:2]) for p in new})
    size = sum(os.path.getsize(os.path.join(cache, p)) for p in new)
    record = {"jit": entry["jit"], "builder": entry["builder"], "args": entry.get("args", []), "from": entry["where"],
              "archs": built, "keys": keys, "files": len(new), "bytes": size}
    return {"record": record, "files": new, "reads": ninja_reads(cache, new)}, seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--reuse-from", help="the release's aot output: seed/ and aot-files.json")
    parser.add_argument("--changed", action="append", default=[], help="a site-relative path the patches change")
    args = parser.parse_args()
    with open(args.spec, encoding="utf-8") as handle:
        spec = json.load(handle)
    archs = [a for a in re.split(r"[;, ]+", spec["arch_list"]) if a]
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # no GPU is consulted, even on a build host that has one
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", " ".join(archs))
    os.environ["HUMMING_DISABLE_PARALLEL_BUILD"] = "1"  # no background launcher build racing the builder's
    record = {"recipe": spec["recipe"], "arch_list": spec["arch_list"], "kernels": []}
    fixed_temp_names()
    released: dict = {}
    if args.reuse_from:
        with open(os.path.join(args.reuse_from, "aot-files.json"), encoding="utf-8") as handle:
            released = json.load(handle)
    built: dict = {}
    for entry in spec["kernels"]:
        name = kernel_id(entry)
        why = reuse_reason(entry, released.get(name), args.changed) if args.reuse_from else "compiled"
        if why is None:
            done = reused_one(entry, args.reuse_from, released[name], args.cache)
            built[name] = released[name]
            record["kernels"].append(done)
            print(f"aot: {done['builder']}{tuple(done['args'])}: the release's build, copied ({done['files']} files): "
                  f"none of the {len(released[name]['reads'] or [])} files it reads is changed", flush=True)
            continue
        try:
            out, seconds = compile_one(entry, archs, args.cache)
        except Refused as exc:
            print(f"servebuild: recipe {spec['recipe']}, {entry['where']} ({entry['jit']} {entry['builder']}): {exc}",
                  flush=True)
            return 1
        done = out["record"]
        built[name] = out
        record["kernels"].append(done)
        because = f" ({why})" if args.reuse_from else ""
        print(f"aot: {done['builder']}{tuple(done['args'])} for {', '.join(done['archs'])}: {done['files']} files, "
              f"{done['bytes']} bytes in {seconds:.1f} s -> {', '.join(done['keys'])}{because}", flush=True)
    total = sum(k["bytes"] for k in record["kernels"])
    if total > spec["max_bytes"]:
        print(f"servebuild: recipe {spec['recipe']}: the ahead-of-time kernels take {total} bytes, above "
              f"aot.max_bytes {spec['max_bytes']}", flush=True)
        return 1
    record["bytes"] = total
    target = os.path.join(args.seed, "cache")
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(args.cache)):
        src = os.path.join(args.cache, name)
        if os.path.isdir(src) and not os.listdir(src):
            continue  # an empty cache dir of the image: nothing to seed
        shutil.move(src, os.path.join(target, name))
        os.makedirs(src, mode=0o1777, exist_ok=True)
    with open(os.path.join(args.seed, "aot.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    # beside the seed, not in it: what each kernel wrote and read, for a variant's --reuse-from
    with open(os.path.join(os.path.dirname(os.path.abspath(args.seed)), "aot-files.json"), "w", encoding="utf-8") as handle:
        json.dump(built, handle, indent=1, sort_keys=True)
        handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
