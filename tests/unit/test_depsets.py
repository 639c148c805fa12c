"""Hashed requirement sets from declared inputs (servebuild.depsets) and the CUDA compiler check.

No network and no Docker, except the test marked `network`, which runs the real resolver.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from servebuild.lock import depsets
from servebuild.recipe.requirements import check_hashed_requirements, cuda_compiler_problem, parse_pins
from servebuild.errors import InputError, RecipeError
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT, copy_real
from unit.minimal_recipe import BASE, merge

CONSTRAINTS = REPO_ROOT / "constraints"
FIXTURES = REPO_ROOT / "tests" / "fixtures"
STACKS = depsets.stacks(REPO_ROOT)
SETS = sorted(CONSTRAINTS.rglob("*.txt"))


def test_every_stack_has_inputs():
    assert STACKS == ["sglang", "torch-cu130", "vllm-dspark"]
    assert {p.parent.name for p in SETS} == set(STACKS)


# ---------------------------------------------------------------------------------------------
# the CUDA compiler check


@pytest.mark.parametrize("path", SETS, ids=lambda p: str(p.relative_to(CONSTRAINTS)))
def test_committed_sets_are_hashed_and_cuda_13_0(path):
    assert check_hashed_requirements(path) is None
    pins = parse_pins(path)
    assert cuda_compiler_problem(pins) is None
    if "nvidia-cuda-nvcc" in pins:
        assert pins["nvidia-cuda-nvcc"] == "13.0.88"
        assert pins["nvidia-cuda-crt"] == pins["nvidia-nvvm"] == "13.0.88"
        assert pins["nvidia-cuda-cccl"] == "13.0.85"


@pytest.mark.parametrize("stack", ["sglang", "vllm-dspark"])
def test_engine_sets_carry_the_13_0_compiler(stack):
    """The engines compile CUDA at serve time: nvcc, crt, nvvm, cccl and cudart are in every set."""
    for target in depsets.load_stack(REPO_ROOT, stack).targets:
        pins = parse_pins(CONSTRAINTS / stack / depsets.set_name(target))
        assert {n: pins.get(n) for n in ("cuda-toolkit", "nvidia-cuda-nvcc", "nvidia-cuda-runtime")} == {
            "cuda-toolkit": "13.0.2",
            "nvidia-cuda-nvcc": "13.0.88",
            "nvidia-cuda-runtime": "13.0.96",
        }


def test_old_sglang_set_fails_naming_the_packages():
    problem = cuda_compiler_problem(parse_pins(FIXTURES / "old-sglang-set.txt"))
    assert problem is not None and "\n" not in problem
    for pin in (
        "nvidia-cuda-nvcc==13.5.37",
        "nvidia-cuda-crt==13.5.37",
        "nvidia-nvvm==13.5.37",
        "nvidia-cuda-cccl==13.3.5.0.6",
    ):
        assert pin in problem
    assert "cuda-toolkit==" not in problem and "nvidia-cuda-runtime" not in problem  # those are 13.0


@pytest.mark.parametrize(
    "pins, bad",
    [
        ({"nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-cccl": "13.0.85", "numpy": "2.3.5"}, None),
        ({"nvidia-cuda-nvcc-cu12": "12.8.93"}, "nvidia-cuda-nvcc-cu12==12.8.93"),
        ({"nvidia_cuda_nvrtc": "13.3.73"}, "nvidia_cuda_nvrtc==13.3.73"),
        ({"cuda-toolkit": "13.1.0"}, "cuda-toolkit==13.1.0"),
        ({"nvidia-nvjitlink": "13.0.88", "nvidia-cuda-crt": "13.10.1"}, "nvidia-cuda-crt==13.10.1"),
        ({"nvidia-cuda-nvdisasm": "13.3.73", "cuda-bindings": "13.3.1"}, None),  # tools and bindings: not compilers
    ],
)
def test_cuda_compiler_problem(pins, bad):
    problem = cuda_compiler_problem(pins)
    if bad is None:
        assert problem is None
    else:
        assert bad in problem


def test_cuda_compiler_problem_other_line():
    assert cuda_compiler_problem({"nvidia-cuda-nvcc": "12.9.86"}, cuda="12.9") is None
    assert "13.0.88" in cuda_compiler_problem({"nvidia-cuda-nvcc": "13.0.88"}, cuda="12.9")


# ---------------------------------------------------------------------------------------------
# headers: every file records its inputs


def _expected_files(inputs):
    for target in inputs.targets:
        yield depsets.set_name(target), target, "set"
        if inputs.engine:
            yield depsets.precompiled_name(target), target, "precompiled"
    if inputs.sdist:
        yield depsets.SDIST_NAME, None, "sdist"


@pytest.mark.parametrize("stack", STACKS)
def test_headers_match_inputs(stack):
    inputs = depsets.load_stack(REPO_ROOT, stack)
    expected = list(_expected_files(inputs))
    assert sorted(p.name for p in (CONSTRAINTS / stack).glob("*.txt")) == sorted(n for n, _, _ in expected)
    for name, target, kind in expected:
        lines = depsets.header_lines(CONSTRAINTS / stack / name)
        want = depsets.header(inputs, target, kind).splitlines()
        assert lines[: len(want)] == want, name
        assert f"# exclude-newer: {inputs.exclude_newer};" in "\n".join(lines)
        assert f"invoke deps --stack {stack}" in lines[1]
        if target is not None:
            assert f"--python-version {target.python} --python-platform {target.uv_platform}" in "\n".join(lines)


def test_declared_dates_and_engines():
    sglang = depsets.load_stack(REPO_ROOT, "sglang")
    vllm = depsets.load_stack(REPO_ROOT, "vllm-dspark")
    torch = depsets.load_stack(REPO_ROOT, "torch-cu130")
    assert (sglang.exclude_newer, sglang.engine, sglang.engine_version) == ("2026-07-26T00:00:00Z", "sglang", "0.5.16")
    assert (vllm.exclude_newer, vllm.engine, vllm.engine_version) == ("2026-07-28T00:00:00Z", "vllm", "0.26.0")
    assert torch.engine is None and torch.exclude_newer == "2026-03-24T00:00:00Z"
    for inputs in (sglang, vllm):
        assert "cuda-toolkit[nvcc,crt,nvvm,cccl,cudart]==13.0.2" in inputs.requirements
        assert {t.name for t in inputs.targets} == {
            "py3.12-linux-arm64",
            "py3.12-linux-amd64",
            "py3.11-linux-arm64",
            "py3.11-linux-amd64",
        }
    assert "nvidia-cuda-nvcc==13.0.*" in sglang.constraints


def test_precompiled_files_hold_only_the_engine():
    for stack, engine, version in (("sglang", "sglang", "0.5.16"), ("vllm-dspark", "vllm", "0.26.0")):
        for path in (CONSTRAINTS / stack).glob("precompiled-*.txt"):
            assert parse_pins(path) == {engine: version}
        for path in (CONSTRAINTS / stack).glob("py3.*.txt"):
            assert engine not in parse_pins(path)


def test_vllm_sdist_is_hash_pinned():
    path = CONSTRAINTS / "vllm-dspark" / "sdist.txt"
    assert check_hashed_requirements(path) is None
    assert re.search(
        r"^vllm==0\.26\.0 --hash=sha256:23e9fa19d7e20ce7dcc1c074d41503e2116d23f19e688f5d5ea91b741f958502$",
        path.read_text(),
        re.M,
    )


# ---------------------------------------------------------------------------------------------
# inputs validation

GOOD = {
    "stack": "demo",
    "engine": "sglang",
    "requirements": ["sglang==0.5.16", "cuda-toolkit[nvcc,crt]==13.0.2", "cmake>=3.26.1", "ninja"],
    "cuda": "13.0",
    "exclude_newer": "2026-07-26T00:00:00Z",
    "index_url": "https://pypi.org/simple",
    "uv": "0.13.9",
    "targets": [{"python": "3.12", "platform": "linux/amd64", "manylinux": "2_34"}],
}


def _write_inputs(root: Path, data, stack="demo") -> Path:
    path = root / "constraints" / stack / "inputs.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def test_good_inputs_load(tmp_path):
    inputs = depsets.load_inputs(_write_inputs(tmp_path, GOOD), tmp_path)
    assert inputs.display == "constraints/demo/inputs.yaml"
    assert inputs.targets[0].name == "py3.12-linux-amd64"
    assert inputs.targets[0].uv_platform == "x86_64-manylinux_2_34"


def _mutate(**changes):
    data = {k: v for k, v in GOOD.items()}
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return data


BAD = [
    ("missing", _mutate(exclude_newer=...), "exclude_newer", "missing"),
    ("unknown", _mutate(extra_index_url="https://x"), "extra_index_url", "unknown field"),
    ("stack", _mutate(stack="other"), "stack", "must name the directory"),
    ("requirements-empty", _mutate(requirements=[]), "requirements", "non-empty"),
    (
        "requirement-garbage",
        _mutate(requirements=["sglang==0.5.16", "not a req!"]),
        "requirements[1]",
        "not a requirement",
    ),
    ("requirement-twice", _mutate(requirements=["sglang==0.5.16", "SGLang>=0.5"]), "requirements[1]", "listed twice"),
    ("engine-missing", _mutate(engine="vllm"), "engine", "not one of the requirements"),
    ("engine-unpinned", _mutate(requirements=["sglang>=0.5.16"]), "requirements", "must be pinned with =="),
    ("sdist-no-engine", _mutate(engine=None, sdist=True), "sdist", "needs an engine"),
    ("cuda-float", _mutate(cuda=13.0), "cuda", "quoted major.minor"),
    ("date-format", _mutate(exclude_newer="2026-07-26"), "exclude_newer", "UTC timestamp"),
    ("date-unreal", _mutate(exclude_newer="2026-02-30T00:00:00Z"), "exclude_newer", "not a real date"),
    ("index", _mutate(index_url="pypi.org"), "index_url", "http(s) URL"),
    ("uv", _mutate(uv="latest"), "uv", "uv version"),
    ("targets-empty", _mutate(targets=[]), "targets", "non-empty"),
    (
        "python-float",
        _mutate(targets=[{"python": 3.1, "platform": "linux/amd64", "manylinux": "2_34"}]),
        "targets[0].python",
        "quoted version",
    ),
    (
        "platform",
        _mutate(targets=[{"python": "3.12", "platform": "linux/ppc64le", "manylinux": "2_34"}]),
        "targets[0].platform",
        "must be one of",
    ),
    (
        "manylinux",
        _mutate(targets=[{"python": "3.12", "platform": "linux/amd64", "manylinux": 2.28}]),
        "targets[0].manylinux",
        "glibc tag",
    ),
    ("target-keys", _mutate(targets=[{"python": "3.12", "platform": "linux/amd64"}]), "targets[0]", "exactly"),
    ("target-twice", _mutate(targets=[GOOD["targets"][0], GOOD["targets"][0]]), "targets[1]", "listed twice"),
    (
        "absent",
        _mutate(absent=[{"requirement": "flashinfer-cubin>=0.6", "reason": "x"}]),
        "absent[0].requirement",
        "name==version",
    ),
    (
        "absent-reason",
        _mutate(absent=[{"requirement": "flashinfer-cubin==0.6.14", "reason": " "}]),
        "absent[0].reason",
        "must say why",
    ),
    ("not-mapping", "- just\n- a list\n", "(top level)", "mapping"),
]


@pytest.mark.parametrize("data, field, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inputs_are_one_line_errors(tmp_path, data, field, words):
    path = _write_inputs(tmp_path, data)
    with pytest.raises(RecipeError) as err:
        depsets.load_inputs(path, tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"constraints/demo/inputs.yaml: {field}: "), message
    assert words in message


def test_unquoted_date_is_refused(tmp_path):
    text = yaml.safe_dump(_mutate(exclude_newer=...), sort_keys=False) + "exclude_newer: 2026-07-26T00:00:00Z\n"
    with pytest.raises(RecipeError, match=r"inputs.yaml: exclude_newer: quote the date"):
        depsets.load_inputs(_write_inputs(tmp_path, text), tmp_path)


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(RecipeError, match=r"^constraints/demo/inputs.yaml:\d+: invalid YAML"):
        depsets.load_inputs(_write_inputs(tmp_path, "stack: demo\nengine: x\nrequirements: [a\n"), tmp_path)


def test_unknown_stack_and_target(tmp_path):
    with pytest.raises(InputError, match=r"^--stack: unknown stack 'nope' \(stacks with an inputs.yaml: sglang"):
        depsets.load_stack(REPO_ROOT, "nope")
    with pytest.raises(InputError, match=r"^--target: 'py3.9-linux-amd64' is not a target of sglang"):
        depsets.select_targets(depsets.load_stack(REPO_ROOT, "sglang"), ["py3.9-linux-amd64"])


# ---------------------------------------------------------------------------------------------
# generating, with a stand-in resolver that prints a recorded resolve (no network)


def _body(path: Path) -> str:
    return "".join(line + "\n" for line in path.read_text().splitlines()[len(depsets.header_lines(path)) :])


def _fake_uv(tmp_path: Path, output: str, version: str = "0.13.9") -> str:
    canned = tmp_path / "resolve.txt"
    canned.write_text(output)
    uv = tmp_path / "uv"
    uv.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "uv {version} (fake)"; exit 0; fi
        [ -f requirements.in ] && [ -f constraints.txt ] || exit 3
        cat '{canned}'
        """)
    )
    uv.chmod(0o755)
    return str(uv)


