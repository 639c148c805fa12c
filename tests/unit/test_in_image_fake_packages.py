"""The in-image tools' success paths, driven with fake engine packages (issue 31): tools/aot_build.py with
a fake SGLang tvm-ffi builder and a fake FlashInfer JitSpec that write, write nothing or fail, and
tools/jit_record.py with a fake tvm-ffi and Triton, to see which records it calls replayable. The
packages are small modules on PYTHONPATH; the tools run as the image runs them (a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from servebuild import TOOLS_DIR

FAKES = {
    "sglang/__init__.py": "",
    "sglang/jit_kernel/__init__.py": "",
    "sglang/jit_kernel/utils/__init__.py": "",
    "sglang/jit_kernel/utils/arch.py": """
        import contextlib
        import types
        CURRENT = ["8.0"]

        def _cuda_arch_suffix(major, minor):
            return "a" if major >= 9 else ""

        @contextlib.contextmanager
        def override_jit_cuda_arch(major, minor, suffix):
            CURRENT.append(f"{major}.{minor}{suffix}")
            try:
                yield
            finally:
                CURRENT.pop()

        def get_jit_cuda_arch():
            return types.SimpleNamespace(target_name="9.0a")
    """,
    "sglang/jit_kernel/demo.py": """
        import os
        from sglang.jit_kernel.utils.arch import CURRENT

        def _jit_writes_module(n: int):
            folder = os.path.join(os.environ["FAKE_CACHE"], "tvm-ffi", f"demo_{n}_{CURRENT[-1]}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "demo.so"), "wb") as handle:
                handle.write(bytes(n))

        def _jit_ninja_module(n: int):  # a build as ninja leaves it: its log holds the build's clock
            folder = os.path.join(os.environ["FAKE_CACHE"], "tvm-ffi", f"ninja_{n}_{CURRENT[-1]}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "ninja.so"), "wb") as handle:
                handle.write(bytes(n))
            with open(os.path.join(folder, ".ninja_log"), "w") as handle:
                handle.write("# ninja log v6\\n12\\t345\\t1764000000123456789\\tninja.so\\tabc123\\n")

        def _jit_nothing_module(n: int):
            return None

        def _jit_fails_module(n: int):
            raise RuntimeError("ninja: build stopped\\nptxas error: too many resources")

        def _jit_recorded_module(n: int, dtype):
            import tvm_ffi.cpp
            return tvm_ffi.cpp.load_inline(f"demo_{n}", build_directory=f"/cache/tvm-ffi/demo_{n}_k3y")
    """,
    "flashinfer/__init__.py": "",
    "flashinfer/jit/__init__.py": "",
    "flashinfer/jit/demo.py": """
        import os

        class JitSpec:
            def __init__(self, name):
                self.name = name

            def build(self, verbose):
                archs = os.environ["FLASHINFER_CUDA_ARCH_LIST"].replace(" ", "_")
                folder = os.path.join(os.environ["FAKE_CACHE"], "flashinfer", archs, self.name)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, self.name + ".so"), "wb") as handle:
                    handle.write(b"so")

        def gen_sampling_module(n: int):
            return JitSpec(f"sampling_{n}")

        def gen_not_a_spec_module(n: int):
            return n
    """,
    "humming/__init__.py": "",
    "humming/ops/__init__.py": "",
    "humming/ops/utils.py": """
        # humming's modules start a background build of their helper at import unless told not to
        import os

        def _cache(*parts):
            folder = os.path.join(os.environ["FAKE_CACHE"], "humming", *parts)
            os.makedirs(folder, exist_ok=True)
            return folder

        if os.environ.get("HUMMING_DISABLE_PARALLEL_BUILD", "0") != "1":
            open(os.path.join(_cache("tmp"), "background-build-started"), "w").close()

        def init_humming_launcher():
            with open(os.path.join(_cache("launcher", "py312_k3y"), "humming_launcher.so"), "wb") as handle:
                handle.write(b"launcher")
    """,
    "tvm_ffi/__init__.py": "",
    "tvm_ffi/cpp.py": """
        def load_inline(name, *args, build_directory=None, **kwargs):
            return f"module {name}"
    """,
    "triton/__init__.py": "",
    "triton/knobs.py": """
        class runtime:
            jit_post_compile_hook = None
    """,
}


@pytest.fixture()
def fakes(tmp_path):
    for rel, text in FAKES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return tmp_path


def stub_dir(tmp_path):
    """A directory holding a loadable shared object named libcuda.so, as the image's stub is (the test
    loads this interpreter's own _ctypes extension under that name: any ELF object loads)."""
    import _ctypes

    folder = tmp_path / "stubs"
    folder.mkdir(exist_ok=True)
    shutil.copy(_ctypes.__file__, folder / "libcuda.so")
    return folder


