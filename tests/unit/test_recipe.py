"""Recipe loading, inheritance, validation and rendering (pure logic, no engine)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from servebuild.errors import RecipeError
from servebuild.engines.profiles import launcher_script
from servebuild.recipe.load import load_recipe
from servebuild.lock.lockfile import load_lock_file
from servebuild.render.context import render_dockerfile
from support import REPO_ROOT

REAL = [
    "torch-cu130",
    "torch-cu130-bookworm",
    "vllm-dspark",
    "sglang-native-fp8",
    "sglang-fused-fp4",
    "sglang-native-fp8-bookworm",
    "vllm-dspark-bookworm",
    "sglang-hgx-h200",
]
GOLDEN = REPO_ROOT / "tests" / "golden"


def render(name: str, platform: str) -> str:
    loaded = load_recipe(name, REPO_ROOT)
    bases = {
        s: getattr(loaded.recipe.bases, s).ref.replace("{arch}", platform.split("/")[1]) for s in ("build", "runtime")
    }
    lock = load_lock_file(loaded)  # the bookworm recipes' locks pin their apt steps
    pins = lock.debian.get(platform) if lock else None
    return render_dockerfile(
        loaded.recipe, loaded.sha256, platform, bases, REPO_ROOT, pins.apt_specs() if pins else None
    )


@pytest.mark.parametrize("name", REAL)
def test_real_recipes_load(name):
    loaded = load_recipe(name, REPO_ROOT)
    assert loaded.recipe.name == name
    assert loaded.recipe.cuda_arch_list == "9.0a"


def test_torch_cu130_lists_arm64_then_amd64_and_the_h200_recipe_only_amd64():
    """What the recipes list; the default for a recipe that lists none is
    test_plan.py's test_a_recipe_without_platforms_is_for_linux_arm64_as_documented."""
    assert load_recipe("torch-cu130", REPO_ROOT).recipe.platforms == ["linux/arm64", "linux/amd64"]
    assert load_recipe("sglang-hgx-h200", REPO_ROOT).recipe.platforms == ["linux/amd64"]


def test_extends_inherits_and_overrides():
    child = load_recipe("vllm-dspark", REPO_ROOT)
    assert child.recipe.python == "3.12"  # inherited from torch-cu130
    assert child.recipe.bases.build.ref == "nvidia/cuda:13.0.2-base-ubuntu24.04"
    assert child.recipe.expect.torchvision_pair is True
    assert child.recipe.expect.versions["vllm"] == "0.26.0"  # mapping merged with the parent's
    assert child.recipe.expect.versions["torch"] == "2.11.0"
    assert [f.display for f in child.chain] == ["recipes/vllm-dspark.yaml", "recipes/torch-cu130.yaml"]


def test_vllm_recipe_pins():
    r = load_recipe("vllm-dspark", REPO_ROOT).recipe
    assert r.engine.source.commit == "568afb3a13806beb53bb2e6bd518269357b237c0"
    pr = r.engine.source.patches[0]
    assert pr.pr == 48993 and pr.commit is None and pr.commit_hint == "f3a920a07640"
    argv = r.launch.profiles["vllm-dspark-1m"].argv()
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "dspark", "num_speculative_tokens": 6, "draft_sample_method": "greedy"}
    assert "--no-async-scheduling" in argv and "--enforce-eager" not in argv


def test_sglang_stack_order_and_requires():
    r = load_recipe("sglang-native-fp8", REPO_ROOT).recipe
    ids = [p.id for p in r.engine.source.patches]
    # #33889/#33312 cannot apply on v0.5.16: local backports stand for #34189 and #33312
    assert ids == [
        "sglang-dsv4-verify-pad",  # first: every prefix of the stack serves DSpark correctly
        "sglang-pr-33276",
        "sglang-dsv4-shared-expert-fusion-policy",
        "sglang-adaptive-prefill",
    ]
    assert not any(p.pr in (33889, 33312) for p in r.engine.source.patches + r.engine.source.optional_patches)
    assert r.engine.source.patches[0].fixes == ["sglang-dsv4-verify-pad"]
    assert r.engine.source.patches[2].conflicts == ["sglang-original-shared-expert-remap"]
    env = r.launch.profiles["sglang-native-fp8"].env
    assert env["SGLANG_DSV4_ADAPTIVE_PREFILL"] == "1"
    assert env["SGLANG_DSV4_ADAPTIVE_PREFILL_TOKEN_PRODUCT"] == "738197504"