def _sglang_root(tmp_path: Path) -> Path:
    """A project with the real sglang inputs minus `absent` (whose check needs the index)."""
    root = tmp_path / "project"
    data = yaml.safe_load((CONSTRAINTS / "sglang" / "inputs.yaml").read_text())
    data.pop("absent", None)
    _write_inputs(root, data, stack="sglang")
    return root


def _committed_resolve(target: str) -> str:
    """The committed sglang set and precompiled file of one target, put back together as uv printed them."""
    rest = _body(CONSTRAINTS / "sglang" / f"py{target}.txt")
    engine = _body(CONSTRAINTS / "sglang" / f"precompiled-py{target}.txt")
    return rest + engine


def test_generate_splits_the_engine_and_is_deterministic(tmp_path):
    root = _sglang_root(tmp_path)
    uv = _fake_uv(tmp_path, _committed_resolve("3.12-linux-amd64"))
    out = [depsets.generate(root, "sglang", ["py3.12-linux-amd64"], out_dir=tmp_path / run, uv=uv) for run in "ab"]
    assert [p.name for p in out[0]] == ["precompiled-py3.12-linux-amd64.txt", "py3.12-linux-amd64.txt"]
    for a, b in zip(*out):
        assert a.read_bytes() == b.read_bytes()
    for path in out[0]:
        assert _body(path) == _body(CONSTRAINTS / "sglang" / path.name)
        assert check_hashed_requirements(path) is None
    assert parse_pins(out[0][0]) == {"sglang": "0.5.16"}


