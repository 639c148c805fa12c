"""JIT recordings a recipe replays at build time (`aot.recordings`): read, bounded, checked against the recipe.

A recording is the JSON-lines file the image's recorder writes (tools/jit_record.py, on with
SERVEBUILD_JIT_RECORD=1). Each line names the engine and version it was made with, the arch it
targeted and one JIT build. The replayable GPU-free part becomes kernels of the aot stage: tvm-ffi
module builders with their arguments, and Triton kernels with their specialization data. A line
from another engine, engine version or arch, an unknown JIT kind or a malformed field is refused
with the file and line; TileLang lines and lines marked not replayable are counted, not replayed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from servebuild.errors import RecipeError
from servebuild.fsutil import read_small_text
from servebuild.recipe.schema import AOT_ARG, BUILDER, Recipe

MAX_LINES = 20_000
KNOWN = ("tvm-ffi", "triton", "tilelang")
KERNEL = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*\Z")


def _arch_names(arch_list: str) -> set[str]:
    """The archs a runtime on these GPUs detects: 9.0 and 9.0a both mean SGLang's 9.0a on Hopper."""
    names = set()
    for arch in re.split(r"[;, ]+", arch_list):
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch)
        if m:
            names.update({f"{m.group(1)}.{m.group(2)}{m.group(3)}", f"{m.group(1)}.{m.group(2)}a"})
    return names


def _sm(arch: str) -> int:
    m = re.fullmatch(r"(\d+)\.(\d+)[af]?", arch)
    return int(m.group(1)) * 10 + int(m.group(2)) if m else -1


def _short(value) -> str:
    """A recorded value in a message: its repr, cut to 100 characters."""
    text = repr(value)
    return text if len(text) <= 100 else text[:100] + "..."


def _fail(rel: str, line: int, field: str, problem: str) -> RecipeError:
    return RecipeError(problem, file=rel, field=field, line=line)


def _args(rel: str, n: int, args) -> list:
    if not isinstance(args, list):
        raise _fail(rel, n, "args", "args must be a list")
    for i, a in enumerate(args):
        if not isinstance(a, (bool, int, float, str)) or (isinstance(a, str) and not AOT_ARG.match(a)):
            raise _fail(rel, n, "args", f"argument {a!r} is not an int, float, bool or short name")
        if isinstance(a, float) and not math.isfinite(a):  # json.loads takes NaN and Infinity; spec.json must not
            raise _fail(rel, n, "args", f"argument {i} is not a finite number ({a!r})")
    return args


def recorded_kernels(recipe: Recipe, root: Path) -> tuple[list[dict], dict]:
    """The aot kernels the recordings add (deduplicated, in order) and a count of what was skipped."""
    engine = recipe.engine
    archs = _arch_names(recipe.cuda_arch_list)
    sms = {_sm(a) for a in archs}
    kernels, seen, skipped = [], set(), {"not replayable": 0, "tilelang": 0, "duplicate": 0}
    for rel in recipe.aot.recordings:
        path = root / rel
        text = read_small_text(path, rel, "recording") if path.exists() else None
        if text is None:
            raise RecipeError(f"recording {rel} is not a file", field="aot.recordings")
        lines = text.splitlines()
        if len(lines) > MAX_LINES:
            raise RecipeError(f"recording has {len(lines)} lines, more than {MAX_LINES}", file=rel)
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except RecursionError:
                raise _fail(rel, n, "line", "not JSON (nested too deep)") from None
            except ValueError as exc:  # JSONDecodeError, or an int of more than 4300 digits (no .msg)
                raise _fail(rel, n, "line", f"not JSON ({getattr(exc, 'msg', None) or str(exc)[:100]})") from None
            # the integer 1 only: True == 1 and 1.0 == 1 in Python, neither is this format's version
            if not isinstance(entry, dict) or type(entry.get("v")) is not int or entry["v"] != 1:
                raise _fail(rel, n, "v", "not a servebuild JIT recording line (v: 1)")
            if entry.get("engine") != engine.name:
                raise _fail(
                    rel, n, "engine", f"recorded with engine {entry.get('engine')!r}, the recipe builds {engine.name}"
                )
            if str(entry.get("engine_version")) != engine.version:
                raise _fail(
                    rel,
                    n,
                    "engine_version",
                    f"recorded with {engine.name} {entry.get('engine_version')}, the recipe builds {engine.version}",
                )
            jit = entry.get("jit")
            if jit not in KNOWN:
                raise _fail(rel, n, "jit", f"unknown JIT kind {jit!r} (known: {', '.join(KNOWN)})")
            if jit == "tilelang":
                skipped["tilelang"] += 1
                continue
            if not entry.get("replayable"):
                skipped["not replayable"] += 1
                continue
            where = f"{rel}:{n}"
            if jit == "tvm-ffi":
                arch = entry.get("arch")
                if not isinstance(arch, str) or arch not in archs:
                    raise _fail(
                        rel,
                        n,
                        "arch",
                        f"recorded for arch {_short(arch)}, the recipe's cuda_arch_list is {recipe.cuda_arch_list}",
                    )
                builder = entry.get("builder")
                if (
                    not isinstance(builder, str)
                    or not BUILDER.match(builder)
                    or not builder.startswith("sglang.jit_kernel.")
                ):
                    raise _fail(rel, n, "builder", f"{builder!r} is not an SGLang jit_kernel builder module:function")
                kernel = {
                    "where": where,
                    "jit": "tvm-ffi",
                    "builder": builder,
                    "args": _args(rel, n, entry.get("args")),
                }
            else:
                target = entry.get("target")
                if (
                    not isinstance(target, list)
                    or len(target) != 3
                    or target[0] != "cuda"
                    or not isinstance(target[1], int)
                    or target[1] not in sms
                ):
                    raise _fail(
                        rel,
                        n,
                        "target",
                        f"recorded for Triton target {target!r}, the recipe's "
                        f"cuda_arch_list is {recipe.cuda_arch_list}",
                    )
                name = entry.get("kernel")
                spec = entry.get("specialization")
                if not isinstance(name, str) or not KERNEL.match(name):
                    raise _fail(rel, n, "kernel", f"{name!r} is not a Triton kernel module:qualname")
                if not isinstance(spec, str) or len(spec) > 65536:
                    raise _fail(rel, n, "specialization", "missing or longer than 64 KiB")
                kernel = {
                    "where": where,
                    "jit": "triton",
                    "builder": name,
                    "args": [],
                    "package": entry.get("package")
                    if entry.get("package") in ("triton", "tokenspeed_triton")
                    else "triton",
                    "specialization": spec,
                    "target": target,
                }
            identity = json.dumps({k: v for k, v in kernel.items() if k != "where"}, sort_keys=True)
            if identity in seen:
                skipped["duplicate"] += 1
                continue
            seen.add(identity)
            kernels.append(kernel)
    return kernels, skipped