def test_fused_fp4_adds_one_flag_and_nothing_else():
    native = load_recipe("sglang-native-fp8", REPO_ROOT).recipe.launch.profiles["sglang-native-fp8"]
    fused_recipe = load_recipe("sglang-fused-fp4", REPO_ROOT).recipe
    fused = fused_recipe.launch.profiles["sglang-fused-fp4"]
    assert fused.argv() == native.argv() + ["--enforce-shared-experts-fusion"]
    assert fused.env == native.env
    assert "--enforce-shared-experts-fusion" not in native.argv()
    assert fused_recipe.engine == load_recipe("sglang-native-fp8", REPO_ROOT).recipe.engine


def test_launcher_script_exports_env_and_execs():
    profile = load_recipe("sglang-native-fp8", REPO_ROOT).recipe.launch.profiles["sglang-native-fp8"]
    script = launcher_script("sglang-native-fp8", profile)
    assert script.startswith("#!/bin/sh\n")
    assert '[ -n "${SGLANG_DSV4_ADAPTIVE_PREFILL+set}" ] || SGLANG_DSV4_ADAPTIVE_PREFILL=1' in script
    assert script.rstrip().endswith('--warmups prefill_shapes "$@"')
    # the script is valid POSIX shell
    subprocess.run(["sh", "-n", "-c", script], check=True)


@pytest.mark.parametrize("name", ["sglang-native-fp8", "sglang-fused-fp4", "sglang-hgx-h200", "vllm-dspark"])
def test_servers_listen_on_all_interfaces_at_the_exposed_port(name, tmp_path):
    """The launchers the context gets (not a re-implementation): every profile's server binds
    0.0.0.0 (SGLang's default 127.0.0.1 is unreachable behind -p) at a port the image EXPOSEs."""
    from servebuild.render.context import write_context

    loaded = load_recipe(name, REPO_ROOT)
    bases = {"build": "b", "runtime": "r"}
    (tmp_path / "source.tar").write_bytes(b"")  # the engine tree is not what this test reads
    context = write_context(loaded, "linux/arm64", bases, tmp_path / "ctx", {}, tmp_path / "source.tar")
    exposed = re.findall(r"^EXPOSE (\d+)$", (context / "Dockerfile").read_text(), re.M)
    assert exposed
    for profile in loaded.recipe.launch.profiles:
        script = (context / "launchers" / profile).read_text()
        argv = shlex.split(script.splitlines()[-1])
        assert argv[argv.index("--host") + 1] == "0.0.0.0", (profile, argv)
        assert argv[argv.index("--port") + 1] in exposed, (profile, argv, exposed)


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("platform", ["linux/arm64", "linux/amd64"])
def test_golden_dockerfiles(name, platform):
    text = render(name, platform)
    golden = GOLDEN / f"{name}.{platform.replace('/', '-')}.Dockerfile"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden.name} differs; UPDATE_GOLDEN=1 after review"


@pytest.mark.parametrize("name", REAL)
def test_render_is_deterministic(name):
    assert render(name, "linux/arm64") == render(name, "linux/arm64")


