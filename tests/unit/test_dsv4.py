"""DeepSeek-V4 on CPU (issue 44): scripts/tiny_dsv4.py's checkpoint and scripts/dsv4_warm.py's
mHC buckets and tail plan.

Two kinds of test. Plain Python, always run: what the project itself computes (the checkpoint's names,
shapes and bytes, the arguments refused, the bucket walk over a split rule, the tail plan). Against the
engines' own code, read from the real release wheels (vLLM 0.26.0, SGLang 0.5.16): the split rule lifted
out of vLLM's tilelang_kernels.py, vLLM's weights mapper and DSpark remap, SGLang's name remaps and its
DeepSeekV4Config defaults, vLLM's DeepseekV4Config. CI installs neither engine (and neither can import
without a GPU stack), so these load the engines' source files out of the wheel with the few names they
import stubbed; the wheels are $SERVEBUILD_VLLM_WHEEL / $SERVEBUILD_SGLANG_WHEEL, or .whl/, or else
downloaded once from PyPI by the hashes the recipes' requirement files pin (never a skip).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import dsv4_warm  # noqa: E402
import tiny_dsv4  # noqa: E402

# dsv4-serving.md: on a 132-SM GPU the prefill variants are first reached at these T
EDGES_132 = [17, 129, 193, 257, 321, 385, 449, 513, 577, 641, 705, 769, 833, 897, 1025, 1153, 1409, 1665, 2113,
             2817, 4225]  # fmt: skip


def notes_rule(n_sms: int):
    """The split rule as dsv4-serving.md states it (the test's own rendition, not the engine's):
    clamp(n_SMs // ceil(T/64), 1, K/64/4)."""

    def split(block_k, k, grid):
        s = n_sms // grid
        if k is not None:
            s = min(s, math.ceil(k / block_k) // 4)
        return max(s, 1)

    return split


# the release wheels, pinned by the hashes of the recipes' own requirement files (any platform's wheel
# holds the same Python sources: x86_64 is taken)
PINNED = {
    "vllm": ("vllm==0.26.0", "constraints/vllm-dspark/precompiled-py3.11-linux-amd64.txt", "manylinux_2_28_x86_64"),
    "sglang": ("sglang==0.5.16", "constraints/sglang/precompiled-py3.11-linux-amd64.txt", "manylinux_2_34_x86_64"),
}


def wheel(name: str, env: str) -> Path:
    """The engine's release wheel: $ENV, or .whl/, or else the hash-pinned wheel downloaded once from PyPI
    into the tests' cache (as tests/conftest.py's sglang_wheel does); never a skip."""
    given = os.environ.get(env)
    found = [Path(given)] if given else sorted((ROOT / ".whl").glob(f"{name}-*.whl"))
    found = [p for p in found if p.is_file() and zipfile.is_zipfile(p)]
    if found:
        return found[0]
    pin, requirements, platform = PINNED[name]
    dest = Path(os.environ.get("SERVEBUILD_TEST_CACHE", Path.home() / ".cache" / "servebuild-tests")) / "wheels"
    cached = [p for p in sorted(dest.glob(f"{name}-*.whl")) if zipfile.is_zipfile(p)]
    if cached:
        return cached[0]
    lines = (ROOT / requirements).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(pin + " "))
    block = [lines[start]]
    while block[-1].endswith("\\"):
        block.append(lines[start + len(block)])
    dest.mkdir(parents=True, exist_ok=True)
    req = dest / f"{name}.txt"
    req.write_text("\n".join(block) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes", "--only-binary=:all:",
         "--platform", platform, "--python-version", "3.11", "-d", str(dest), "-r", str(req)],
        check=True, timeout=1200,
    )  # fmt: skip
    return next(p for p in sorted(dest.glob(f"{name}-*.whl")) if zipfile.is_zipfile(p))


def source(whl: Path, rel: str) -> str:
    with zipfile.ZipFile(whl) as z:
        return z.read(rel).decode()


def lift(text: str, *names: str, scope: dict | None = None) -> dict:
    """Top-level functions/classes (or methods, as Class.method) of an engine file, executed alone."""
    tree = ast.parse(text)
    body = []
    for name in names:
        cls, _, meth = name.partition(".")
        node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == cls)
        if meth:
            node = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == meth)
            node.decorator_list = []
        body.append(node)
    scope = dict(scope or {})
    exec(compile(ast.Module(body=body, type_ignores=[]), "<engine>", "exec"), scope)  # noqa: S102
    return scope


@pytest.fixture(scope="module")
def tiny():
    args = tiny_dsv4.parse_args(["/nonexistent/tiny-dsv4-plan"])
    config, tensors = tiny_dsv4.plan(args)
    return args, config, {t.name: t for t in tensors}


# ---- the checkpoint, plain Python


@pytest.mark.parametrize(
    "argv,said",
    [
        (["--experts", "-1"], "--experts -1 is outside"),
        (["--experts", "5"], "--experts 5 is outside"),
        (["--std", "nan"], "--std nan must be a finite number"),
        (["--std", "-0.5"], "--std -0.5 must be"),
        (["--std", "inf"], "--std inf must be"),
        (["--vocab", "12"], "--vocab 12 is outside"),
        (["--seed", "-3"], "--seed -3 is outside"),
        (["--compress-ratios", "0,3"], "--compress-ratios '0,3'"),
        (["--hash-layers", "4"], "--hash-layers 4 is more than the 3 layers"),
        (["--shard-mb", "NaN"], "--shard-mb 'NaN' is not a whole number"),
    ],
)
def test_bad_arguments_are_one_line_exit_2_and_no_folder(tmp_path, argv, said):
    out = tmp_path / "ckpt"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "tiny_dsv4.py"), str(out), *argv],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert said in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and run.stdout == ""
    assert not out.exists()