def test_generate_refuses_a_set_with_the_13_5_compiler(tmp_path):
    root = _sglang_root(tmp_path)
    fixture = _body(FIXTURES / "old-sglang-set.txt") + _body(
        CONSTRAINTS / "sglang" / "precompiled-py3.12-linux-amd64.txt"
    )
    uv = _fake_uv(tmp_path, fixture)
    out = tmp_path / "out"
    with pytest.raises(RecipeError) as err:
        depsets.generate(root, "sglang", ["py3.12-linux-amd64"], out_dir=out, uv=uv)
    message = str(err.value)
    assert message.startswith("constraints/sglang/inputs.yaml: requirements: refusing to write py3.12-linux-amd64.txt")
    assert "nvidia-cuda-nvcc==13.5.37" in message and "nvidia-cuda-cccl==13.3.5.0.6" in message
    assert not out.exists() or not any(out.iterdir())


def test_generate_refuses_a_resolve_without_the_engine(tmp_path):
    root = _sglang_root(tmp_path)
    uv = _fake_uv(tmp_path, _body(FIXTURES / "old-sglang-set.txt"))
    with pytest.raises(RecipeError, match=r"engine: the resolve holds 0 entries of sglang"):
        depsets.generate(root, "sglang", ["py3.12-linux-amd64"], out_dir=tmp_path / "out", uv=uv)