def aot(tmp_path, kernels, max_bytes=1 << 30):
    spec = {
        "recipe": "r",
        "arch_list": "9.0a;10.0a",
        "max_bytes": max_bytes,
        "kernels": [{"where": f"aot.kernels[{i}]", **k} for i, k in enumerate(kernels)],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "FLASHINFER_CUDA_ARCH_LIST"}
    return subprocess.run(
        [sys.executable, str(TOOLS_DIR / "aot_build.py"), "--spec", "spec.json", "--cache", "cache", "--seed", "seed"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(tmp_path), "FAKE_CACHE": str(tmp_path / "cache")},
    )


WRITES = {"jit": "tvm-ffi", "builder": "sglang.jit_kernel.demo:_jit_writes_module", "args": [64]}
SAMPLING = {"jit": "flashinfer", "builder": "flashinfer.jit.demo:gen_sampling_module", "args": [3]}


def test_aot_builds_each_kernel_for_each_arch_and_moves_the_cache_to_the_seed(fakes):
    proc = aot(fakes, [WRITES, SAMPLING])
    assert proc.returncode == 0 and "servebuild: " not in proc.stdout, proc.stdout + proc.stderr
    record = json.loads((fakes / "seed" / "aot.json").read_text())
    tvm, fi = record["kernels"]
    assert tvm["archs"] == ["9.0a", "10.0a"] and tvm["files"] == 2 and tvm["bytes"] == 128
    assert tvm["keys"] == ["tvm-ffi/demo_64_10.0a", "tvm-ffi/demo_64_9.0a"] and tvm["from"] == "aot.kernels[0]"
    assert fi["keys"] == ["flashinfer/9.0a_10.0a/sampling_3"] and fi["bytes"] == 2 and record["bytes"] == 130
    assert (fakes / "seed" / "cache" / "tvm-ffi" / "demo_64_9.0a" / "demo.so").read_bytes() == bytes(64)
    assert sorted(os.listdir(fakes / "cache")) == ["flashinfer", "tvm-ffi"]  # left in place, empty
    assert not any(os.listdir(fakes / "cache" / d) for d in os.listdir(fakes / "cache"))
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == ["aot", "aot"], proc.stdout


def test_humming_helpers_are_built_once_for_the_host_with_no_background_build(fakes, monkeypatch):
    """humming's helpers are host code (built once, not per arch), and importing the builder's module must not
    start humming's own background build of the same helper beside the aot build (HUMMING_DISABLE_PARALLEL_BUILD)."""
    kernel = {"jit": "humming", "builder": "humming.ops.utils:init_humming_launcher", "args": []}
    monkeypatch.delenv("LIBRARY_PATH", raising=False)
    proc = aot(fakes, [kernel])  # the launcher is linked with -lcuda and loaded: no stub, one line
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1].endswith(
        "no libcuda stub on LIBRARY_PATH to link humming's helpers against"
    ), proc.stdout + proc.stderr
    shutil.rmtree(fakes / "cache", ignore_errors=True)
    monkeypatch.setenv("LIBRARY_PATH", str(stub_dir(fakes)))
    proc = aot(fakes, [kernel])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (record,) = json.loads((fakes / "seed" / "aot.json").read_text())["kernels"]
    assert record["archs"] == ["host"] and record["keys"] == ["humming/launcher/py312_k3y"], record
    assert record["files"] == 1 and record["bytes"] == len(b"launcher"), record
    assert not list((fakes / "seed").rglob("background-build-started")), "humming's background build was started"


def test_an_empty_cache_directory_of_the_image_is_not_seeded(fakes):
    """A cache directory the image made and no kernel wrote into (deep_gemm, 1777) stays where it is and is
    not moved into the seed: the seed holds what was compiled, nothing else."""
    (fakes / "cache" / "deep_gemm").mkdir(parents=True)
    proc = aot(fakes, [WRITES])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(os.listdir(fakes / "seed" / "cache")) == ["tvm-ffi"]
    assert sorted(os.listdir(fakes / "cache")) == ["deep_gemm", "tvm-ffi"]


@pytest.mark.parametrize(
    "kernel,words",
    [
        (
            {"jit": "tvm-ffi", "builder": "sglang.jit_kernel.demo:_jit_nothing_module", "args": [1]},
            "the builder returned but wrote nothing under cache",
        ),
        (
            {"jit": "tvm-ffi", "builder": "sglang.jit_kernel.demo:_jit_fails_module", "args": [1]},
            "the build failed: RuntimeError: ninja: build stopped ptxas error: too many resources",
        ),
        (
            {"jit": "flashinfer", "builder": "flashinfer.jit.demo:gen_not_a_spec_module", "args": [1]},
            "gen_not_a_spec_module returned int, not a FlashInfer JitSpec",
        ),
        (WRITES, "wrote nothing"),  # the same kernel twice: the second adds nothing, it is not counted as built
    ],
)
def test_a_builder_that_writes_nothing_or_fails_is_one_line_naming_the_kernel(fakes, kernel, words):
    proc = aot(fakes, [WRITES, kernel])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("servebuild: ")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    assert lines[0].startswith(f"servebuild: recipe r, aot.kernels[1] ({kernel['jit']} {kernel['builder']}): "), lines[
        0
    ]
    assert words in lines[0], lines[0]
    assert not (fakes / "seed" / "aot.json").exists()


