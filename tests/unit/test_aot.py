"""Ahead-of-time kernels and JIT recordings: the recipe fields, the recordings' checks, and the in-image
tools (aot_build, servebuild_cache) run here on their real code paths. The engines' own builders run in
the engine images (tests/integration/test_engine_images.py); here a builder is a small module written
into tmp_path, because SGLang and a CUDA compiler are not on this host."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import sys

import pytest
import yaml

from servebuild import TOOLS_DIR
from servebuild.engines import KINDS
from servebuild.errors import RecipeError
from servebuild.recipe.load import load_recipe
from servebuild.render.aot import aot_kernels
from support import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tests" / "image"))
import cache_paths  # noqa: E402  (the smoke suite's resolver table)


def sglang_recipe(tmp_path, **aot):
    """sglang-native-fp8 (with its chain) in tmp_path with `aot` replaced."""
    for name in ("torch-cu130", "sglang-native-fp8"):
        (tmp_path / f"{name}.yaml").write_text((REPO_ROOT / "recipes" / f"{name}.yaml").read_text())
    data = yaml.safe_load((tmp_path / "sglang-native-fp8.yaml").read_text())
    data["name"] = "a"
    data["aot"] = aot
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(path, root=REPO_ROOT) -> str:
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path), root)
    assert "\n" not in str(info.value) and info.value.exit_code == 2
    return str(info.value)


def test_every_cache_variable_of_every_kind_is_proven_by_a_resolver():
    covered = {v for _, variables in cache_paths.RESOLVERS.values() for v in variables}
    for kind in KINDS.values():
        cache_vars = {k for k, v in kind.runtime_env().items() if v.startswith("/cache")}
        assert cache_vars - covered == set(), kind.name
        assert set(kind.resolved_cache_paths()) <= set(cache_paths.RESOLVERS), kind.name
    sglang = KINDS["sglang"].runtime_env()
    assert sglang["SGLANG_CACHE_DIR"] == "/cache/sglang" and sglang["SGLANG_DG_CACHE_DIR"] == "/cache/deep_gemm"
    assert sglang["HF_HOME"] == "/cache/huggingface" and KINDS["vllm"].runtime_env()["VLLM_CACHE_ROOT"] == "/cache/vllm"


@pytest.mark.parametrize(
    "kernel,words",
    [
        ({"jit": "cutlass", "builder": "sglang.jit_kernel.x:_jit_y"}, "aot.kernels.0.jit: 'cutlass' is not a JIT kind"),
        ({"jit": "tvm-ffi", "builder": "os:system"}, "a tvm-ffi builder lives under sglang.jit_kernel."),
        ({"jit": "tvm-ffi", "builder": "sglang.jit_kernel.x:_jit_y; rm -rf /"}, "not a builder module:function"),
        ({"jit": "tvm-ffi", "builder": "sglang.jit_kernel.x:_jit_y", "args": [[1, 2]]}, "aot.kernels.0.args"),
        ({"jit": "tvm-ffi", "builder": "sglang.jit_kernel.x:_jit_y", "args": ["a b"]}, "an argument of letters"),
    ],
)
def test_a_bad_aot_kernel_is_one_line(tmp_path, kernel, words):
    message = load_error(sglang_recipe(tmp_path, kernels=[kernel]))
    assert words in message and "a.yaml" in message, message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_aot_argument_is_refused_in_the_recipe(tmp_path, value):
    """YAML's .nan and .inf are floats: they reached aot/spec.json as NaN/Infinity, which is not JSON
    (issue 31, trust). Now the recipe is refused in one line naming the file and the field."""
    kernel = {"jit": "tvm-ffi", "builder": "sglang.jit_kernel.x:_jit_y", "args": [7, value]}
    message = load_error(sglang_recipe(tmp_path, kernels=[kernel]))
    assert re.match(
        rf"{re.escape(str(tmp_path / 'a.yaml'))}:\d+: aot\.kernels\.0\.args: argument 1 is not a finite number", message
    ), message


def test_json_the_build_writes_is_strict(tmp_path):
    """spec.json and the manifests (write_json strict=True) are strict JSON: a non-finite number is refused
    rather than written as NaN, which no JSON parser has to accept."""
    from servebuild.fsutil import write_json

    with pytest.raises(ValueError, match="not JSON compliant"):
        write_json(tmp_path / "spec.json", {"kernels": [{"args": [float("nan")]}]}, strict=True)
    assert not (tmp_path / "spec.json").exists()
    write_json(tmp_path / "spec.json", {"kernels": [{"args": [1.5]}]}, strict=True)
    assert json.loads((tmp_path / "spec.json").read_text()) == {"kernels": [{"args": [1.5]}]}


def test_a_recipe_without_a_jit_engine_cannot_declare_kernels(tmp_path):
    data = yaml.safe_load((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())
    data.update(name="t", aot={"kernels": [{"jit": "tvm-ffi", "builder": "sglang.jit_kernel.x:_jit_y"}]})
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    assert "none: the engine compiles nothing while serving" in load_error(tmp_path / "t.yaml")


def recording_line(**over) -> str:
    entry = {
        "v": 1,
        "engine": "sglang",
        "engine_version": "0.5.16",
        "jit": "tvm-ffi",
        "arch": "9.0a",
        "builder": "sglang.jit_kernel.add_constant:_jit_add_constant_module",
        "args": [7],
        "replayable": True,
    }
    entry.update(over)
    return json.dumps(entry)


def recipe_with_recording(tmp_path, *lines: str):
    """sglang-native-fp8 as a project of its own in tmp_path (its files copied), replaying rec.jsonl."""
    (tmp_path / "rec.jsonl").write_text("\n".join(lines) + "\n")
    for folder in ("constraints", "patches"):
        if not (tmp_path / folder).exists():
            shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    for name in ("torch-cu130", "sglang-native-fp8"):
        (tmp_path / f"{name}.yaml").write_text((REPO_ROOT / "recipes" / f"{name}.yaml").read_text())
    data = yaml.safe_load((tmp_path / "sglang-native-fp8.yaml").read_text())
    data.update(name="a", aot={"kernels": [], "recordings": ["rec.jsonl"]})
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return load_recipe(str(tmp_path / "a.yaml"), tmp_path).recipe


@pytest.mark.parametrize(
    "first,second",
    [
        ("rec.jsonl", "rec.jsonl"),
        ("rec.jsonl", "./rec.jsonl"),
        ("./rec.jsonl", "././rec.jsonl"),
        ("d/rec.jsonl", "d/./rec.jsonl"),
        ("d/rec.jsonl", "./d/rec.jsonl/."),
    ],
)
def test_a_recording_listed_twice_under_two_spellings_is_refused(tmp_path, first, second):
    """`recordings: [x, ./x]` named one file twice and passed the duplicate check, which compared the
    strings (issue 31, trust): the check compares normalised paths."""
    recipe_with_recording(tmp_path, recording_line())  # the project: rec.jsonl and the recipes it needs
    (tmp_path / "d").mkdir()
    shutil.copy(tmp_path / "rec.jsonl", tmp_path / "d" / "rec.jsonl")
    data = yaml.safe_load((tmp_path / "a.yaml").read_text())
    data["aot"]["recordings"] = [first, second]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    message = load_error(tmp_path / "a.yaml", tmp_path)
    assert re.match(r"a\.yaml:\d+: aot\.recordings: ", message), message  # shown relative to the project
    assert f"{second!r} is {first!r} again: a recording is listed twice" in message, message


def test_recordings_that_are_different_files_pass_the_duplicate_check(tmp_path):
    recipe_with_recording(tmp_path, recording_line())
    (tmp_path / "d").mkdir()
    shutil.copy(tmp_path / "rec.jsonl", tmp_path / "d" / "rec.jsonl")
    data = yaml.safe_load((tmp_path / "a.yaml").read_text())
    data["aot"]["recordings"] = ["rec.jsonl", "./d/rec.jsonl"]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_recipe(str(tmp_path / "a.yaml"), tmp_path).recipe.aot.recordings == ["rec.jsonl", "./d/rec.jsonl"]


def test_a_recording_path_with_a_parent_segment_is_refused(tmp_path):
    """`d/../rec.jsonl` is rec.jsonl again; a `..` segment is refused outright, before the duplicate check."""
    recipe_with_recording(tmp_path, recording_line())
    (tmp_path / "d").mkdir()
    data = yaml.safe_load((tmp_path / "a.yaml").read_text())
    data["aot"]["recordings"] = ["rec.jsonl", "d/../rec.jsonl"]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    message = load_error(tmp_path / "a.yaml", tmp_path)
    assert "aot.recordings: 'd/../rec.jsonl' is not a file path relative to the project" in message, message


def test_a_recording_replays_its_gpu_free_part(tmp_path):
    triton = recording_line(
        jit="triton",
        kernel="sglang.srt.x:_k",
        specialization='{"name": "_k"}',
        target=["cuda", 90, 32],
        package="triton",
    )
    recipe = recipe_with_recording(
        tmp_path,
        recording_line(),
        recording_line(),
        recording_line(args=["torch.bfloat16"]),
        recording_line(jit="tilelang", replayable=False),
        triton,
        recording_line(builder=None, replayable=False),
    )
    kernels = aot_kernels(recipe, tmp_path)
    assert [(k["jit"], k["args"], k["where"]) for k in kernels] == [
        ("tvm-ffi", [7], "rec.jsonl:1"),
        ("tvm-ffi", ["torch.bfloat16"], "rec.jsonl:3"),
        ("triton", [], "rec.jsonl:5"),
    ]
    assert kernels[2]["target"] == ["cuda", 90, 32]


@pytest.mark.parametrize(
    "over,field,words",
    [
        ({"engine": "vllm"}, "engine", "recorded with engine 'vllm', the recipe builds sglang"),
        ({"engine_version": "0.5.15"}, "engine_version", "recorded with sglang 0.5.15, the recipe builds 0.5.16"),
        ({"arch": "10.0a"}, "arch", "recorded for arch '10.0a'"),
        ({"jit": "cute"}, "jit", "unknown JIT kind 'cute'"),
        (
            {"jit": "triton", "kernel": "m:k", "specialization": "{}", "target": ["cuda", 100, 32]},
            "target",
            "recorded for Triton target",
        ),
        ({"args": [{"a": 1}]}, "args", "is not an int, float, bool or short name"),
        ({"builder": "os:system"}, "builder", "is not an SGLang jit_kernel builder"),
        ({"v": 2}, "v", "not a servebuild JIT recording line"),
        ({"v": True}, "v", "not a servebuild JIT recording line"),  # True == 1 in Python: it passed
        ({"v": 1.0}, "v", "not a servebuild JIT recording line"),  # 1.0 == 1 too
        ({"v": "1"}, "v", "not a servebuild JIT recording line"),
    ],
)
def test_a_bad_recording_line_is_one_line_with_its_place(tmp_path, over, field, words):
    recipe = recipe_with_recording(tmp_path, recording_line(), recording_line(**over))
    with pytest.raises(RecipeError) as info:
        aot_kernels(recipe, tmp_path)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 2
    assert message.startswith(f"rec.jsonl:2: {field}: ") and words in message, message


def test_a_recording_that_is_not_json_names_its_line(tmp_path):
    recipe = recipe_with_recording(tmp_path, recording_line(), "{not json")
    with pytest.raises(RecipeError, match=r"rec.jsonl:2: line: not JSON"):
        aot_kernels(recipe, tmp_path)


@pytest.mark.parametrize(
    "line,field,words",
    [
        (recording_line(arch=["9.0a"]), "arch", "recorded for arch ['9.0a']"),
        (recording_line(arch={"a": 1}), "arch", "recorded for arch"),
        (recording_line().replace('"args": [7]', '"args": [' + "7" * 5000 + "]"), "line", "not JSON"),
        ('{"v": 1, "args": ' + "[" * 100_000 + "]" * 100_000 + "}", "line", "not JSON (nested too deep)"),
        (recording_line().replace('"args": [7]', '"args": [NaN]'), "args", "argument 0 is not a finite number"),
        (
            recording_line().replace('"args": [7]', '"args": [7, -Infinity]'),
            "args",
            "argument 1 is not a finite number",
        ),
        ("[" * 100_000, "line", "not JSON"),
    ],
)
def test_a_hostile_recording_line_is_one_line_not_a_traceback(tmp_path, line, field, words):
    recipe = recipe_with_recording(tmp_path, recording_line(), line)
    with pytest.raises(RecipeError) as info:
        aot_kernels(recipe, tmp_path)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 2 and len(message) < 1000, message[:2000]
    assert message.startswith(f"rec.jsonl:2: {field}: ") and words in message, message


BUILDER_MODULE = """
import functools