def test_arch_list_reaches_compiles_and_runtime_has_the_jit_toolchain_but_no_build_caches():
    text = render("vllm-dspark", "linux/arm64")
    build, runtime = text.split("AS runtime", 1)
    engine_stage = build.split("AS engine", 1)[1]
    assert 'TORCH_CUDA_ARCH_LIST="9.0a"' in engine_stage and 'TORCH_CUDA_ARCH_LIST="9.0a"' in runtime
    assert "MAX_JOBS" not in text  # vllm-precompiled compiles nothing
    # the deps and engine stages only install wheels: no toolchain, no compiler cache
    assert "build-essential" not in build and "ccache" not in build and "python3-venv" in build
    # the engines compile kernels while serving: compiler, Python headers, nvcc 13.0 from the venv
    assert "build-essential" in runtime and "python3-dev" in runtime
    assert 'CUDA_HOME="/opt/venv/lib/python3.12/site-packages/nvidia/cu13"' in runtime
    assert 'NVIDIA_DRIVER_CAPABILITIES="compute,utility"' in runtime and "EXPOSE 8000" in runtime
    assert "VOLUME" not in runtime and 'TRITON_CACHE_DIR="/cache/triton"' in runtime
    # Triton assembles with the set's 13.0 ptxas, not the 12.8/12.9 one in its wheel
    home = "/opt/venv/lib/python3.12/site-packages/nvidia/cu13"
    assert f'TRITON_PTXAS_PATH="{home}/bin/ptxas"' in runtime
    assert f'TRITON_PTXAS_BLACKWELL_PATH="{home}/bin/ptxas"' in runtime
    # -lcuda links against a stub made from the image's cuda.h; the driver's libcuda.so.1 loads at run time
    assert f'LIBRARY_PATH="{home}/lib64/stubs"' in runtime and "LD_LIBRARY_PATH" not in runtime
    assert f"-Wl,-soname,libcuda.so.1 -o {home}/lib/stubs/libcuda.so" in runtime
    assert runtime.index("from=deps") < runtime.index("libcuda.so.1") < runtime.index("from=engine")
    for absent in ("ccache", "/tmp/src", "--mount=type=cache,target=/root/.cache/pip"):
        assert absent not in runtime
    # copies are settled RUNs (render/settle.py): a bind of the stage's directory, copied with cp -a
    assert "--mount=type=bind,from=deps,source=/opt/venv,target=/mnt/src" in runtime
    assert "--mount=type=bind,from=engine,source=/opt/engine,target=/mnt/src" in runtime
    # the runtime copies the shared deps layer before the variant-specific engine layer
    assert runtime.index("from=deps") < runtime.index("from=engine") < runtime.index("source=manifest.json")