def test_a_non_empty_folder_or_a_file_is_refused(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for out in ("full", "file"):
        assert tiny_dsv4.main([str(tmp_path / out)]) == 2


def test_the_real_models_per_layer_shapes_of_one_tp2_rank(tiny):
    args, config, t = tiny
    shape = {n: x.shape for n, x in t.items()}
    assert shape["layers.0.attn.wq_a.weight"] == (1024, 4096)  # q LoRA rank 1024
    assert shape["layers.0.attn.wkv.weight"] == (512, 4096)  # head_dim 512 (rope 64)
    assert shape["layers.0.attn.wq_b.weight"] == (32 * 512, 1024)  # 64 heads / TP2
    assert shape["layers.0.attn.wo_a.weight"] == (4 * 1024, 32 * 512 // 4)  # 8 groups / TP2, o LoRA 1024
    assert shape["layers.0.attn.wo_b.weight"] == (4096, 4 * 1024)
    assert shape["layers.0.hc_attn_fn"] == (24, 4 * 4096)  # hc_mult 4: (2 + 4) * 4 mixes over 4 x hidden
    assert shape["layers.1.attn.indexer.wq_b.weight"] == (64 * 128, 1024)  # indexer 64 heads x 128
    assert shape["layers.1.attn.compressor.wkv.weight"] == (2 * 512, 4096)  # ratio 4 overlaps: 2 x head_dim
    assert shape["layers.2.attn.compressor.wkv.weight"] == (512, 4096)  # ratio 128
    assert shape["layers.2.attn.compressor.ape"] == (128, 512)
    assert not any(n.startswith(("layers.0.attn.compressor", "layers.0.attn.indexer", "layers.2.attn.indexer"))
                   for n in t)  # fmt: skip
    # FP8 with one UE8M0 scale per 128x128 block; MXFP4 experts of the real width, a scale per 32
    assert (t["layers.0.attn.wq_b.weight"].dtype, t["layers.0.attn.wq_b.scale"].dtype) == ("F8_E4M3", "F8_E8M0")
    assert shape["layers.0.attn.wq_b.scale"] == (128, 8)
    assert (
        shape["layers.0.ffn.experts.7.w1.weight"] == (1024, 2048)
        and t["layers.0.ffn.experts.7.w1.weight"].dtype == "I8"
    )
    assert shape["layers.0.ffn.experts.7.w1.scale"] == (1024, 128)
    assert shape["layers.0.ffn.experts.7.w2.weight"] == (4096, 512)
    assert "layers.0.ffn.gate.tid2eid" in t and "layers.1.ffn.gate.bias" in t  # one hash-routed layer
    assert config["compress_ratios"][:3] == [0, 4, 128] and config["num_hidden_layers"] == 3
    for key, value in {"hidden_size": 4096, "hc_mult": 4, "head_dim": 512, "qk_rope_head_dim": 64,
                       "q_lora_rank": 1024, "o_lora_rank": 1024, "index_n_heads": 64, "index_head_dim": 128,
                       "index_topk": 512, "sliding_window": 128, "moe_intermediate_size": 1024,
                       "num_experts_per_tok": 6, "dspark_block_size": 5, "expert_dtype": "fp4"}.items():  # fmt: skip
        assert config[key] == value, key
    assert config["quantization_config"]["weight_block_size"] == [128, 128]


def test_dspark_stages_as_the_checkpoint_ships_them(tiny):
    args, config, t = tiny
    assert {"mtp.0.main_proj.weight", "mtp.0.main_proj.scale", "mtp.0.main_norm.weight", "mtp.2.norm.weight",
            "mtp.2.hc_head_fn", "mtp.2.markov_head.markov_w1.weight", "mtp.2.markov_head.markov_w2.weight"} <= set(t)  # fmt: skip
    assert t["mtp.0.main_proj.weight"].shape == (4096, 4096 * len(config["dspark_target_layer_ids"]))
    assert config["n_mtp_layers"] == 3 == len(config["dspark_target_layer_ids"])
    assert not any(n.startswith("mtp.1.attn.compressor") for n in t)  # the stages are sliding-window only
    assert 0 <= config["dspark_noise_token_id"] < config["vocab_size"]
    assert {"embed.weight", "head.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale"} <= set(t)


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def test_written_files_are_safetensors_with_finite_values_and_an_index(tmp_path):
    args = tiny_dsv4.parse_args([str(tmp_path / "ck"), "--vocab", "300", "--shard-mb", "1"])
    T = tiny_dsv4.Tensor
    small = [T("embed.weight", "BF16", (300, 8), "normal"), T("a.weight", "F8_E4M3", (256, 256), "fp8"),
             T("a.scale", "F8_E8M0", (2, 2), "e8m0"), T("e.weight", "I8", (64, 16), "fp4"),
             T("g.tid2eid", "I32", (300, 6), "tid2eid"), T("n.weight", "BF16", (8,), "ones"),
             T("h", "F32", (3, 5), "normal")]  # fmt: skip
    config, _ = tiny_dsv4.plan(args)
    total = tiny_dsv4.write(tmp_path / "ck", config, small, args)
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == {t.name for t in small} and index["metadata"]["total_size"] == total
    seen = {}
    for shard in sorted(set(index["weight_map"].values())):
        header, body = read_safetensors(tmp_path / "ck" / shard)
        assert header.pop("__metadata__") == {"format": "pt"}
        end = 0
        for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
            a, b = entry["data_offsets"]
            assert a == end and b - a == math.prod(entry["shape"]) * tiny_dsv4.DTYPE_BYTES[entry["dtype"]]
            end = b
            seen[name] = body[a:b]
        assert end == len(body)
    assert all(v & 0x7F != 0x7F for v in seen["a.weight"])  # no e4m3 NaN
    assert set(seen["a.scale"]) == {119}  # 2^-8
    bf = [int.from_bytes(seen["n.weight"][i : i + 2], "little") for i in range(0, 16, 2)]
    assert bf == [0x3F80] * 8  # bf16 ones
    rows = [[int.from_bytes(seen["g.tid2eid"][4 * (6 * r + c) : 4 * (6 * r + c) + 4], "little") for c in range(6)]
            for r in range(300)]  # fmt: skip
    assert all(len(set(r)) == 6 and max(r) < args.experts for r in rows)
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["vocab_size"] == 300
    # the same seed gives the same bytes
    again = tiny_dsv4.data(small[1], args.seed, args.std, args.experts).tobytes()
    assert again == seen["a.weight"]


def test_tokenizer_is_byte_level_and_every_id_decodes(tmp_path):
    files = tiny_dsv4.tokenizer_files(1024)
    vocab = files["tokenizer.json"]["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(1024))
    assert len(set(tiny_dsv4.byte_alphabet())) == 256
    assert [vocab[s] for s in tiny_dsv4.SPECIALS] == [0, 1, 2, 3]
    assert files["tokenizer.json"]["model"]["merges"] == []  # N ASCII characters are N tokens
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return  # CI's venv has no tokenizers: the structure above is what it reads
    tok = Tokenizer.from_str(json.dumps(files["tokenizer.json"]))
    assert len(tok.encode("hello world 123").ids) == 15
    assert tok.decode(tok.encode("hello world 123").ids) == "hello world 123"
    tok.decode(list(range(1024)))


# ---- buckets and the tail plan, plain Python


def test_132_sms_give_the_21_prefill_edges_and_layer0s_15():
    found = dsv4_warm.buckets(notes_rule(132))
    assert found["edges"] == EDGES_132
    assert (
        len(found["variants"]["layer0"]) == 15 and min(v for v in found["variants"]["layer0"].values() if v > 17) == 513
    )
    assert found["small"] == [1, 8]  # the two small-FMA variants (T < 8, 8..16)


@pytest.mark.parametrize("sms", [78, 108, 114, 144])
def test_other_sm_counts_give_other_edges(sms):
    edges = dsv4_warm.buckets(notes_rule(sms))["edges"]
    assert edges != EDGES_132 and edges[0] == 17 and edges == sorted(set(edges))


def test_tail_plan_hits_every_bucket_within_17_to_8192():
    lengths = dsv4_warm.tail_lengths(EDGES_132, 100, 17, 8192, seed=0)
    assert len(lengths) == 100 and min(lengths) >= 17 and max(lengths) <= 8192
    assert {dsv4_warm.bucket_of(t, EDGES_132) for t in lengths} == set(EDGES_132)
    assert lengths == dsv4_warm.tail_lengths(EDGES_132, 100, 17, 8192, seed=0)  # the same plan every run
    assert lengths != sorted(lengths)
    with pytest.raises(dsv4_warm.WarmError, match="cannot hit 21 buckets"):
        dsv4_warm.tail_lengths(EDGES_132, 20)


def test_a_changed_engine_rule_or_call_site_is_one_line():
    changed = "def compute_num_split(block_k, k, grid_size):\n    return MAGIC // grid_size\n"
    with pytest.raises(dsv4_warm.WarmError, match=r"reads \['MAGIC'\]"):
        dsv4_warm.split_rule(changed, 132)
    with pytest.raises(dsv4_warm.WarmError, match="no single compute_num_split"):
        dsv4_warm.split_rule("x = 1\n", 132)
    with pytest.raises(dsv4_warm.WarmError, match="call sites changed"):
        dsv4_warm.call_sites("block_k = 64\n")


def test_plan_cli_refuses_a_bad_sm_count(capsys):
    assert dsv4_warm.main(["plan", "--sms", "-4", "--source", "/nonexistent"]) == 2
    assert "--sms -4: outside 1..1024" in capsys.readouterr().err


# ---- against the engines' own code (the release wheels)


@pytest.fixture(scope="module")
def vllm_whl():
    return wheel("vllm", "SERVEBUILD_VLLM_WHEEL")


@pytest.fixture(scope="module")
def sglang_whl():
    return wheel("sglang", "SERVEBUILD_SGLANG_WHEEL")


@pytest.mark.parametrize("sms", [78, 114, 132, 144])
def test_vllms_own_split_rule_gives_the_buckets(vllm_whl, sms):
    split = dsv4_warm.split_rule(source(vllm_whl, dsv4_warm.SPLIT_FILE), sms)
    dsv4_warm.call_sites(source(vllm_whl, dsv4_warm.CALLS_FILE))
    ours = notes_rule(sms)
    for t in range(17, 9000, 7):
        for _, k, bk, bm, _ in dsv4_warm.SITES:
            assert split(bk, k, dsv4_warm.cdiv(t, bm)) == ours(bk, k, dsv4_warm.cdiv(t, bm)), (sms, t)
    if sms == 132:
        assert dsv4_warm.buckets(split)["edges"] == EDGES_132


def test_plan_cli_reads_the_rule_from_the_wheel(vllm_whl, capsys):
    assert dsv4_warm.main(["plan", "--sms", "132", "--source", str(vllm_whl)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["edges"] == EDGES_132 and plan["warm_prefills"] == EDGES_132 and plan["unreachable_edges"] == []


def vllm_mapper(whl: Path):
    """vLLM's WeightsMapper and DeepSeek-V4's mapper factory, out of the wheel's sources."""
    import collections.abc
    import dataclasses
    import typing

    utils = source(whl, "vllm/model_executor/models/utils.py")
    scope = {"dataclass": dataclasses.dataclass, "field": dataclasses.field, "re": re, "Iterable": collections.abc.Iterable,
             "Mapping": collections.abc.Mapping, "Any": typing.Any, "TYPE_CHECKING": False, "WeightsMapping": dict}  # fmt: skip
    scope = lift(utils, "WeightsMapper", scope={**scope, **{n: getattr(typing, n) for n in ("Optional", "Callable")}})
    model = source(whl, "vllm/models/deepseek_v4/nvidia/model.py")
    return lift(model, "_make_deepseek_v4_weights_mapper", scope=scope)["_make_deepseek_v4_weights_mapper"]("fp4")


def vllm_names(whl: Path) -> set[str]:
    """Every attribute or prefix name the wheel's DeepSeek-V4 modules and the layers they use define."""
    names: set[str] = set()
    with zipfile.ZipFile(whl) as z:
        for rel in z.namelist():
            if rel.startswith(("vllm/models/deepseek_v4/", "vllm/model_executor/layers/", "vllm/model_executor/models/qwen3_dspark")) and rel.endswith(".py"):  # fmt: skip
                text = z.read(rel).decode()
                names |= set(re.findall(r"self\.(?:\w+\.)*(\w+)\s*=", text))
                names |= set(re.findall(r"""prefix[^"'\n]*["'{][^"'\n]*?\.?(\w+)["']""", text))
                names |= set(re.findall(r'"(w13_\w+|w2_\w+)"', text))
                names |= set(re.findall(r'register_parameter\(\s*"(\w+)"', text))
    return names


def test_vllm_maps_every_target_tensor_to_a_parameter_of_its_model(vllm_whl, tiny):
    _, _, t = tiny
    mapper = vllm_mapper(vllm_whl)
    known = vllm_names(vllm_whl)
    model = source(vllm_whl, "vllm/models/deepseek_v4/nvidia/model.py")
    stacked = re.findall(r'\("([\w.]+)", "([\w.]+)", \d\)', model)  # load_weights' stacked_params_mapping
    assert ("attn.fused_wqa_wkv", "attn.wq_a") in stacked and (
        "compressor.fused_wkv_wgate",
        "compressor.wgate",
    ) in stacked
    target = [n for n in t if not n.startswith("mtp.")]
    mapped = {n: mapper._map_name(n) for n in target}
    assert mapped["embed.weight"] == "model.embed_tokens.weight" and mapped["head.weight"] == "lm_head.weight"
    assert mapped["layers.1.attn.wq_b.scale"] == "model.layers.1.attn.wq_b.weight_scale_inv"
    assert mapped["layers.0.ffn.experts.3.w2.scale"] == "model.layers.0.ffn.experts.3.w2.weight_scale"
    assert mapped["layers.1.ffn.gate.bias"] == "model.layers.1.ffn.gate.e_score_correction_bias"
    assert mapped["layers.0.ffn.shared_experts.w2.weight"] == "model.layers.0.ffn.shared_experts.down_proj.weight"
    for name, new in mapped.items():
        assert new is not None, name
        for param, shard in stacked:
            if shard in new and ".experts." not in new:
                new = new.replace(shard, param)
                break
        new = re.sub(
            r"\.experts\.\d+\.w([123])\.", lambda m: ".experts.w13_" if m.group(1) != "2" else ".experts.w2_", new
        )
        parts = [p for p in new.split(".") if not p.isdigit() and p not in ("model", "layers", "weight")]
        assert all(p in known or p.startswith(("w13_", "w2_")) for p in parts), (
            name,
            new,
            [p for p in parts if p not in known],
        )


def test_vllm_dspark_remaps_every_mtp_tensor(vllm_whl, tiny):
    _, config, t = tiny
    text = source(vllm_whl, "vllm/models/deepseek_v4/nvidia/dspark.py")
    remap = lift(text, "DSparkDeepseekV4ForCausalLM._remap_dspark_name", scope={"re": re})["_remap_dspark_name"]
    out = {n: remap(None, n) for n in t if n.startswith("mtp.")}
    assert out["mtp.0.main_proj.weight"] == "model.main_proj.weight"
    assert out["mtp.2.markov_head.markov_w1.weight"] == "model.markov_head.markov_w1.weight"
    assert out["mtp.2.hc_head_fn"] == "model.hc_head_fn" and out["mtp.2.norm.weight"] == "model.norm.weight"
    assert out["mtp.1.attn.wq_b.scale"] == "model.layers.1.attn.wq_b.scale"
    assert {int(v.split(".")[2]) for v in out.values() if v.startswith("model.layers.")} == set(
        range(config["n_mtp_layers"])
    )
    assert re.search(r"getattr\(config, \"n_mtp_layers\", None\) or 3", text)  # the stages vLLM builds


def test_vllms_config_class_and_dspark_block_rule(vllm_whl, tiny):
    _, config, _ = tiny

    class PretrainedConfig:  # transformers' base, reduced to what DeepseekV4Config calls
        def __init__(self, **kwargs):
            for k, v in kwargs.items():
                setattr(self, k, v)

    text = source(vllm_whl, "vllm/transformers_utils/configs/deepseek_v4.py")
    cls = lift(text, "DeepseekV4Config", scope={"PretrainedConfig": PretrainedConfig, "Any": object})[
        "DeepseekV4Config"
    ]
    cfg = cls(**json.loads(json.dumps(config)))
    assert (
        cfg.model_type == "deepseek_v4" and cfg.rope_parameters["rope_type"] == "yarn"
    )  # build_deepseek_v4_rope reads it
    assert cfg.max_position_embeddings == 1048576 and cfg.compress_ratios[:3] == [0, 4, 128]
    spec = source(vllm_whl, "vllm/config/speculative.py")
    assert '"dspark_block_size",' in spec and "self.num_speculative_tokens < dspark_block_size" in spec
    assert cfg.dspark_block_size <= 6  # the profile's k = 6 passes vLLM's DSpark rule


def test_sglang_remaps_every_tensor(sglang_whl, tiny):
    _, config, t = tiny
    text = source(sglang_whl, "sglang/srt/models/deepseek_v4.py")
    remap = lift(text, "DeepseekV4ForCausalLM.remap_weight_name_to_dpsk_hf_format",
                 scope={"Optional": object})["remap_weight_name_to_dpsk_hf_format"]  # fmt: skip
    out = {n: remap(n, num_hidden_layers=config["num_hidden_layers"]) for n in t if not n.startswith("mtp.")}
    assert out["embed.weight"] == "model.embed_tokens.weight" and out["hc_head_fn"] == "model.hc_head_fn"
    assert out["layers.1.attn.indexer.wq_b.scale"] == "model.layers.1.self_attn.indexer.wq_b.weight_scale_inv"
    assert out["layers.0.ffn.experts.2.w3.scale"] == "model.layers.0.mlp.experts.2.up_proj.weight_scale_inv"
    assert out["layers.0.ffn.gate.tid2eid"] == "model.layers.0.mlp.topk.tid2eid"
    assert out["layers.0.attn_norm.weight"] == "model.layers.0.input_layernorm.weight"
    assert not [v for v in out.values() if v.endswith(".scale") or ".attn." in v or ".ffn." in v]
    dspark = source(sglang_whl, "sglang/srt/models/deepseek_v4_dspark.py")
    remap_d = lift(dspark, "DeepseekV4ForCausalLMDSpark._remap_dspark_weight_name",
                   scope={"Optional": object})["_remap_dspark_weight_name"]  # fmt: skip
    me = SimpleNamespace(confidence_head=None)
    mtp = {n: remap_d(me, n) for n in t if n.startswith("mtp.")}
    assert mtp["mtp.2.markov_head.markov_w2.weight"] == "markov_head.markov_w2.weight"
    assert mtp["mtp.1.ffn.experts.0.w1.scale"] == "stages.1.mlp.experts.0.gate_proj.weight_scale_inv"
    assert all(v is not None for v in mtp.values())


def test_sglangs_flash_defaults_are_the_checkpoints_shapes(sglang_whl, tiny):
    _, config, _ = tiny
    text = source(sglang_whl, "sglang/srt/configs/deepseek_v4.py")
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "DeepSeekV4Config")
    flash = {n.target.id: ast.literal_eval(n.value) for n in cls.body
             if isinstance(n, ast.AnnAssign) and n.value is not None and not isinstance(n.value, ast.Call)}  # fmt: skip
    for key in ("hidden_size", "q_lora_rank", "o_lora_rank", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank",
                "index_head_dim", "index_n_heads", "index_topk", "window_size", "hc_mult", "hc_sinkhorn_iters",
                "num_experts_per_tok", "n_shared_experts", "compress_rope_theta"):  # fmt: skip
        assert config[key] == flash[key], key
    for key in ("num_attention_heads", "o_groups", "moe_intermediate_size"):  # split over TP2
        assert config[key] * 2 == flash[key], key
    probe = text[text.index("def try_detect_fp4_experts") :]
    assert '"I8"' in probe  # SGLang reads int8-packed experts as MXFP4


# ---- the census of a DSV4 start: one count per JIT kind


def test_census_counts_each_dsv4_kind_apart(tmp_path):
    """The six caches a DSV4 start compiles into, each under its own directory of the cache root (the
    variables first_start_gpu.py sets: JIT_CACHE_ENV plus CuTe DSL's), are counted per kind."""
    sys.path.insert(0, str(ROOT))
    from servebuild.engines.base import JIT_CACHE_ENV

    import first_start_gpu

    dirs = {**JIT_CACHE_ENV, **first_start_gpu.VLLM_DSV4_EXTRA_ENV}
    assert {dirs[v] for v in ("TILELANG_CACHE_DIR", "TVM_FFI_CACHE_DIR", "DG_JIT_CACHE_DIR", "CUTE_DSL_CACHE_DIR",
                              "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")} == {  # fmt: skip
        "tilelang", "tvm-ffi", "deep_gemm", "cute-dsl", "triton", "inductor"}  # fmt: skip
    cache = tmp_path / "cache"
    cache.mkdir()
    before = tmp_path / "before.json"
    tool = [sys.executable, str(ROOT / "servebuild" / "tools" / "servebuild_cache.py"), "census", "--cache", str(cache)]
    env = {**os.environ, "SERVEBUILD_MANIFEST": "/nonexistent"}
    subprocess.run([*tool, "--listing", str(before)], check=True, capture_output=True, env=env)
    made = {"tilelang": ["kernel_lib.so", "kernel.cu"], "tvm-ffi": ["mod.so"], "deep_gemm": ["a.cubin", "b.cubin", "c.cubin"],
            "cute-dsl": ["k.o"], "triton": ["x.json", "x.cubin"], "inductor": ["fx.py"]}  # fmt: skip
    for kind, names in made.items():
        for name in names:
            (cache / kind).mkdir(exist_ok=True)
            (cache / kind / name).write_text("compiled")
    (cache / "tilelang" / "build.log").write_text("log")
    done = subprocess.run([*tool, "--since", str(before)], check=True, capture_output=True, text=True, env=env)
    counted = json.loads(done.stdout)
    assert counted["changed"] == {k: len(v) for k, v in made.items()}
    assert counted["logs"] == {"tilelang": 1}


# ---- the warm flow against a stand-in server


def engine_folder(root: Path) -> Path:
    """A vllm/ folder holding the split rule (the notes' rendition, in the engine's shape) and the call sites."""
    mhc = root / "vllm" / "model_executor" / "kernels" / "mhc"
    mhc.mkdir(parents=True)
    (mhc / "tilelang_kernels.py").write_text(
        "@cache\ndef compute_num_split(block_k: int, k: int | None, grid_size: int) -> int:\n"
        "    device_props = torch.cuda.get_device_properties(0)\n"
        "    n_sms = device_props.multi_processor_count\n"
        "    split_k = n_sms // grid_size\n"
        "    if k is not None:\n"
        "        num_block_k = cdiv(k, block_k)\n"
        "        split_k = min(split_k, num_block_k // 4)\n"
        "    split_k = max(split_k, 1)\n"
        "    return split_k\n"
    )
    (mhc / "tilelang.py").write_text("\n".join([s[4] for s in dsv4_warm.SITES] + list(dsv4_warm.CALL_TEXTS)))
    return root


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_warm_starts_the_server_sends_one_prefill_per_bucket_and_stops_it(tmp_path):
    port, log = free_port(), tmp_path / "requests.jsonl"
    server = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'dsv4_standin_server.py'} {port} {log}"
    out = tmp_path / "warm.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dsv4_warm.py"), "warm", "--serve", server,
         "--serve-log", str(tmp_path / "server.log"), "--url", f"http://127.0.0.1:{port}", "--sms", "132",
         "--source", str(engine_folder(tmp_path / "engine")), "--health-timeout", "30", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert [len(r["prompt"]) for r in sent] == [*EDGES_132, 32]  # one prefill per bucket, then a decode
    assert [r["max_tokens"] for r in sent] == [1] * 21 + [64]
    assert len({tuple(r["prompt"][:16]) for r in sent}) == len(sent)  # no shared prefix for the cache to hit
    assert all(4 <= t < 260 for r in sent for t in r["prompt"])  # byte tokens of tiny_dsv4's tokenizer
    result = json.loads(out.read_text())
    assert result["plan"]["warm_prefills"] == EDGES_132 and "healthy_after_s" in json.loads(run.stdout)
    with pytest.raises(OSError):  # stopped after
        import urllib.request

        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)


def test_tail_against_the_stand_in_reports_percentiles_and_every_bucket(tmp_path):
    port, log = free_port(), tmp_path / "requests.jsonl"
    server = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'dsv4_standin_server.py'} {port} {log}"
    out = tmp_path / "tail.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dsv4_warm.py"), "tail", "--serve", server,
         "--serve-log", str(tmp_path / "server.log"), "--url", f"http://127.0.0.1:{port}", "--sms", "132",
         "--source", str(engine_folder(tmp_path / "engine")), "--health-timeout", "30", "--requests", "40",
         "--output-tokens", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert result["requests"] == 40 and "partial" not in result
    assert {r["bucket"] for r in result["rows"]} == set(EDGES_132)
    assert result["ttft_s_p50"] <= result["ttft_s_p90"] <= result["ttft_s_p99"] <= result["ttft_s_max"]
    assert [len(json.loads(x)["prompt"]) for x in log.read_text().splitlines()] == [
        r["prompt_tokens"] for r in result["rows"]
    ]


