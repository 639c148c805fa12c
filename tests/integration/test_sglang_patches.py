"""The local SGLang patches, applied by the patch-stack machinery to the real v0.5.16 sources.

The sources come from the hash-pinned sglang==0.5.16 wheel on PyPI (GitHub is unreachable
here); the adaptive prefill policy is imported and tested from the patched tree, not a copy.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import py_compile
import sys
import tarfile
import types
from pathlib import Path

import pytest

from servebuild.recipe.schema import EngineSource, PatchEntry
from servebuild.sources.stack import SourceCache
from support import REPO_ROOT

ADAPTIVE = "patches/sglang-adaptive-prefill.patch"
REMAP = "patches/sglang-dspark-shared-expert-remap.patch"
PAD = "patches/sglang-dsv4-verify-pad.patch"
POLICY = "patches/sglang-dsv4-shared-expert-fusion-policy.patch"
ENV_NAMES = [
    "SGLANG_DSV4_ADAPTIVE_PREFILL",
    "SGLANG_DSV4_ADAPTIVE_PREFILL_TOKEN_PRODUCT",
    "SGLANG_DSV4_ADAPTIVE_PREFILL_MIN_CHUNK",
    "SGLANG_DSV4_ADAPTIVE_PREFILL_ALIGNMENT",
    "SGLANG_DSV4_ADAPTIVE_PREFILL_LONG_REQUEST_THRESHOLD",
    "SGLANG_DSV4_ADAPTIVE_PREFILL_LONG_REQUEST_MAX_CHUNK",
]


def entry(path: str) -> PatchEntry:
    digest = hashlib.sha256((REPO_ROOT / path).read_bytes()).hexdigest()
    return PatchEntry(id=Path(path).stem, file=path, sha256=digest)


def patched_tree(upstream, tmp: Path, *patches: str) -> Path:
    url, commit = upstream
    cache = SourceCache(tmp / "cache", recipe="sglang-test")
    prepared = cache.prepare(
        EngineSource(url=url, commit=commit, subdir="python", patches=[entry(p) for p in patches]),
        REPO_ROOT,
        tmp / "work",
    )
    out = tmp / "extracted"
    with tarfile.open(prepared.tarball) as tar:
        tar.extractall(out, filter="data")
    return out / "src" / "python"


@pytest.fixture(scope="module")
def adaptive_tree(sglang_upstream, tmp_path_factory):
    return patched_tree(sglang_upstream, tmp_path_factory.mktemp("adaptive"), ADAPTIVE)


@pytest.fixture()
def policy(adaptive_tree, monkeypatch):
    """Import sglang.srt.environ and the policy module from the patched tree.

    sglang/__init__.py pulls in torch; the policy needs only environ (stdlib-only), so the
    parent packages are bound to the patched tree's directories without running their __init__.
    """
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for k in saved:
        del sys.modules[k]
    for pkg in ("sglang", "sglang.srt", "sglang.srt.managers"):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(adaptive_tree / pkg.replace(".", "/"))]
        sys.modules[pkg] = mod
    module = importlib.import_module("sglang.srt.managers.adaptive_prefill")
    assert Path(module.__file__).is_relative_to(adaptive_tree)
    yield module
    for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_both_patches_apply_and_compile(sglang_upstream, tmp_path):
    """Each patch applies alone to v0.5.16 and every file it touches compiles."""
    for patch, files in (
        (
            ADAPTIVE,
            ["sglang/srt/environ.py", "sglang/srt/managers/scheduler.py", "sglang/srt/managers/adaptive_prefill.py"],
        ),
        (REMAP, ["sglang/srt/models/deepseek_v4_dspark.py"]),
    ):
        tree = patched_tree(sglang_upstream, tmp_path / Path(patch).stem, patch)
        for rel in files:
            py_compile.compile(str(tree / rel), doraise=True)


def test_patch_headers_say_what_why_against_and_drop():
    for patch in (ADAPTIVE, REMAP, PAD, POLICY):
        header = (REPO_ROOT / patch).read_text().split("\n---\n", 1)[0]
        for field in ("What:", "Why:", "Against:", "Drop when:"):
            assert field in header, f"{patch} header lacks {field}"
        assert "fdebc938f7f4d16fe6b9f55dcd9a767cf0899ea1" in header


def test_remap_patch_is_in_no_default_stack():
    from servebuild.recipe.load import load_recipe

    for recipe in ("sglang-native-fp8", "sglang-fused-fp4", "vllm-dspark"):
        engine = load_recipe(recipe, REPO_ROOT).recipe.engine
        assert not any(p.file == REMAP for p in engine.source.patches), recipe


def test_remap_patch_maps_shared_experts_to_slot_256(sglang_upstream, tmp_path):
    tree = patched_tree(sglang_upstream, tmp_path, REMAP)
    source = (tree / "sglang/srt/models/deepseek_v4_dspark.py").read_text()
    fn = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef) and n.name == "_remap_dspark_weight_name"
    )
    body = ast.unparse(fn)
    assert "'.mlp.shared_experts.', '.mlp.experts.256.'" in body


def test_scheduler_hook_calls_the_policy(adaptive_tree):
    """A rebase that drops the hook must fail here."""
    source = (adaptive_tree / "sglang/srt/managers/scheduler.py").read_text()
    tree = ast.parse(source)
    methods = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    raw = ast.unparse(methods["_get_new_batch_prefill_raw"])
    assert "next_chunk_size(self.adaptive_prefill, chunked_prefill_size" in raw
    # the adjusted size is what the PrefillAdder receives
    assert raw.index("next_chunk_size(") < raw.index("PrefillAdder(")
    init = ast.unparse(methods["init_chunked_prefill"])
    assert "self.adaptive_prefill = AdaptivePrefillConfig.from_env()" in init
    imports = [
        n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "sglang.srt.managers.adaptive_prefill"
    ]
    assert {a.name for a in imports[0].names} == {"AdaptivePrefillConfig", "next_chunk_size"}


def test_policy_module_imports_only_stdlib_and_environ(adaptive_tree):
    tree = ast.parse((adaptive_tree / "sglang/srt/managers/adaptive_prefill.py").read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            modules.add(node.module)
    assert modules <= {"__future__", "os", "dataclasses", "typing", "sglang.srt.environ"}


def test_variables_declared_in_envs(adaptive_tree, policy):
    envs_mod = sys.modules["sglang.srt.environ"]
    for name in ENV_NAMES:
        assert isinstance(getattr(envs_mod.Envs, name), envs_mod.EnvField), name


def enabled(policy, **kw):
    return policy.AdaptivePrefillConfig(enabled=True, **kw)


CASES = [
    # (description, configured, request, context, expected)
    ("short request keeps the configured chunk", 12288, 32768, 0, 12288),
    ("exactly the threshold keeps the configured chunk", 12288, 65536, 0, 12288),
    ("threshold+1: first chunk capped at the max chunk", 12288, 65537, 0, 8192),
    ("context 0 of a 1M prompt: the max chunk", 12288, 1048535, 0, 8192),
    ("product/context above the cap is capped", 12288, 1048535, 8192, 8192),
    ("product/context aligned down to 256", 12288, 1048535, 100000, 7168),  # 7381 -> 7168
    ("8010 aligned down to 7936", 12288, 1048535, 92160, 7936),
    ("deep context hits the floor", 12288, 1048535, 900000, 1280),
    ("1230 aligns to 1024, raised to the floor", 12288, 1048535, 600000, 1280),
    ("last partial chunk is what is left", 12288, 1048535, 1048000, 535),
    ("never above the configured chunk", 4096, 1048535, 0, 4096),
    ("configured below the floor wins", 1024, 1048535, 900000, 1024),
    ("chunking off stays off", None, 1048535, 0, None),
    ("non-positive configured chunk is left alone", -1, 1048535, 0, -1),
    ("nothing left: configured chunk", 12288, 70000, 70000, 12288),
]


@pytest.mark.parametrize("desc,configured,request_tokens,context,expected", CASES, ids=[c[0] for c in CASES])
def test_next_chunk_size_table(policy, desc, configured, request_tokens, context, expected):
    assert policy.next_chunk_size(enabled(policy), configured, request_tokens, context) == expected


def test_disabled_policy_is_a_no_op(policy):
    cfg = policy.AdaptivePrefillConfig()
    assert policy.next_chunk_size(cfg, 12288, 1048535, 500000) == 12288


def walk(policy, cfg, configured, tokens):
    context, chunks, sizes = 0, 0, []
    while context < tokens:
        size = policy.next_chunk_size(cfg, configured, tokens, context)
        assert 0 < size <= configured
        take = min(size, tokens - context)  # the PrefillAdder never takes more than is left
        sizes.append(take)
        context += take
        chunks += 1
    assert context == tokens
    return chunks, sizes


def test_simulation_1m_prompt_takes_614_chunks(policy):
    chunks, sizes = walk(policy, enabled(policy), 12288, 1_048_535)
    assert chunks == 614
    assert sizes[0] == 8192 and min(sizes[:-1]) == 1280


def test_simulation_32k_prompt_keeps_12288_chunks(policy):
    chunks, sizes = walk(policy, enabled(policy), 12288, 32_768)
    assert sizes == [12288, 12288, 8192] and chunks == 3


def test_from_env_reads_the_variables(policy, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_ADAPTIVE_PREFILL", "1")
    monkeypatch.setenv("SGLANG_DSV4_ADAPTIVE_PREFILL_MIN_CHUNK", "2048")
    cfg = policy.AdaptivePrefillConfig.from_env()
    assert cfg.enabled and cfg.min_chunk == 2048 and cfg.token_product == 738197504


@pytest.mark.parametrize(
    "env,value,message",
    [
        ("SGLANG_DSV4_ADAPTIVE_PREFILL_MIN_CHUNK", "0", "MIN_CHUNK must be a positive integer"),
        ("SGLANG_DSV4_ADAPTIVE_PREFILL_TOKEN_PRODUCT", "-5", "TOKEN_PRODUCT must be a positive integer"),
        ("SGLANG_DSV4_ADAPTIVE_PREFILL_ALIGNMENT", "2048", "ALIGNMENT (2048) must not exceed"),
        ("SGLANG_DSV4_ADAPTIVE_PREFILL_MIN_CHUNK", "9000", "MIN_CHUNK (9000) must not exceed"),
        ("SGLANG_DSV4_ADAPTIVE_PREFILL_LONG_REQUEST_THRESHOLD", "lots", "'lots' is not an integer"),
    ],
)
def test_bad_values_are_rejected_at_startup(policy, monkeypatch, env, value, message):
    monkeypatch.setenv("SGLANG_DSV4_ADAPTIVE_PREFILL", "1")
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        policy.AdaptivePrefillConfig.from_env()


def test_iteration_counts_for_the_closing_note(policy, capsys):
    """Prints the figures the issue asks for; asserts the ones the seed states."""
    fixed = policy.AdaptivePrefillConfig(enabled=False)
    rows = {}
    for tokens in (131_072, 262_144, 1_048_535):
        rows[tokens] = (
            walk(policy, fixed, 1024, tokens)[0],
            walk(policy, fixed, 12288, tokens)[0],
            walk(policy, enabled(policy), 12288, tokens)[0],
        )
    with capsys.disabled():
        print("\nprefill iterations (fixed 1024 / fixed 12288 / adaptive):")
        for tokens, row in rows.items():
            print(f"  {tokens:>9,}: {row[0]} / {row[1]} / {row[2]}")
    assert rows[1_048_535] == (1024, 86, 614)


def _function(tree: Path, rel: str, name: str, namespace: dict):
    """One function of the patched tree's file, compiled on its own into `namespace` (the module itself
    imports torch and CUDA kernels; the function needs neither)."""
    source = (tree / rel).read_text()
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[fn], type_ignores=[]), rel, "exec"), namespace)
    return namespace[name]


@pytest.fixture(scope="module")
def quality_tree(sglang_upstream, tmp_path_factory):
    """The quality-first stack without #33276 (the local-stack variant), applied in order to v0.5.16."""
    return patched_tree(sglang_upstream, tmp_path_factory.mktemp("quality"), PAD, POLICY, ADAPTIVE)


