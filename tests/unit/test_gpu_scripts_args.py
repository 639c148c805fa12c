"""scripts/first_start_gpu.py and scripts/tiny_model.py (run by hand on a GPU host) held to the one-line
standard (issue 45, item 6): a negative or NaN number, a bad --steps, an --out that is a file, a link or holds
a record that is not one, is ONE line on stderr naming the option or file, exit 2, no traceback, and nothing
made (no --out, no --work folder). Both refuse before importing torch or starting anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"


def run(script: str, *argv: str):
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *argv], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
    )


def refused(out, said: str, script: str):
    assert out.returncode == 2, (out.returncode, out.stdout[-400:], out.stderr[-800:])
    assert "Traceback" not in out.stderr and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"{script}: "), out.stderr
    assert said in out.stderr, (said, out.stderr)


# -- tiny_model.py ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,said",
    [
        (["--hidden", "-64"], "--hidden -64 is outside"),
        (["--hidden", "nan"], "--hidden 'nan' is not a whole number"),
        (["--layers", "0"], "--layers 0 is outside"),
        (["--heads", "-4"], "--heads -4 is outside"),
        (["--kv-heads", "3"], "--heads 4 is not a multiple of --kv-heads 3"),
        (["--hidden", "66"], "--hidden 66 is not --heads 4 times an even head size"),
        (["--vocab", "inf"], "--vocab 'inf' is not a whole number"),
        (["--vocab", "10"], "--vocab 10 is outside"),
        (["--max-positions", "-1"], "--max-positions -1 is outside"),
        (["--embedding-rows", "-5"], "--embedding-rows -5 is outside"),
        (["--dtype", "float33"], "--dtype"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_tiny_model_bad_numbers_are_one_line_and_no_folder(tmp_path, argv, said):
    out = tmp_path / "model"
    refused(run("tiny_model.py", str(out), *argv), said, "tiny_model.py")
    assert not out.exists()


def test_tiny_model_refuses_an_out_that_is_a_file_a_link_or_a_full_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "garbage").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    for name, said in (("file", "exists and is not an empty folder"), ("full", "exists and is not an empty folder"),
                       ("link", "is a link")):  # fmt: skip
        refused(run("tiny_model.py", str(tmp_path / name)), f"OUT {tmp_path / name}: {said}", "tiny_model.py")
    assert not (tmp_path / "elsewhere").exists() and os.listdir(tmp_path / "full") == ["garbage"]


def test_tiny_model_refuses_an_out_below_a_file_before_torch(tmp_path):
    """hostile-45: OUT below a file (FILE/model) passed the checks; the script imported torch, then
    out.mkdir(parents=True) ended in a NotADirectoryError traceback."""
    (tmp_path / "file").write_text("x")
    refused(run("tiny_model.py", str(tmp_path / "file" / "model")), f"{tmp_path / 'file'}", "tiny_model.py")
    assert (tmp_path / "file").read_text() == "x"


# -- first_start_gpu.py -------------------------------------------------------------------------------------------


@pytest.fixture
def places(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "spec.json").write_text("{}")
    return tmp_path


def gpu(places, *argv, out="out", work="work"):
    return run(
        "first_start_gpu.py", "--model", str(places / "model"), "--out", str(places / out), "--work",
        str(places / work), *argv,
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv,said",
    [
        (["--engine", "vllm", "--timeout", "-5"], "--timeout -5 must be a finite number in (0, 86400]"),
        (["--engine", "vllm", "--timeout", "nan"], "--timeout nan must be a finite number"),
        (["--engine", "vllm", "--timeout", "inf"], "--timeout inf must be a finite number"),
        (["--engine", "vllm", "--steps", "seeded,bogus"], "--steps 'seeded,bogus'"),
        (["--engine", "vllm", "--steps", ""], "--steps ''"),
        (["--engine", "vllm", "--steps", "seeded,,pack"], "--steps 'seeded,,pack'"),
        (["--engine", "vllm", "--steps", "seeded,seeded"], "--steps 'seeded,seeded'"),
        (["--engine", "vllm", "--steps", "seeded,nospec"], "--steps: nospec only with --workload dsv4"),
        (["--engine", "vllm", "--steps", "aot,seeded"], "the aot step needs --spec"),
        (
            ["--engine", "sglang", "--workload", "dsv4", "--steps", "seeded,precompile"],
            "--steps precompile: vllm only (scripts/dsv4_kernels.py builds vLLM's mHC variants",
        ),
        (
            ["--engine", "sglang", "--workload", "dsv4", "--steps", "precompile"],
            "SGLang builds every mHC prenorm bucket itself while it loads the model",
        ),
        (["--engine", "tgi"], "--engine"),
        (["--engine", "vllm", "--steps", "seeded", "--spec", "/nonexistent/spec.json"], "--spec /nonexistent"),
    ],
)
def test_first_start_bad_options_are_one_line_and_nothing_made(places, argv, said):
    refused(gpu(places, *argv), said, "first_start_gpu.py")
    assert not (places / "out").exists() and not (places / "work").exists()


def test_first_start_refuses_a_model_that_is_no_folder(places):
    refused(
        gpu(places, "--engine", "vllm", "--model", str(places / "none"), "--steps", "seeded"),
        "--model",
        "first_start_gpu.py",
    )
    assert not (places / "out").exists() and not (places / "work").exists()


@pytest.mark.parametrize("which", ["out", "work"])
def test_first_start_refuses_an_out_or_work_that_is_a_file(places, which):
    (places / which).write_text("x")
    refused(gpu(places, "--engine", "vllm", "--steps", "seeded"), f"--{which} {places / which}: exists and is not a folder",
            "first_start_gpu.py")  # fmt: skip
    assert not (places / ("work" if which == "out" else "out")).exists()


@pytest.mark.parametrize(
    "record,said",
    [
        (b"{not json", "is not JSON"),
        (b"[1, 2]", "is a list, not a JSON object"),
        (b'{"engine": "vllm", "done": "seeded"}', "done: not a list of steps"),
        (b'{"engine": "vllm", "done": ["bogus"]}', "done: not a list of steps"),
        (b'{"engine": "vllm", "starts": {"a": 1}}', "starts: not a list of objects"),
        (b'{"engine": "sglang", "done": []}', "engine: 'sglang', not --engine vllm's record"),
        (b'{"engine": "vllm", "x": NaN}', "NaN"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deep"),
    ],
)
def test_first_start_refuses_an_out_holding_a_record_that_is_not_one(places, record, said):
    (places / "out").mkdir()
    (places / "out" / "first-start.json").write_bytes(record)
    refused(gpu(places, "--engine", "vllm", "--steps", "seeded"), said, "first_start_gpu.py")
    assert not (places / "work").exists() and os.listdir(places / "out") == ["first-start.json"]


def test_first_start_does_not_wait_on_a_fifo_record(places):
    (places / "out").mkdir()
    os.mkfifo(places / "out" / "first-start.json")
    refused(gpu(places, "--engine", "vllm", "--steps", "seeded"), "is not a regular file", "first_start_gpu.py")


def test_first_start_skips_the_aot_check_for_a_step_done_and_reads_a_good_record(places):
    """A resumed run whose aot step is done needs no --spec; with every step done nothing runs (exit 0)."""
    (places / "out").mkdir()
    (places / "out" / "first-start.json").write_text(json.dumps({"engine": "vllm", "done": ["aot", "seeded"]}))
    done = gpu(places, "--engine", "vllm", "--steps", "aot,seeded")
    assert done.returncode == 0 and "aot: done in an earlier run" in done.stdout, done.stderr


def test_first_start_sglang_dsv4_resumes_a_record_with_every_step_done(places):
    """--engine sglang --workload dsv4 is accepted with its steps (no precompile); all done: nothing runs."""
    (places / "out").mkdir()
    steps = ["seeded", "warmrun", "pack", "packed", "nospec"]
    (places / "out" / "first-start.json").write_text(json.dumps({"engine": "sglang", "done": steps}))
    done = gpu(places, "--engine", "sglang", "--workload", "dsv4", "--steps", ",".join(steps))
    assert done.returncode == 0 and "nospec: done in an earlier run" in done.stdout, done.stderr


# -- dsv4_device.sh -----------------------------------------------------------------------------------------------


def device(*argv: str):
    return subprocess.run(["bash", str(SCRIPTS / "dsv4_device.sh"), *argv], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)  # fmt: skip


def names(text: str) -> set[str]:
    return {line.split("==", 1)[0].lower() for line in text.splitlines() if "==" in line and line[:1] not in (" ", "#")}


def test_dsv4_device_sglang_set_is_the_pinned_one_less_the_device_and_what_dsv4_never_imports():
    out = device("reqs", "sglang")
    assert out.returncode == 0, out.stderr
    got = names(out.stdout)
    pinned = names((REPO_ROOT / "constraints/sglang/py3.12-linux-amd64.txt").read_text())
    needed = {"sglang-kernel", "sgl-deep-gemm", "flashinfer-python", "tilelang", "z3-solver", "apache-tvm-ffi",
              "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13", "nvidia-cutlass-dsl-libs-base", "flash-attn-4",
              "humming-kernels", "quack-kernels", "xgrammar", "transformers", "cuda-toolkit"}  # fmt: skip
    assert needed <= got, needed - got
    device_has = {"torch", "torchvision", "torchaudio", "triton", "numpy", "nvidia-cublas", "nvidia-nccl-cu13",
                  "nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cutlass-dsl-libs-cu12", "tokenspeed-mla",
                  "tokenspeed-triton", "torchcodec"}  # fmt: skip
    skipped = {"pyarrow", "pandas", "scipy", "numba", "llvmlite", "nvidia-mathdx"}
    assert not got & (device_has | skipped), got & (device_has | skipped)
    script = (SCRIPTS / "dsv4_device.sh").read_text()
    listed = set(script.split('DEVICE_HAS="', 1)[1].split('"', 1)[0].split())
    assert device_has <= listed and set(script.split('SG_SKIP="', 1)[1].split('"', 1)[0].split()) == skipped
    assert got == pinned - listed - skipped  # nothing else is dropped
    assert got <= pinned and "sglang" not in got  # the engine's own wheel comes from the precompiled file
    hashes = [line for line in out.stdout.splitlines() if "--hash=sha256:" in line]
    assert len(hashes) >= len(got)  # every requirement keeps its hashes (pip download --require-hashes)


def test_dsv4_device_vllm_set_is_unchanged_by_the_engine_argument():
    assert device("reqs").stdout == device("reqs", "vllm").stdout != ""
    assert "vllm-dspark" not in device("reqs", "sglang").stdout


@pytest.mark.parametrize(
    "argv,said",
    [
        (["reqs", "tgi"], "dsv4_device.sh: engine tgi: give vllm or sglang"),
        ([], "usage: dsv4_device.sh"),
        (["bogus"], "usage: dsv4_device.sh"),
    ],
)
def test_dsv4_device_refusals_are_one_line_exit_2(argv, said):
    out = device(*argv)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1 and said in out.stderr, out


def test_dsv4_device_refuses_an_engine_other_than_the_one_packed(tmp_path):
    (tmp_path / "ENGINE").write_text("vllm\n")
    for argv in (["install", str(tmp_path), "sglang"], ["run", str(tmp_path), "seeded", "sglang"]):
        out = device(*argv)
        assert (
            out.returncode == 2 and out.stderr == f"dsv4_device.sh: {tmp_path} holds the vllm parts, not sglang's\n"
        ), out
    assert os.listdir(tmp_path) == ["ENGINE"]


@pytest.mark.parametrize("which", ["out", "work"])
def test_first_start_refuses_an_out_or_work_below_a_file_and_makes_nothing(places, which):
    """hostile-45: --out FILE/x or --work FILE/x passed the checks and ended in a NotADirectoryError traceback
    (exit 1) when the script made the folder, with --out already made when --work failed."""
    (places / "file").write_text("x")
    argv = (
        {"out": str(places / "file" / "x"), "work": str(places / "work")}
        if which == "out"
        else {"out": str(places / "out"), "work": str(places / "file" / "x")}
    )
    out = run("first_start_gpu.py", "--engine", "vllm", "--model", str(places / "model"), "--spec",
              str(places / "spec.json"), "--out", argv["out"], "--work", argv["work"])  # fmt: skip
    refused(out, f"--{which} {places / 'file' / 'x'}", "first_start_gpu.py")
    assert not (places / "out").exists() and not (places / "work").exists()