# ---- scripts/dsv4_kernels.py: every mHC variant built at once (its GPU half runs on the device)


def kernels_plan(whl: Path, sms: int = 132) -> dict:
    return dsv4_warm.make_plan(SimpleNamespace(sms=str(sms), source=str(whl), max_batched=8192))


@pytest.mark.parametrize("sms", [114, 132])
def test_one_job_per_kernel_variant_and_every_variant_reached(vllm_whl, sms):
    import dsv4_kernels

    plan = kernels_plan(vllm_whl, sms)
    split = dsv4_warm.split_rule(source(vllm_whl, dsv4_warm.SPLIT_FILE), sms)
    jobs = dsv4_kernels.jobs_of(plan)
    built = []
    for site, t in jobs:  # a 'layer0' job builds the broadcast pre's variant, a 'pre' job the residual one
        (v,) = [v for v in dsv4_warm.variants(split, t) if v[0] == site or v[0] == "small"]
        built.append(v)
    wanted = {(s, int(n)) for s, per in plan["variants"].items() for n in per}
    assert set(built) == wanted, sorted(wanted - set(built))
    assert len(built) == len(wanted)  # none built twice: no two workers write one cache entry


def test_the_wrappers_it_calls_take_what_it_passes(vllm_whl):
    import dsv4_kernels

    text = source(vllm_whl, dsv4_warm.CALLS_FILE)
    dsv4_kernels.check_wrappers(text)  # the engine's own signatures
    moved = text.replace("def mhc_post_tilelang(\n    x: torch.Tensor,", "def mhc_post_tilelang(\n    y: torch.Tensor,")
    assert moved != text
    with pytest.raises(dsv4_kernels.KernelError, match=r"mhc_post_tilelang\(y, residual"):
        dsv4_kernels.check_wrappers(moved)
    with pytest.raises(dsv4_kernels.KernelError, match="no hc_head_fused_kernel_tilelang"):
        dsv4_kernels.check_wrappers(text.replace("def hc_head_fused_kernel_tilelang(", "def hc_head_other("))
    assert "self.hc_post_alpha = 2.0" in source(vllm_whl, dsv4_kernels.MODEL_FILE)