def test_aot_max_bytes_is_enforced(fakes):
    proc = aot(fakes, [WRITES], max_bytes=127)
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1] == (
        "servebuild: recipe r: the ahead-of-time kernels take 128 bytes, above aot.max_bytes 127"
    ), proc.stdout
    assert not (fakes / "seed" / "aot.json").exists()
    shutil.rmtree(fakes / "cache")  # the refused run left its build there
    assert aot(fakes, [WRITES], max_bytes=128).returncode == 0


def test_aot_puts_the_steps_settled_time_in_ninjas_state(fakes, monkeypatch):
    """$SERVEBUILD_SETTLED (the settle step's time, exported by the rendered RUN) replaces the build's clock
    in ninja's log of what the builder wrote: without it the seed's ninja state holds the build's time and
    two builds of one recipe differ (issue 31, point 10: SERVEBUILD_SETTLED could be ignored)."""
    ninja = {"jit": "tvm-ffi", "builder": "sglang.jit_kernel.demo:_jit_ninja_module", "args": [8]}
    monkeypatch.setenv("SERVEBUILD_SETTLED", "1700000000")
    proc = aot(fakes, [ninja])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for arch in ("9.0a", "10.0a"):
        log = (fakes / "seed" / "cache" / "tvm-ffi" / f"ninja_8_{arch}" / ".ninja_log").read_text()
        assert log == "# ninja log v6\n0\t0\t1700000000000000000\tninja.so\tabc123\n", log


RECORD = """
import json, sys, types
sys.path.insert(0, {tools!r})
import jit_record
jit_record.install()
import tvm_ffi.cpp, triton, triton.knobs
from sglang.jit_kernel.demo import _jit_recorded_module

class dtype:
    def __str__(self):
        return "torch.bfloat16"

_jit_recorded_module(7, dtype())          # every argument has a recipe spelling: replayable
_jit_recorded_module(8, object())         # an argument with none: recorded, not replayable
tvm_ffi.cpp.load_inline("direct")         # not under an SGLang builder: not replayable
root = triton.__file__.rsplit("/", 1)[0]
spec = json.dumps({{"name": "k", "options": {{"extern_libs": [["libdevice", root + "/lib/libdevice.bc"]]}}}})
target = types.SimpleNamespace(backend="cuda", arch=90, warp_size=32)
def kernel(name, caches):
    return types.SimpleNamespace(module="sglang.srt.x", name=name,
                                 jit_function=types.SimpleNamespace(device_caches=caches))
hook = triton.knobs.runtime.jit_post_compile_hook
for name, caches in (("k", {{0: (None, None, target)}}), ("f.<locals>.k", {{0: (None, None, target)}}), ("k", {{}})):
    hook(key="key", repr="k[...]", fn=kernel(name, caches), compile={{"device": 0, "specialization_data": spec}},
         is_manual_warmup=False, already_compiled=False)
"""


def test_the_recorder_says_which_builds_are_replayable(fakes):
    rec = fakes / "rec.jsonl"
    (fakes / "manifest.json").write_text('{"engine": {"name": "sglang", "version": "0.5.16"}}')
    proc = subprocess.run(
        [sys.executable, "-c", RECORD.format(tools=str(TOOLS_DIR))],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=fakes,
        env={
            **os.environ,
            "PYTHONPATH": str(fakes),
            "SERVEBUILD_JIT_RECORD_FILE": str(rec),
            "SERVEBUILD_MANIFEST": str(fakes / "manifest.json"),
        },
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = [json.loads(line) for line in rec.read_text().splitlines()]
    assert all(x["v"] == 1 and x["engine"] == "sglang" and x["engine_version"] == "0.5.16" for x in lines)
    tvm = [(x["builder"], x["args"], x["key"], x["arch"], x["replayable"]) for x in lines if x["jit"] == "tvm-ffi"]
    assert tvm == [
        ("sglang.jit_kernel.demo:_jit_recorded_module", [7, "torch.bfloat16"], "demo_7_k3y", "9.0a", True),
        ("sglang.jit_kernel.demo:_jit_recorded_module", [8, None], "demo_8_k3y", "9.0a", False),
        (None, None, None, "9.0a", False),
    ]
    triton = [(x["kernel"], x["target"], x["replayable"]) for x in lines if x["jit"] == "triton"]
    assert triton == [
        ("sglang.srt.x:k", ["cuda", 90, 32], True),
        ("sglang.srt.x:f.<locals>.k", ["cuda", 90, 32], False),
        ("sglang.srt.x:k", None, False),
    ]
    libs = json.loads(lines[3]["specialization"])["options"]["extern_libs"]
    assert libs == [["libdevice", "{triton}/lib/libdevice.bc"]]  # the image's own path, put back at replay