def test_the_local_stack_applies_in_order_and_compiles(quality_tree):
    for rel in (
        "sglang/srt/model_executor/pool_configurator.py",
        "sglang/srt/models/deepseek_v4.py",
        "sglang/srt/models/deepseek_v4_dspark.py",
        "sglang/srt/managers/scheduler.py",
    ):
        py_compile.compile(str(quality_tree / rel), doraise=True)
    plan = (quality_tree / "sglang/jit_kernel/csrc/deepseek_v4/c_plan.cuh").read_text()
    assert "kMaxMTPDraftTokens" not in plan
    assert "const auto mtp_pad = std::max<int32_t>(ring_size - window_size, 0);" in plan


def test_the_pool_refuses_a_verify_length_its_rings_cannot_hold(quality_tree):
    check = _function(
        quality_tree, "sglang/srt/model_executor/pool_configurator.py", "check_verify_tokens_fit_the_rings", {}
    )
    # 0.5.16's rings with speculation: C4 16, C128 256 (mem_cache/deepseek_v4_memory_pool.py)
    source = (quality_tree / "sglang/srt/mem_cache/deepseek_v4_memory_pool.py").read_text()
    assert "return 16 if compress_ratio == 4 else 256" in source
    check(6, {4: 16, 128: 256})
    check(8, {4: 16, 128: 256})
    with pytest.raises(ValueError, match="9 verify tokens needs a C4 state ring of at least 17"):
        check(9, {4: 16, 128: 256})


