"""Every recipe field's bad values, at unit level: loading and planning only (no engine, no
subprocess); each is one placed line. A few of these also run through the CLI in
tests/integration/test_bad_input.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from servebuild.errors import ServebuildError
from servebuild.plan.make import BuildOptions, make_plan
from support import REPO_ROOT, one_printable_line
from unit.minimal_recipe import load_with

BASE = yaml.safe_load((REPO_ROOT / "recipes/sglang-native-fp8.yaml").read_text())
PARENT = yaml.safe_load((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())


def standalone() -> dict:
    """A full recipe (the sglang one, parent fields folded in) to break one field at a time."""
    data = copy.deepcopy(PARENT)
    for key, value in BASE.items():
        data[key] = copy.deepcopy(value)
    data.pop("extends")
    data["name"] = "bad"
    return data


def set_path(data: dict, path: str, value) -> dict:
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


DELETE = object()
PROFILE = "launch.profiles.sglang-native-fp8"
ARGS = PROFILE + ".args"


def args_with(*pairs):
    args = list(BASE["launch"]["profiles"]["sglang-native-fp8"]["args"])
    for flag, value in pairs:
        i = args.index(flag)
        args[i + 1] = value
    return args


# (id, edits, expected fragments of the one line)
CASES = [
    ("unknown-field", [("colour", "red")], ["colour", "unknown field"]),
    ("unknown-nested-field", [("engine.source.branch", "main")], ["engine.source.branch", "unknown field"]),
    ("wrong-type-platforms", [("platforms", "linux/arm64")], ["platforms", "valid list"]),
    ("wrong-type-python", [("python", 3.12)], ["python", "valid string"]),
    ("short-sha", [("engine.source.commit", "fdebc938")], ["engine.source.commit", "short or malformed"]),
    ("non-hex-sha", [("engine.source.commit", "z" * 40)], ["engine.source.commit", "not a full 40-hex"]),
    (
        "patch-short-commit",
        [("engine.source.patches.0.commit", "ec741e41")],
        ["engine.source.patches.0.commit", "short or malformed"],
    ),
    ("missing-bases", [("bases", DELETE)], ["bases", "required field is missing"]),
    ("missing-runtime-base", [("bases.runtime", DELETE)], ["bases.runtime", "required"]),
    (
        "base-ref-with-digest",
        [("bases.build.ref", "nvidia/cuda@sha256:" + "a" * 64)],
        ["bases.build.ref", "put a digest in `digest`"],
    ),
    ("bad-digest", [("bases.build.digest", "sha256:1234")], ["bases.build.digest", "sha256:<64 hex>"]),
    ("bad-platform", [("platforms", ["linux/riscv64"])], ["platforms", "unknown platform 'linux/riscv64'"]),
    ("duplicate-platform", [("platforms", ["linux/arm64", "linux/arm64"])], ["platforms", "listed twice"]),
    (
        "no-constraints-for-platform",
        [("constraints", {"linux/arm64": "constraints/sglang/py3.12-linux-arm64.txt"})],
        ["no hashed requirement set for linux/amd64"],
    ),
    (
        "constraints-file-missing",
        [("constraints.linux/arm64", "constraints/nope.txt")],
        ["constraints.linux/arm64", "does not exist"],
    ),
    (
        "constraints-not-hashed",
        [("constraints.linux/arm64", "tests/fixtures/unhashed.txt")],
        ["constraints.linux/arm64", "has no --hash=sha256"],
    ),
    ("bad-arch-list", [("cuda_arch_list", "sm90")], ["cuda_arch_list", "not a TORCH_CUDA_ARCH_LIST"]),
    ("bad-python", [("python", "py3")], ["python", "3.N"]),
    ("bad-url", [("engine.source.url", "github.com/sgl-project/sglang")], ["engine.source.url", "not a git URL"]),
    ("bad-install", [("engine.install", "magic")], ["engine.install", "pip-source"]),
    (
        "patch-sha256-mismatch",
        [("engine.source.patches.3.sha256", "0" * 64)],
        ["engine.source.patches.3.sha256", "patch sha256 mismatch for sglang-adaptive-prefill"],
    ),
    (
        "patch-file-missing",
        [("engine.source.patches.3.file", "patches/nope.patch")],
        ["engine.source.patches.3.file", "does not exist"],
    ),
    (
        "patch-both-kinds",
        [("engine.source.patches.1.file", "patches/sglang-adaptive-prefill.patch")],
        ["engine.source.patches.1", "exactly one"],
    ),
    (
        "duplicate-patch",
        [
            ("engine.source.patches.2.file", "patches/sglang-dsv4-verify-pad.patch"),
            ("engine.source.patches.2.sha256", "67474d4de89132b1ca62f6066d904fcda6516a22978e5ff32cc8ef4c1db01b58"),
        ],
        ["'sglang-dsv4-shared-expert-fusion-policy' duplicates 'sglang-dsv4-verify-pad'"],
    ),
    (
        "requires-missing",
        [("engine.source.patches.2.requires", ["sglang-pr-99999"])],
        ["requires 'sglang-pr-99999', which is not in the stack"],
    ),
    (
        "requires-order-or-cycle",
        [("engine.source.patches.0.requires", ["sglang-dsv4-shared-expert-fusion-policy"])],
        ["requires 'sglang-dsv4-shared-expert-fusion-policy', which comes later in the stack"],
    ),
    ("requires-itself", [("engine.source.patches.0.requires", ["sglang-dsv4-verify-pad"])], ["requires itself"]),
    (
        "conflicts-unknown",
        [("engine.source.patches.2.conflicts", ["sglang-nope"])],
        ["conflicts with 'sglang-nope', which is not in the stack"],
    ),
    (
        "conflicts-itself",
        [("engine.source.patches.0.conflicts", ["sglang-dsv4-verify-pad"])],
        ["conflicts with itself"],
    ),
    (
        "conflicting-default-stack",
        [
            (
                "engine.source.patches.3",
                {
                    "id": "sglang-original-shared-expert-remap",
                    "file": "patches/sglang-dspark-shared-expert-remap.patch",
                    "sha256": "291e174c4d6601588d9d652733c17655d1dec8a97774ba5a56f7a6ef7ab79e81",
                },
            )
        ],
        [
            "patch entries 'sglang-dsv4-shared-expert-fusion-policy' (patches/sglang-dsv4-shared-expert-fusion-policy.patch)"
            " and 'sglang-original-shared-expert-remap' (patches/sglang-dspark-shared-expert-remap.patch) conflict"
        ],
    ),
    (
        "fixes-unknown-defect",
        [("engine.source.patches.1.fixes", ["sglang-nope"])],
        [
            "engine.source.patches.1.fixes",
            "'sglang-nope' is not a known defect of sglang (known: sglang-dsv4-verify-pad)",
        ],
    ),
    (
        "dspark-verify-pad-unfixed",
        [("engine.source.patches.0.fixes", [])],
        [
            "launch.profiles.sglang-native-fp8",
            "recipe 'bad', profile 'sglang-native-fp8': DSpark verifies 6 tokens (--speculative-num-draft-tokens 6) on "
            "sglang 0.5.16, whose DSV4 compress plan persists only 4 verify tokens",
            "patches/sglang-dsv4-verify-pad.patch",
        ],
    ),
    (
        "dspark-below-block-size",
        [(ARGS, args_with(("--speculative-num-draft-tokens", "5")))],
        ["below the DSpark block size 5"],
    ),
    ("dspark-no-block-size", [(PROFILE + ".dspark_block_size", DELETE)], ["needs dspark_block_size"]),
    ("duplicate-flag", [(PROFILE + ".extra_args", ["--tp-size", "4"])], ["--tp-size is given 2 times"]),
    ("bad-env-name", [(PROFILE + ".env.bad-name", "1")], ["environment variable name 'bad-name'"]),
    ("relative-cache-dir", [("launch.cache_dirs", ["cache"])], ["launch.cache_dirs", "absolute cache directory"]),
    ("profile-from-unknown", [(PROFILE + ".from", "nope")], ["`from` names unknown profile 'nope'"]),
    ("bad-profile-name", [("launch.profiles.Serve", {"module": "x"})], ["profile name 'Serve'"]),
]


def write_bad_recipe(tmp_path: Path, edits) -> Path:
    data = standalone()
    for path, value in edits:
        if path == "colour":
            data["colour"] = value
            continue
        set_path(data, path, value)
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    return recipe


@pytest.mark.parametrize("case_id,edits,fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_recipe_field(tmp_path, case_id, edits, fragments):
    recipe = write_bad_recipe(tmp_path, edits)
    with pytest.raises(ServebuildError) as info:
        make_plan(REPO_ROOT, str(recipe), BuildOptions(platform="linux/arm64", tag=f"servebuild-test/bad-{case_id}:1"))
    line = str(info.value)
    assert "\n" not in line and info.value.exit_code == 2
    for fragment in ["bad.yaml", *fragments]:
        assert fragment in line, line


# -- a profile's port: a TCP port, an integer 1..65535 --------------------------------------------------------------


def profile_port(port) -> dict:
    return {"launch": {"profiles": {"p": {"port": port}}}}


@pytest.mark.parametrize("port", [1, 8000, 65535])
def test_a_profile_port_in_range_is_kept(project, port):
    assert load_with(project, profile_port(port)).recipe.launch.profiles["p"].port == port


@pytest.mark.parametrize("port", [0, 65536, 99999, -1, -8000, True, False, "8000", 8000.0, None])
def test_a_profile_port_out_of_range_or_not_an_integer_is_refused(project, port):
    if port is None:  # an explicit null is the default (the engine kind's port), not an error
        assert load_with(project, profile_port(port)).recipe.launch.profiles["p"].port is None
        return
    with pytest.raises(ServebuildError) as info:
        load_with(project, profile_port(port))
    line = one_printable_line(info.value)
    assert "hostile.yaml" in line and "launch.profiles" in line and "port" in line, line


# -- workdir and cache_dirs: absolute, letters, digits and '._-' only ----------------------------------------------

BAD_DIRS = [
    "/work space",
    "/work$HOME",
    "/$(id)",
    "/a/${X}",
    "/a b/c",
    "/a\tb",
    "/a;b",
    "/a'b",
    "relative",
    "/a/../../etc",
    "//",
    "",
]


@pytest.mark.parametrize("path", BAD_DIRS)
@pytest.mark.parametrize("field", ["workdir", "cache_dirs"])
def test_a_launch_directory_with_a_space_or_dollar_is_refused(project, field, path):
    with pytest.raises(ServebuildError) as info:
        load_with(project, {"launch": {field: path if field == "workdir" else ["/cache/ok", path]}})
    line = one_printable_line(info.value)
    assert f"launch.{field}" in line and "absolute" in line, line


@pytest.mark.parametrize("path", ["/workspace", "/w", "/opt/models.v1/_x-y", "/cache/x/"])
def test_a_plain_absolute_launch_directory_is_kept(project, path):
    launch = load_with(project, {"launch": {"workdir": path, "cache_dirs": [path]}}).recipe.launch
    assert launch.workdir == path and launch.cache_dirs == [path]


# -- vLLM: the DSpark rule matches the method in any case (vLLM lowercases it) ----------------------------------


@pytest.mark.parametrize("method", ["dspark", "DSpark", "DSPARK"])
def test_vllm_dspark_is_recognised_in_any_case(project, method):
    spec = json.dumps({"method": method, "num_speculative_tokens": 2})
    profile = {
        "module": "vllm.entrypoints.cli.main",
        "args": ["serve", "/m", "--speculative-config", spec],
        "dspark_block_size": 5,
    }
    with pytest.raises(ServebuildError) as info:
        load_with(project, {"launch": {"profiles": {"p": profile}}})
    assert "num_speculative_tokens is 2, below the DSpark block size 5" in one_printable_line(info.value)
    profile["args"][-1] = json.dumps({"method": method, "num_speculative_tokens": 6})
    assert load_with(project, {"launch": {"profiles": {"p": profile}}}).recipe.launch.profiles["p"]
    profile["args"][-1] = json.dumps({"method": method})  # no token count: DSpark cannot be checked
    with pytest.raises(ServebuildError, match="DSpark needs an integer num_speculative_tokens"):
        load_with(project, {"launch": {"profiles": {"p": profile}}})


def test_another_vllm_method_is_not_held_to_the_dspark_rule(project):
    spec = json.dumps({"method": "eagle", "num_speculative_tokens": 2})
    profile = {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m", "--speculative-config", spec]}
    assert load_with(project, {"launch": {"profiles": {"p": profile}}})