def cache_once(fn):
    memo = {}

    @functools.wraps(fn)
    def wrapper(*args):
        if args not in memo:
            memo[args] = fn(*args)
        return memo[args]
    return wrapper


@cache_once
def _jit_demo_module(constant: int, flag: bool):
    return constant
"""


def run_tool(tmp_path, *args, env=None):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), **(env or {})},
    )


@pytest.mark.parametrize(
    "kernel,words",
    [
        (
            {"builder": "demo_builders:_jit_nope_module", "args": []},
            "demo_builders has no builder _jit_nope_module (it has: _jit_demo_module)",
        ),
        (
            {"builder": "no_such_module:_jit_x", "args": []},
            "module no_such_module cannot be imported: ModuleNotFoundError",
        ),
        (
            {"builder": "demo_builders:_jit_demo_module", "args": ["five", True]},
            "argument constant is 'five' (str); _jit_demo_module wants int",
        ),
        (
            {"builder": "demo_builders:_jit_demo_module", "args": [True, True]},
            "argument constant is True (bool); _jit_demo_module wants int",
        ),
        (
            {"builder": "demo_builders:_jit_demo_module", "args": [5]},
            "do not fit _jit_demo_module(constant: int, flag: bool)",
        ),
    ],
)
def test_aot_build_refuses_a_bad_builder_in_one_servebuild_line(tmp_path, kernel, words):
    """tools/aot_build.py as the aot stage runs it: the one `servebuild: ` line the build surfaces."""
    (tmp_path / "demo_builders.py").write_text(BUILDER_MODULE)
    spec = {
        "recipe": "r",
        "arch_list": "9.0a",
        "max_bytes": 1 << 30,
        "kernels": [{"where": "aot.kernels[0]", "jit": "tvm-ffi", **kernel}],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = run_tool(
        tmp_path, str(TOOLS_DIR / "aot_build.py"), "--spec", "spec.json", "--cache", "cache", "--seed", "seed"
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("servebuild: ")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith(f"servebuild: recipe r, aot.kernels[0] (tvm-ffi {kernel['builder']}): ")
    assert words in lines[0], lines[0]
    assert not (tmp_path / "seed" / "aot.json").exists()


def test_the_cache_tool_seeds_only_what_is_missing_and_packs_only_what_a_run_added(tmp_path):
    seed, cache = tmp_path / "seed" / "cache", tmp_path / "cache"
    (seed / "tvm-ffi" / "mod_a").mkdir(parents=True)
    (seed / "tvm-ffi" / "mod_a" / "a.so").write_bytes(b"seeded")
    (seed / "tvm-ffi" / "mod_b").mkdir()
    (seed / "tvm-ffi" / "mod_b" / "b.so").write_bytes(b"seeded b")
    os.utime(seed / "tvm-ffi" / "mod_a" / "a.so", (946684800, 946684800))
    (cache / "tvm-ffi" / "mod_b").mkdir(parents=True)
    (cache / "tvm-ffi" / "mod_b" / "b.so").write_bytes(b"the volume's own")
    tool = str(TOOLS_DIR / "servebuild_cache.py")
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    env = {"SERVEBUILD_MANIFEST": str(manifest)}
    proc = run_tool(tmp_path, tool, "seed", "--cache", str(cache), "--seed", str(tmp_path / "seed"), env=env)
    assert proc.returncode == 0 and "seeded 1 files" in proc.stderr, proc.stderr
    assert (cache / "tvm-ffi" / "mod_a" / "a.so").read_bytes() == b"seeded"
    assert os.stat(cache / "tvm-ffi" / "mod_a" / "a.so").st_mtime == 946684800  # ninja compares mtimes
    assert (cache / "tvm-ffi" / "mod_b" / "b.so").read_bytes() == b"the volume's own"  # never overwritten
    origin = json.loads((cache / ".servebuild" / "origin.json").read_text())
    assert len(origin["manifest_sha256"]) == 64
    listing = tmp_path / "before.json"
    before = json.loads(
        run_tool(tmp_path, tool, "census", "--cache", str(cache), "--listing", str(listing), env=env).stdout
    )
    assert before["kinds"] == {"tvm-ffi": 2} and before["origin"] == origin
    (cache / "triton" / "k1").mkdir(parents=True)
    (cache / "triton" / "k1" / "k.cubin").write_bytes(b"x" * 100)
    os.utime(cache / "tvm-ffi" / "mod_a" / "a.so", (946684900, 946684900))  # rebuilt in place: same count
    (cache / "tvm-ffi" / "mod_a" / "lock").write_bytes(b"")  # a lock file, touched at every load: no compile
    after = json.loads(
        run_tool(tmp_path, tool, "census", "--cache", str(cache), "--since", str(listing), env=env).stdout
    )
    assert after["kinds"] == {"tvm-ffi": 3, "triton": 1}
    assert after["changed"] == {"triton": 1, "tvm-ffi": 1}  # a file count alone would miss the rebuild
    out = tmp_path / "new.tar"
    proc = run_tool(tmp_path, tool, "pack", "--cache", str(cache), "--seed", str(tmp_path / "seed"), "--out", str(out))
    # b.so's path is in the seed: the image already answers it, the layer must not shadow it
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"files": 1, "bytes": 100}
    with tarfile.open(out) as tar:
        assert tar.getnames() == ["triton/k1/k.cubin"] and tar.getmember("triton/k1/k.cubin").uid == 0
    from servebuild.check.warm import unpack_cache  # what warm does with the pack it copies out

    unpack_cache(out, tmp_path / "layer")
    assert (tmp_path / "layer" / "triton" / "k1" / "k.cubin").read_bytes() == b"x" * 100
    proc = run_tool(
        tmp_path,
        tool,
        "pack",
        "--cache",
        str(cache),
        "--seed",
        str(tmp_path / "seed"),
        "--out",
        str(out),
        "--max-bytes",
        "10",
    )
    assert proc.returncode == 3 and "above the limit 10" in proc.stderr


def test_bisect_rows_carry_the_images_compile_count():
    from servebuild.check import bisect

    out = 'log\n{"ttft_ms": 12}\nSERVEBUILD-CACHE {"changed": {"triton": 3, "tvm-ffi": 8}, "files": 40}\n'
    assert bisect.parse_metrics(out) == {"ttft_ms": 12, "jit_compiled_files": 11}
    assert bisect.parse_metrics('SERVEBUILD-CACHE {"changed": {}}\n') == {"jit_compiled_files": 0}
    assert bisect.parse_metrics("no json\n") == {}  # an image without the cache tool: no such metric
    script = bisect.Probe("run-it").script()
    assert script.index("census --listing") < script.index("run-it") < script.index("census --since")
    assert script.rstrip().endswith("exit $rc")


@pytest.mark.parametrize(
    "value,expected", [("1000", 1000), ("16G", 16 << 30), ("512MiB", 512 << 20), ("17179869184", 16 << 30)]
)
def test_warm_max_bytes_takes_a_size(value, expected):
    from servebuild.cli.warm import byte_count

    assert byte_count(value) == expected


@pytest.mark.parametrize("value", ["0", "-5", "1.5G", "16T", "lots", "1" * 16])
def test_warm_max_bytes_refuses_what_is_not_a_size(value):
    from servebuild.cli.warm import byte_count
    from servebuild.errors import InputError

    with pytest.raises(InputError, match="--max-bytes: .* is not a size in bytes"):
        byte_count(value)


def test_warm_takes_only_plain_files_from_the_containers_pack(tmp_path):
    """The pack comes out of a container that ran the user's command: a link or `..` is refused."""
    import io
    from servebuild.check.warm import unpack_cache
    from servebuild.errors import IntegrityError

    def tar_with(*members):
        path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.tar"
        with tarfile.open(path, "w") as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return path

    good = tarfile.TarInfo("triton/k/k.cubin")
    good.size, good.mtime, good.mode = 3, 946684800, 0o644
    dest = tmp_path / "out"
    unpack_cache(tar_with((good, b"abc")), dest)
    assert (dest / "triton/k/k.cubin").read_bytes() == b"abc"
    assert os.stat(dest / "triton/k/k.cubin").st_mtime == 946684800
    link = tarfile.TarInfo("triton/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    up = tarfile.TarInfo("../../escape")
    up.size = 1
    for bad in ((link, None), (up, b"x")):
        with pytest.raises(IntegrityError, match="not a plain file under /cache"):
            unpack_cache(tar_with(bad), tmp_path / "bad")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "bad").exists()