class _Args(types.SimpleNamespace):
    """Server args as declare_load_time_override sees them: its writes land on the same object."""


def _policy(tree: Path):
    declared = []
    overrides = types.ModuleType("sglang.srt.arg_groups.overrides")

    def declare_load_time_override(source, fields):
        declared.append((source, fields))
        for key, value in fields.items():
            setattr(args, key, value)

    overrides.declare_load_time_override = declare_load_time_override
    args = _Args(disable_shared_experts_fusion=False, enforce_shared_experts_fusion=False)
    namespace = {"get_server_args": lambda: args, "log_info_on_rank0": lambda *a: None, "logger": None}
    fn = _function(tree, "sglang/srt/models/deepseek_v4.py", "resolve_shared_experts_fusion", namespace)
    return fn, args, declared, overrides


def test_one_fusion_policy_for_target_and_draft(quality_tree, monkeypatch):
    fn, args, declared, overrides = _policy(quality_tree)
    monkeypatch.setitem(sys.modules, "sglang.srt.arg_groups.overrides", overrides)
    config = types.SimpleNamespace(n_shared_experts=1)
    # default: separate, declared once on the server args; the draft, built after, reads the same answer
    assert fn(config, "target") == 0 and declared == [("target", {"disable_shared_experts_fusion": True})]
    assert fn(config, "draft") == 0 and len(declared) == 1 and args.disable_shared_experts_fusion is True
    # --enforce-shared-experts-fusion: both fuse the one shared expert
    fn, args, declared, overrides = _policy(quality_tree)
    monkeypatch.setitem(sys.modules, "sglang.srt.arg_groups.overrides", overrides)
    args.enforce_shared_experts_fusion = True
    assert fn(config, "target") == 1 and fn(config, "draft") == 1 and declared == []
    with pytest.raises(ValueError, match="exactly one shared expert"):
        fn(types.SimpleNamespace(n_shared_experts=2), "target")
    # both the target and the draft call it, before the draft's stages build their MoE layers
    v4 = (quality_tree / "sglang/srt/models/deepseek_v4.py").read_text()
    draft = (quality_tree / "sglang/srt/models/deepseek_v4_dspark.py").read_text()
    assert "self.num_fused_shared_experts = resolve_shared_experts_fusion(" in v4
    assert draft.index("resolve_shared_experts_fusion(\n") < draft.index("self.stages = nn.ModuleList(")


@pytest.mark.parametrize("fused,slot", [(0, "mlp.shared_experts.gate_proj"), (1, "mlp.experts.256.gate_proj")])
def test_the_draft_loader_maps_the_shared_expert_by_the_policy(quality_tree, fused, slot):
    remap = _function(
        quality_tree, "sglang/srt/models/deepseek_v4_dspark.py", "_remap_dspark_weight_name", {"Optional": None}
    )
    model = types.SimpleNamespace(
        confidence_head=None, num_fused_shared_experts=fused, config=types.SimpleNamespace(n_routed_experts=256)
    )
    assert remap(model, "mtp.2.ffn.shared_experts.w1.weight") == f"stages.2.{slot}.weight"
    assert remap(model, "mtp.0.ffn.experts.7.w2.weight") == "stages.0.mlp.experts.7.down_proj.weight"


def test_the_fusion_policy_and_the_original_fix_do_not_stack(sglang_upstream, tmp_path):
    """They edit the same line of the draft loader: git refuses the pair as the recipe rule does."""
    from servebuild.errors import ServebuildError

    with pytest.raises(ServebuildError, match="does not apply"):
        patched_tree(sglang_upstream, tmp_path, PAD, POLICY, REMAP)