@pytest.mark.parametrize("name", REAL)
def test_rendered_dockerfiles_pass_hadolint(name, tmp_path):
    hadolint = shutil.which("hadolint") or str(REPO_ROOT / ".venv/bin/hadolint")
    path = tmp_path / "Dockerfile"
    path.write_text(render(name, "linux/arm64"))
    proc = subprocess.run([hadolint, "--no-color", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout


def test_torch_only_images_get_no_jit_toolchain():
    runtime = render("torch-cu130", "linux/arm64").split("AS runtime", 1)[1]
    for absent in ("libcuda", "TRITON_PTXAS_PATH", "LIBRARY_PATH", "build-essential"):
        assert absent not in runtime


def test_cuda_13_0_bases_only():
    for name in ("torch-cu130", "vllm-dspark", "sglang-native-fp8"):
        bases = load_recipe(name, REPO_ROOT).recipe.bases
        assert bases.build.ref.startswith("nvidia/cuda:13.0.") and bases.runtime.ref.startswith("nvidia/cuda:13.0.")


def test_error_names_file_field_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    data = yaml.safe_load((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())
    data["name"] = "bad"
    data["engine"] = {
        "name": "x",
        "version": "1",
        "source": {"url": "https://example.invalid/x.git", "commit": "abc1234"},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path), REPO_ROOT)
    line = str(info.value)
    assert "bad.yaml:" in line and "engine.source.commit" in line and "not a full 40-hex" in line
    assert "\n" not in line


def test_sglang_variants_reproduce_the_seed_ab_table():
    loaded = load_recipe("sglang-native-fp8", REPO_ROOT)
    stacks = {
        name: [p.id for p in loaded.with_variant(name).recipe.engine.source.patches] for name in loaded.recipe.variants
    }
    pad, policy, remap = (
        "sglang-dsv4-verify-pad",
        "sglang-dsv4-shared-expert-fusion-policy",
        "sglang-original-shared-expert-remap",
    )
    assert stacks == {
        "original-fix": [pad, remap],
        "original-fix-33276": [pad, "sglang-pr-33276", remap],
        "fusion-policy-only": [pad, policy],
        "pr-33276-fusion-policy": [pad, "sglang-pr-33276", policy],
        "final": [p.id for p in loaded.recipe.engine.source.patches],
        "local-stack": [pad, policy, "sglang-adaptive-prefill"],
    }
    # the remap is never in the default stack, and never stacked with the fusion policy; every row is DSpark-safe
    assert remap not in stacks["final"]
    assert not any(policy in s and remap in s for s in stacks.values())
    assert all(pad in s for s in stacks.values())
    # a variant keeps the recipe's hash (the recipe as written) and says which variant it is
    v = loaded.with_variant("original-fix")
    assert v.sha256 == loaded.sha256 and v.variant == "original-fix"


def _with(tmp_path, **variants):
    data = yaml.safe_load((REPO_ROOT / "recipes/sglang-native-fp8.yaml").read_text())
    data["name"] = "v"
    data["variants"] = variants
    path = tmp_path / "v.yaml"
    (tmp_path / "torch-cu130.yaml").write_text((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "variants,message",
    [
        ({"a": {"patches": ["nope"]}}, "variants.a: unknown patch 'nope'"),
        (
            {
                "a": {
                    "patches": [
                        "sglang-dsv4-verify-pad",
                        "sglang-dsv4-shared-expert-fusion-policy",
                        "sglang-original-shared-expert-remap",
                    ]
                }
            },
            "variants.a: patch entries 'sglang-dsv4-shared-expert-fusion-policy' "
            "(patches/sglang-dsv4-shared-expert-fusion-policy.patch) and 'sglang-original-shared-expert-remap' "
            "(patches/sglang-dspark-shared-expert-remap.patch) conflict (as 'sglang-dsv4-shared-expert-fusion-policy' "
            "declares): a stack carries one of them",
        ),
        (
            {"a": {"patches": ["sglang-adaptive-prefill"]}},
            "variants.a: recipe 'v', profile 'sglang-native-fp8': DSpark verifies 6 tokens "
            "(--speculative-num-draft-tokens 6) on sglang 0.5.16",
        ),
        ({"a": {"patches": ["sglang-pr-33276", "sglang-pr-33276"]}}, "variants.a: duplicate patch entry"),
        ({"Bad": {"patches": []}}, "'Bad' is not a valid variant name"),
    ],
)
def test_bad_variants(tmp_path, variants, message):
    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe(str(_with(tmp_path, **variants)), REPO_ROOT)


def test_unknown_variant_names_the_known_ones():
    with pytest.raises(
        RecipeError, match="unknown variant 'x'; this recipe has: final, fusion-policy-only, local-stack, original-fix"
    ):
        load_recipe("sglang-native-fp8", REPO_ROOT).with_variant("x")


@pytest.mark.parametrize(
    "args,problem",
    [
        (["--speculative-algorithm", "DSPARK"], None),  # gamma from the draft checkpoint
        (["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "6"], None),
        (["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5"], None),
        (
            ["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "4"],
            "--speculative-dspark-block-size is 4, below the DSpark block size 5",
        ),
        (
            ["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "5"],
            "--speculative-num-draft-tokens minus one is 4, below the DSpark block size 5",
        ),
        (
            ["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "six"],
            "DSPARK needs an integer --speculative-num-draft-tokens",
        ),
    ],
)
def test_sglang_dspark_spellings(args, problem):
    from servebuild.engines import kind_for
    from servebuild.engines.profiles import LaunchProfile

    profile = LaunchProfile(module="sglang.launch_server", args=args, dspark_block_size=5)
    if problem is None:
        kind_for("sglang").check_profile("p", profile)
    else:
        with pytest.raises(ValueError, match=problem):
            kind_for("sglang").check_profile("p", profile)


SPEC3 = '{"method":"dspark","num_speculative_tokens":3}'


@pytest.mark.parametrize(
    "kind,args,problem",
    [
        # every spelling the engines' parsers accept reaches the same rule (block size 5, 3 proposals)
        ("vllm", ["--speculative-config", SPEC3], "num_speculative_tokens is 3, below"),
        ("vllm", ["--speculative_config", SPEC3], "num_speculative_tokens is 3, below"),
        ("vllm", ["-sc", SPEC3], "num_speculative_tokens is 3, below"),
        ("vllm", [f"--speculative-config={SPEC3}"], "num_speculative_tokens is 3, below"),
        (
            "vllm",
            ["--speculative-config.method", "dspark", "--speculative-config.num_speculative_tokens", "3"],
            "num_speculative_tokens is 3, below",
        ),
        (
            "vllm",
            ["--speculative_config.method=dspark", "--speculative-config.num-speculative-tokens=3"],
            "num_speculative_tokens is 3, below",
        ),
        (
            "vllm",
            ["--speculative-config", '{"method":"dspark"}', "--speculative-config.num_speculative_tokens", "3"],
            "num_speculative_tokens is 3, below",
        ),
        ("vllm", ["--speculative-config", SPEC3, "-sc", SPEC3], "given 2 times"),
        ("vllm", ["--speculative-config.method", "dspark", "--speculative-config.num_speculative_tokens", "7"], None),
        (
            "sglang",
            ["--speculative-algo", "DSPARK", "--speculative-num-draft", "3"],
            "--speculative-num-draft-tokens minus one is 2, below",
        ),
        (
            "sglang",
            ["--speculative-algorithm=dspark", "--speculative-dspark=3"],
            "--speculative-dspark-block-size is 3",
        ),
        ("sglang", ["--speculative", "DSPARK"], "ambiguous abbreviation"),
        (
            "sglang",
            [
                "--speculative-algorithm",
                "DSPARK",
                "--speculative-num-draft-tokens",
                "7",
                "--speculative-num-draft",
                "3",
            ],
            "given 2 times",
        ),
        ("sglang", ["--speculative-algo", "DSPARK", "--speculative-num-draft", "6"], None),
    ],
)
def test_dspark_rules_read_every_spelling(kind, args, problem):
    from servebuild.engines import kind_for
    from servebuild.engines.profiles import LaunchProfile

    profile = LaunchProfile(module="m", args=args, dspark_block_size=5)
    if problem is None:
        kind_for(kind).check_profile("p", profile)
    else:
        with pytest.raises(ValueError, match=problem):
            kind_for(kind).check_profile("p", profile)


def test_profile_errors_point_at_the_profile(tmp_path):
    data = yaml.safe_load((REPO_ROOT / "recipes/sglang-native-fp8.yaml").read_text())
    profile = next(iter(data["launch"]["profiles"]))
    data["launch"]["profiles"][profile]["args"] += ["--speculative-algo", "DSPARK", "--speculative-num-draft", "2"]
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "torch-cu130.yaml").write_text((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())
    path = tmp_path / "recipes" / "sglang-native-fp8.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path), REPO_ROOT)
    line = str(info.value)
    profile_line = next(i for i, t in enumerate(text.splitlines(), 1) if t.strip() == f"{profile}:")
    # the profile already says --speculative-algorithm: the abbreviation is the same flag again
    assert f":{profile_line}: launch.profiles.{profile}:" in line and "--speculative-algorithm is given 2" in line, line
    data["launch"]["profiles"][profile]["args"] += ["--port", "1", "--port", "2"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path), REPO_ROOT)
    assert f"launch.profiles.{profile}:" in str(info.value)
