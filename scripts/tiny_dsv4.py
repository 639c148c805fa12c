"""Make a tiny random DeepSeek-V4 checkpoint in DeepSeek-V4-Flash's own format (issue 44): the model the
DSV4 warm flow and the tail test serve, with the per-layer shapes of one TP2 rank of the real model so
that every JIT kernel it compiles (TileLang mHC, DeepGEMM FP8, CuTe DSL compressor/indexer, FlashMLA,
Marlin MXFP4) is keyed as the real model's is.

    python scripts/tiny_dsv4.py OUT_DIR [--layers 3 --compress-ratios 0,4,128 --experts 8 --mtp-stages 3
                                         --hash-layers 1 --vocab 1024 --markov-rank 256 --shard-mb 512
                                         --seed 0 --std 0.02]

Kept from DeepSeek-V4-Flash (per TP2 rank where the model is split): hidden 4096, hc_mult 4, 32 query
heads (64 / 2) in 4 output groups (8 / 2), head_dim 512 with rope 64, q and o LoRA ranks 1024, the
indexer's 64 heads x 128 with top-k 512, sliding window 128, expert width 1024 (2048 / 2), top-6 routing,
one shared expert. Made small: the layers (3 by default, one per compress ratio 0, 4 and 128), the
routed experts (8), the vocabulary (1024 rows) and three DSpark stages `mtp.0..2`.

The format is the checkpoint's, not an engine's: tensor names as the checkpoint ships them (`embed`,
`head`, `norm`, `hc_head_*`, `layers.N.{attn,ffn,attn_norm,ffn_norm,hc_*}`, `*.scale`, `mtp.S.*`),
FP8 e4m3 linears with one UE8M0 scale per 128x128 block, routed experts in MXFP4 (two e2m1 values
packed per int8 byte, one UE8M0 scale byte per 32), the rest bf16 or fp32, in safetensors shards with
`model.safetensors.index.json`; config.json names both engines' fields (vLLM's `num_hash_layers`,
`sliding_window`; SGLang's `n_hash_layers`, `window_size`) and DSpark's (`dspark_block_size` 5, ...).
The tokenizer is made here: byte-level BPE with no merges, so a prompt of N ASCII characters is N
tokens, padded with unreachable entries to the vocabulary size so every id decodes.

Needs numpy only (no torch, no transformers). Every option is checked before any file or folder is
made: a bad value is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from script_args import BadArgs, OneLineParser, positive_float, whole

# DeepSeek-V4-Flash's shapes (SGLang 0.5.16's DeepSeekV4Config defaults are the Flash values), per TP2 rank
HIDDEN = 4096
HC_MULT = 4
HEADS = 32  # 64 / TP2
O_GROUPS = 4  # 8 / TP2
HEAD_DIM = 512
ROPE_DIM = 64
Q_LORA = 1024
O_LORA = 1024
INDEX_HEADS = 64  # the indexer is replicated, not split
INDEX_DIM = 128
INDEX_TOPK = 512
WINDOW = 128
EXPERT_WIDTH = 1024  # 2048 / TP2
TOP_K = 6
BLOCK = 128  # FP8 weight block
MX_GROUP = 32  # MXFP4 scale group
DSPARK_BLOCK = 5
SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜dspark▁noise｜>"]
NOISE_ID = 3
COMPRESS_RATIOS = (0, 4, 128)

# safetensors dtype -> bytes per element (the packed types count their storage bytes)
DTYPE_BYTES = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "I32": 4}


def ratio_list(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    if not 1 <= len(parts) <= 64 or any(p.strip() not in ("0", "4", "128") for p in parts):
        raise argparse.ArgumentTypeError(f"--compress-ratios {text!r}: give 1..64 of 0, 4, 128 separated by commas")
    return tuple(int(p) for p in parts)


def parser() -> OneLineParser:
    p = OneLineParser(prog="tiny_dsv4.py", description="a tiny random DeepSeek-V4-Flash-format checkpoint")
    p.add_argument("out")
    p.add_argument("--compress-ratios", type=ratio_list, default=COMPRESS_RATIOS, help="one per layer (0, 4, 128)")
    p.add_argument("--experts", type=whole("--experts", TOP_K, 256), default=8, help="routed experts (>= top-k 6)")
    p.add_argument("--mtp-stages", type=whole("--mtp-stages", 1, 8), default=3, help="DSpark stages mtp.0..S-1")
    p.add_argument("--hash-layers", type=whole("--hash-layers", 0, 64), default=1, help="hash-routed MoE layers")
    p.add_argument("--vocab", type=whole("--vocab", 260, 1 << 18), default=1024, help="vocabulary rows")
    p.add_argument("--markov-rank", type=whole("--markov-rank", 1, 4096), default=256)
    p.add_argument("--shard-mb", type=whole("--shard-mb", 1, 1 << 16), default=512)
    p.add_argument("--seed", type=whole("--seed", 0, 2**32 - 1), default=0)
    p.add_argument("--std", type=positive_float("--std", 1.0), default=0.02, help="std of the bf16/fp32 weights")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.hash_layers > len(args.compress_ratios):
        raise BadArgs(f"--hash-layers {args.hash_layers} is more than the {len(args.compress_ratios)} layers")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadArgs(f"{args.out}: exists and is not an empty folder")
    return args


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    init: str  # fp8, e8m0, fp4, normal, ones, zeros, sink, tid2eid

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


def fp8_linear(name: str, out_dim: int, in_dim: int) -> list[Tensor]:
    """An FP8 e4m3 linear and its UE8M0 scale per 128x128 block, as the checkpoint ships them."""
    return [
        Tensor(f"{name}.weight", "F8_E4M3", (out_dim, in_dim), "fp8"),
        Tensor(f"{name}.scale", "F8_E8M0", (-(-out_dim // BLOCK), -(-in_dim // BLOCK)), "e8m0"),
    ]


def mxfp4_linear(name: str, out_dim: int, in_dim: int) -> list[Tensor]:
    """An MXFP4 expert projection: e2m1 pairs packed in int8, one UE8M0 scale byte per 32 inputs."""
    return [
        Tensor(f"{name}.weight", "I8", (out_dim, in_dim // 2), "fp4"),
        Tensor(f"{name}.scale", "F8_E8M0", (out_dim, in_dim // MX_GROUP), "e8m0"),
    ]


def bf16(name: str, *shape: int, init: str = "normal") -> Tensor:
    return Tensor(name, "BF16", tuple(shape), init)


def f32(name: str, *shape: int, init: str = "normal") -> Tensor:
    return Tensor(name, "F32", tuple(shape), init)


def block(prefix: str, ratio: int, hashed: bool, experts: int, vocab: int) -> list[Tensor]:
    """One DeepSeek-V4 decoder block (a main layer or a DSpark stage) under `prefix`."""
    mix = (2 + HC_MULT) * HC_MULT
    out = [
        *fp8_linear(f"{prefix}.attn.wq_a", Q_LORA, HIDDEN),
        *fp8_linear(f"{prefix}.attn.wkv", HEAD_DIM, HIDDEN),
        bf16(f"{prefix}.attn.q_norm.weight", Q_LORA, init="ones"),
        bf16(f"{prefix}.attn.kv_norm.weight", HEAD_DIM, init="ones"),
        *fp8_linear(f"{prefix}.attn.wq_b", HEADS * HEAD_DIM, Q_LORA),
        *fp8_linear(f"{prefix}.attn.wo_a", O_GROUPS * O_LORA, HEADS * HEAD_DIM // O_GROUPS),
        *fp8_linear(f"{prefix}.attn.wo_b", HIDDEN, O_GROUPS * O_LORA),
        f32(f"{prefix}.attn.attn_sink", HEADS, init="zeros"),
    ]
    if ratio > 1:
        coff = 2 if ratio == 4 else 1  # the ratio-4 compressor overlaps its windows
        out += [
            bf16(f"{prefix}.attn.compressor.wkv.weight", coff * HEAD_DIM, HIDDEN),
            bf16(f"{prefix}.attn.compressor.wgate.weight", coff * HEAD_DIM, HIDDEN),
            f32(f"{prefix}.attn.compressor.ape", ratio, coff * HEAD_DIM),
            bf16(f"{prefix}.attn.compressor.norm.weight", HEAD_DIM, init="ones"),
        ]
    if ratio == 4:  # only the ratio-4 layers attend sparsely, through the indexer
        out += [
            *fp8_linear(f"{prefix}.attn.indexer.wq_b", INDEX_HEADS * INDEX_DIM, Q_LORA),
            bf16(f"{prefix}.attn.indexer.weights_proj.weight", INDEX_HEADS, HIDDEN),
            bf16(f"{prefix}.attn.indexer.compressor.wkv.weight", 2 * INDEX_DIM, HIDDEN),
            bf16(f"{prefix}.attn.indexer.compressor.wgate.weight", 2 * INDEX_DIM, HIDDEN),
            f32(f"{prefix}.attn.indexer.compressor.ape", ratio, 2 * INDEX_DIM),
            bf16(f"{prefix}.attn.indexer.compressor.norm.weight", INDEX_DIM, init="ones"),
        ]
    out.append(bf16(f"{prefix}.ffn.gate.weight", experts, HIDDEN))
    if hashed:
        out.append(Tensor(f"{prefix}.ffn.gate.tid2eid", "I32", (vocab, TOP_K), "tid2eid"))
    else:
        out.append(f32(f"{prefix}.ffn.gate.bias", experts, init="zeros"))
    for e in range(experts):
        out += mxfp4_linear(f"{prefix}.ffn.experts.{e}.w1", EXPERT_WIDTH, HIDDEN)
        out += mxfp4_linear(f"{prefix}.ffn.experts.{e}.w2", HIDDEN, EXPERT_WIDTH)
        out += mxfp4_linear(f"{prefix}.ffn.experts.{e}.w3", EXPERT_WIDTH, HIDDEN)
    out += [
        *fp8_linear(f"{prefix}.ffn.shared_experts.w1", EXPERT_WIDTH, HIDDEN),
        *fp8_linear(f"{prefix}.ffn.shared_experts.w2", HIDDEN, EXPERT_WIDTH),
        *fp8_linear(f"{prefix}.ffn.shared_experts.w3", EXPERT_WIDTH, HIDDEN),
        bf16(f"{prefix}.attn_norm.weight", HIDDEN, init="ones"),
        bf16(f"{prefix}.ffn_norm.weight", HIDDEN, init="ones"),
        f32(f"{prefix}.hc_attn_fn", mix, HC_MULT * HIDDEN),
        f32(f"{prefix}.hc_ffn_fn", mix, HC_MULT * HIDDEN),
        f32(f"{prefix}.hc_attn_base", mix, init="zeros"),
        f32(f"{prefix}.hc_ffn_base", mix, init="zeros"),
        f32(f"{prefix}.hc_attn_scale", 3, init="ones"),
        f32(f"{prefix}.hc_ffn_scale", 3, init="ones"),
    ]
    return out


def hc_head(prefix: str) -> list[Tensor]:
    return [
        f32(f"{prefix}hc_head_fn", HC_MULT, HC_MULT * HIDDEN),
        f32(f"{prefix}hc_head_base", HC_MULT, init="zeros"),
        f32(f"{prefix}hc_head_scale", 1, init="ones"),
    ]


def target_layer_ids(layers: int, stages: int) -> list[int]:
    """The target layers whose hidden states feed DSpark (one per stage), spread over the layers."""
    return sorted({round(i * (layers - 1) / max(stages - 1, 1)) for i in range(stages)})


def plan(args: argparse.Namespace) -> tuple[dict, list[Tensor]]:
    """config.json and every tensor (name, dtype, shape) the checkpoint holds, in file order."""
    ratios = list(args.compress_ratios)
    layers = len(ratios)
    targets = target_layer_ids(layers, args.mtp_stages)
    tensors = [bf16("embed.weight", args.vocab, HIDDEN)]
    for i, ratio in enumerate(ratios):
        tensors += block(f"layers.{i}", ratio, i < args.hash_layers, args.experts, args.vocab)
    tensors += [bf16("norm.weight", HIDDEN, init="ones"), *hc_head(""), bf16("head.weight", args.vocab, HIDDEN)]
    for s in range(args.mtp_stages):
        if s == 0:
            tensors += fp8_linear("mtp.0.main_proj", HIDDEN, HIDDEN * len(targets))
            tensors.append(bf16("mtp.0.main_norm.weight", HIDDEN, init="ones"))
        tensors += block(f"mtp.{s}", 0, False, args.experts, args.vocab)  # sliding-window only
        if s == args.mtp_stages - 1:
            tensors += [bf16(f"mtp.{s}.norm.weight", HIDDEN, init="ones"), *hc_head(f"mtp.{s}.")]
            tensors += [
                bf16(f"mtp.{s}.markov_head.markov_w1.weight", args.vocab, args.markov_rank),
                bf16(f"mtp.{s}.markov_head.markov_w2.weight", args.vocab, args.markov_rank),
            ]
    config = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "torch_dtype": "bfloat16",
        "vocab_size": args.vocab,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
        "hidden_size": HIDDEN,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "qk_rope_head_dim": ROPE_DIM,
        "qk_nope_head_dim": HEAD_DIM - ROPE_DIM,
        "v_head_dim": HEAD_DIM,
        "kv_lora_rank": HEAD_DIM,
        "q_lora_rank": Q_LORA,
        "o_lora_rank": O_LORA,
        "o_groups": O_GROUPS,
        "index_n_heads": INDEX_HEADS,
        "index_head_dim": INDEX_DIM,
        "index_topk": INDEX_TOPK,
        "sliding_window": WINDOW,
        "window_size": WINDOW,
        "compress_ratios": ratios + [0] * args.mtp_stages,
        "compress_rope_theta": 40000,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn",
            "rope_type": "yarn",
            "factor": 16,
            "original_max_position_embeddings": 65536,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "max_position_embeddings": 1048576,
        "hidden_act": "silu",
        "swiglu_limit": 10.0,
        "rms_norm_eps": 1e-6,
        "hc_mult": HC_MULT,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "n_routed_experts": args.experts,
        "num_experts_per_tok": TOP_K,
        "n_shared_experts": 1,
        "moe_intermediate_size": EXPERT_WIDTH,
        "intermediate_size": EXPERT_WIDTH,
        "first_k_dense_replace": 0,
        "moe_layer_freq": 1,
        "n_group": 1,  # Flash: 8 groups of 32 experts; with 8 experts, one group (no group-limited routing)
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sqrtsoftplus",
        "routed_scaling_factor": 1.5,
        "norm_topk_prob": True,
        "num_hash_layers": args.hash_layers,
        "n_hash_layers": args.hash_layers,
        "expert_dtype": "fp4",
        "quantization_config": {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "scale_fmt": "ue8m0",
            "weight_block_size": [BLOCK, BLOCK],
        },
        "num_nextn_predict_layers": 1,
        "n_mtp_layers": args.mtp_stages,
        "dspark_block_size": DSPARK_BLOCK,
        "dspark_target_layer_ids": targets,
        "dspark_markov_rank": args.markov_rank,
        "dspark_noise_token_id": NOISE_ID,
    }
    return config, tensors


def byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table (what the ByteLevel pre-tokenizer maps bytes to)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def tokenizer_files(vocab_size: int) -> dict[str, dict]:
    alphabet = byte_alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    for a in alphabet:  # unreachable two-byte entries (no merges make them): every id up to the rows decodes
        for b in alphabet:
            if len(vocab) >= vocab_size:
                break
            vocab[a + b] = len(vocab)
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for i, tok in enumerate(SPECIALS)
    ]  # fmt: skip
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[0],
        "eos_token": SPECIALS[1],
        "pad_token": SPECIALS[2],
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 1048576,
        "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


def shards(tensors: list[Tensor], limit: int) -> list[list[Tensor]]:
    out: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if out[-1] and size + t.nbytes > limit:
            out.append([])
            size = 0
        out[-1].append(t)
        size += t.nbytes
    return out


def header(tensors: list[Tensor]) -> bytes:
    """The safetensors header: JSON of every tensor's dtype, shape and byte range, space-padded to 8."""
    entries: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        entries[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def data(t: Tensor, seed: int, std: float, experts: int):
    """The tensor's bytes: random and finite (no NaN/Inf encodings), seeded by its name."""
    import numpy as np

    digest = hashlib.sha256(f"{seed}:{t.name}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    n = math.prod(t.shape)
    if t.init == "fp8":  # e4m3 with the exponent field below 8: |w| < 2, never the NaN code 0x7f
        raw = rng.integers(0, 256, n, dtype=np.uint8)
        return (raw & 0x80) | (raw & 0x3F)
    if t.init == "e8m0":  # 2^-8: the FP8/FP4 weights' scale; 0xff (NaN) never appears
        return np.full(n, 127 - 8, dtype=np.uint8)
    if t.init == "fp4":  # any nibble is a finite e2m1 value
        return rng.integers(0, 256, n, dtype=np.uint8)
    if t.init == "tid2eid":  # each token's top-k experts, distinct
        rows, k = t.shape
        return np.argsort(rng.random((rows, experts)), axis=1)[:, :k].astype("<i4")
    if t.init == "zeros":
        values = np.zeros(n, dtype=np.float32)
    elif t.init == "ones":
        values = np.ones(n, dtype=np.float32)
    else:
        values = (rng.standard_normal(n, dtype=np.float32) * np.float32(std)).astype(np.float32)
    if t.dtype == "F32":
        return values.astype("<f4")
    return (values.view(np.uint32) >> 16).astype("<u2")  # bf16: the upper half of each float32


def write(out: Path, config: dict, tensors: list[Tensor], args: argparse.Namespace) -> int:
    out.mkdir(parents=True, exist_ok=True)
    groups = shards(tensors, args.shard_mb << 20)
    weight_map, total = {}, 0
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        with open(out / name, "wb") as f:
            f.write(header(group))
            for t in group:
                f.write(data(t, args.seed, args.std, args.experts).tobytes())
                weight_map[t.name] = name
                total += t.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    generation = {"bos_token_id": 0, "eos_token_id": 1, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=1) + "\n")
    for fname, body in tokenizer_files(args.vocab).items():
        (out / fname).write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return total


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadArgs as exc:
        print(f"tiny_dsv4.py: {exc}", file=sys.stderr)
        return 2
    config, tensors = plan(args)
    total = write(Path(args.out), config, tensors, args)
    print(f"{args.out}: {len(tensors)} tensors, {total} bytes, layers {config['compress_ratios']}, "
          f"{args.experts} experts, {args.mtp_stages} DSpark stages, vocab {args.vocab}")  # fmt: skip
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