def test_the_keying_values_come_from_the_checkpoint(tmp_path, vllm_whl):
    import dsv4_kernels

    config = {"hidden_size": 4096, "hc_mult": 4, "rms_norm_eps": 1e-6, "hc_eps": 1e-6, "hc_sinkhorn_iters": 20}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert dsv4_kernels.model_values(str(tmp_path), str(vllm_whl)) == config
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(dsv4_kernels.KernelError, match=r"config.json: no hc_mult, rms_norm_eps, hc_eps"):
        dsv4_kernels.model_values(str(tmp_path), str(vllm_whl))
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(dsv4_kernels.KernelError, match="not a JSON object"):
        dsv4_kernels.model_values(str(tmp_path), str(vllm_whl))


def test_the_tiny_checkpoint_carries_every_keying_value(tiny):
    import dsv4_kernels

    _, config, _ = tiny
    assert all(k in config for k in dsv4_kernels.CONFIG_KEYS)
    assert (config["hidden_size"], config["hc_mult"]) == (dsv4_warm.HIDDEN, dsv4_warm.HC_MULT)


@pytest.mark.parametrize(
    "argv, said",
    [(["--jobs", "0"], "--jobs and --max-batched"), (["--sms", "x"], "--sms 'x'"), ([], "cannot read the model")],
)
def test_kernels_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, vllm_whl, argv, said):
    import dsv4_kernels

    model = tmp_path / "m"
    if argv:  # a model it can read: the argument is what is refused
        model.mkdir()
        keys = {"hidden_size": 4096, "hc_mult": 4, "rms_norm_eps": 1e-6, "hc_eps": 1e-6, "hc_sinkhorn_iters": 20}
        (model / "config.json").write_text(json.dumps(keys))
    assert dsv4_kernels.main(["--model", str(model), "--source", str(vllm_whl), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err


# ---- SGLang's half (issue 44): its mHC rule and prewarm, the profile's argv, the stack over the wheel


def test_sglangs_own_split_rule_gives_vllms_residual_buckets_and_prewarms_them_all(sglang_whl, capsys):
    assert dsv4_warm.main(["plan", "--engine", "sglang", "--sms", "132", "--max-batched", "12288",
                           "--source", str(sglang_whl)]) == 0  # fmt: skip
    plan = json.loads(capsys.readouterr().out)
    assert plan["engine"] == "sglang" and plan["small"] == [] and list(plan["variants"]) == ["pre"]
    assert plan["edges"] == EDGES_132[1:]  # no small-FMA path (17) and no layer-0 site: the residual site's
    assert plan["prewarmed_at_load"] == plan["edges"] and plan["prewarm_at_load"][-1] == 12288
    lengths = plan["tail_lengths"]
    assert len(lengths) == 100 and min(lengths) >= 17 and max(lengths) <= 8192
    assert {dsv4_warm.bucket_of(t, plan["edges"]) for t in lengths} == {0, *plan["edges"]}
    split, _ = dsv4_warm.sg_rules(str(sglang_whl), 114)
    ours = notes_rule(114)
    assert all(split(t, 16384) == ours(64, 16384, dsv4_warm.cdiv(t, 64)) for t in range(1, 9000, 13))


def test_a_changed_sglang_mhc_path_is_one_line(tmp_path, sglang_whl, capsys):
    with zipfile.ZipFile(sglang_whl) as z:
        for rel in (dsv4_warm.SG_SPLIT_FILE, dsv4_warm.SG_MODEL_FILE):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(z.read(rel))
    model = tmp_path / dsv4_warm.SG_MODEL_FILE
    model.write_text(model.read_text().replace("self._prewarm_mhc_pre_kernels()", "pass"))
    assert dsv4_warm.main(["plan", "--engine", "sglang", "--sms", "132", "--source", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "self._prewarm_mhc_pre_kernels()" in err and "SGLang's mHC path changed" in err


def test_sglang_dsv4_argv_is_the_recipes_profile_less_what_is_left_out(tiny):
    import first_start_gpu as fsg
    from servebuild.recipe.load import load_recipe

    profile = load_recipe("sglang-native-fp8", ROOT).recipe.launch.profiles["sglang-native-fp8"]
    fsg.WORKLOAD["name"] = "dsv4"
    try:
        argv, env = fsg.server_argv("sglang", "/m")
        plain, plain_env = fsg.server_argv("sglang", "/m", spec=False)
    finally:
        fsg.WORKLOAD["name"] = "tiny"
    assert env == plain_env == dict(profile.env) and env["SGLANG_DSV4_ADAPTIVE_PREFILL"] == "1"
    flags = [a for a in argv if a.startswith("--")]
    for left in fsg.SGLANG_DSV4_LEFT_OUT:
        assert fsg.SGLANG_DSV4_LEFT_OUT[left] and left in profile.args
    assert flags.count("--model-path") == flags.count("--context-length") == flags.count("--mem-fraction-static") == 1
    assert "--tp-size" not in argv and "--max-total-tokens" not in argv and "1053184" not in argv
    after = argv[argv.index("--mem-fraction-static") + 2 :]  # the profile's own part, in its order
    expect, i = [], 0
    while i < len(profile.args):
        if profile.args[i] in fsg.SGLANG_DSV4_LEFT_OUT:
            i += 2
            continue
        expect.append(profile.args[i])
        i += 1
    assert after == expect and "--disable-custom-all-reduce" in after and after[-2:] == ["--warmups", "prefill_shapes"]
    assert (
        argv[argv.index("--context-length") + 1] == "16384" and argv[argv.index("--mem-fraction-static") + 1] == "0.85"
    )
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "6"
    gone = [a for a in argv if a not in plain]
    assert gone == [
        "--speculative-algorithm",
        "DSPARK",
        "--speculative-num-draft-tokens",
        "6",
        "--speculative-moe-runner-backend",
    ]  # fmt: skip  ("marlin" stays: --moe-runner-backend's)
    assert len(argv) - len(plain) == 6 and not [a for a in plain if a.startswith("--speculative")]


def stacked_file(whl: Path, tmp: Path, rel: str) -> str:
    """The wheel's file with the recipe's local stack applied by GNU patch (-p2 strips a/python/)."""
    base = tmp / "python"
    with zipfile.ZipFile(whl) as z:
        for f in ("sglang/srt/models/deepseek_v4.py", "sglang/srt/models/deepseek_v4_dspark.py",
                  "sglang/srt/model_executor/pool_configurator.py", "sglang/srt/environ.py",
                  "sglang/srt/managers/scheduler.py", "sglang/jit_kernel/csrc/deepseek_v4/c_plan.cuh"):  # fmt: skip
            (base / f).parent.mkdir(parents=True, exist_ok=True)
            (base / f).write_bytes(z.read(f))
    for patch in ("sglang-dsv4-verify-pad", "sglang-dsv4-shared-expert-fusion-policy", "sglang-adaptive-prefill"):
        subprocess.run(["patch", "-p2", "--batch", "--forward", "-i", str(ROOT / "patches" / f"{patch}.patch")],
                       cwd=base, check=True, capture_output=True)  # fmt: skip
    return (base / rel).read_text()


def test_the_stacks_dspark_loader_maps_every_mtp_tensor_with_fusion_off_and_on(sglang_whl, tiny, tmp_path):
    _, config, t = tiny
    text = stacked_file(sglang_whl, tmp_path, "sglang/srt/models/deepseek_v4_dspark.py")
    remap = lift(text, "DeepseekV4ForCausalLMDSpark._remap_dspark_weight_name",
                 scope={"Optional": object})["_remap_dspark_weight_name"]  # fmt: skip
    cfg = SimpleNamespace(n_routed_experts=config["n_routed_experts"])
    for fused in (0, 1):
        me = SimpleNamespace(confidence_head=None, num_fused_shared_experts=fused, config=cfg)
        out = {n: remap(me, n) for n in t if n.startswith("mtp.")}
        assert all(v is not None for v in out.values())
        shared = [v for n, v in out.items() if ".ffn.shared_experts." in n]
        assert shared and all((f".mlp.experts.{cfg.n_routed_experts}." in v) == bool(fused) for v in shared)
        assert all(".mlp.shared_experts." in v for v in shared) != bool(fused)


def test_overlay_apply_replaces_only_the_wheels_files_and_is_idempotent(tmp_path):
    import hashlib

    import dsv4_overlay

    site, overlay = tmp_path / "site", tmp_path / "overlay"
    (site / "sglang/srt").mkdir(parents=True)
    (overlay / "sglang/srt/managers").mkdir(parents=True)
    (site / "sglang/srt/environ.py").write_text("wheel\n")
    (overlay / "sglang/srt/environ.py").write_text("patched\n")
    (overlay / "sglang/srt/managers/adaptive_prefill.py").write_text("new\n")
    h = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    (overlay / "overlay.json").write_text(json.dumps({"files": {
        "sglang/srt/environ.py": {"wheel_sha256": h(b"wheel\n"), "sha256": h(b"patched\n")},
        "sglang/srt/managers/adaptive_prefill.py": {"wheel_sha256": None, "sha256": h(b"new\n")}}}))  # fmt: skip
    script = [
        sys.executable,
        str(ROOT / "scripts" / "dsv4_overlay.py"),
        "apply",
        "--overlay",
        str(overlay),
        "--site",
        str(site),
    ]
    first = subprocess.run(script, capture_output=True, text=True)
    assert first.returncode == 0 and "2 files replaced" in first.stdout, first.stderr
    assert (site / "sglang/srt/environ.py").read_text() == "patched\n"
    again = subprocess.run(script, capture_output=True, text=True)
    assert again.returncode == 0 and "0 files replaced" in again.stdout
    (site / "sglang/srt/environ.py").write_text("another release\n")
    (site / "sglang/srt/managers/adaptive_prefill.py").unlink()
    bad = subprocess.run(script, capture_output=True, text=True)
    assert (
        bad.returncode == 2 and bad.stderr.count("\n") == 1 and "neither the wheel's file nor the stack's" in bad.stderr
    )
    assert not (site / "sglang/srt/managers/adaptive_prefill.py").exists()  # nothing written on a refusal
    assert dsv4_overlay.main(["apply", "--overlay", str(tmp_path / "none"), "--site", str(site)]) == 2