def test_generate_needs_the_declared_uv(tmp_path):
    root = _sglang_root(tmp_path)
    uv = _fake_uv(tmp_path, "", version="0.9.0")
    with pytest.raises(RecipeError, match=r"inputs.yaml: uv: the inputs need uv 0.13.9, found uv 0.9.0"):
        depsets.generate(root, "sglang", out_dir=tmp_path / "out", uv=uv)


def test_vllm_sets_carry_the_sdist_build_requirements():
    """v0.26.0's setup.py imports setuptools_rust, its pyproject and requirements/build/cuda.txt name
    cmake, ninja, setuptools-scm; with --no-build-isolation nothing else installs them."""
    for path in sorted((REPO_ROOT / "constraints" / "vllm-dspark").glob("py3.*-linux-*.txt")):
        pins = parse_pins(path)
        for name in ("setuptools-rust", "cmake", "ninja", "setuptools-scm", "build", "wheel", "packaging"):
            assert name in pins, f"{path.name} lacks {name}"


def test_a_set_with_a_cuda_compiler_outside_13_0_is_refused(project):
    """The old sglang set (nvcc/crt/nvvm 13.5.37 via humming-kernels) cannot be named by a CUDA 13.0 recipe."""
    copy_real(project, "tests/fixtures/old-sglang-set.txt")
    edits = {"constraints": {"linux/amd64": "tests/fixtures/old-sglang-set.txt"}, "expect": {"cuda": "13.0"}}
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edits)))
    with pytest.raises(
        RecipeError,
        match=r"constraints.linux/amd64: .*CUDA compiler wheels outside CUDA 13.0.x: "
        r".*nvidia-cuda-nvcc==13.5.37",
    ):
        load_recipe("hostile", project)
