"""Make a tiny random Llama with a real tokenizer, both local (no hub): the model the bench tests serve
on the CPU with `transformers serve`, and the H200 runs serve with SGLang.

    python scripts/tiny_model.py OUT_DIR [--hidden 64 --layers 2 --vocab 1024 --max-positions 8192]
                                         [--embedding-rows N]

The tokenizer is a byte-level BPE trained here on the bench's own prompts (servebuild/tools/bench_prompts),
so every prompt the bench sends tokenizes to real, varied ids; the weights are random (seed 0).
--embedding-rows pads the vocabulary (embedding and head rows) to N, as real checkpoints pad theirs: an
engine warm-up that sends random ids (SGLang's prefill_shapes sends ids below 2**16) stays in range.
Every option (whole numbers in range, --hidden a multiple of --heads, --heads of --kv-heads) and OUT (absent
or an empty folder, not a link) is checked before torch is imported or anything is made: a bad one is one
line on stderr, exit 2 (scripts/script_args.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from script_args import BadArgs, OneLineParser, new_folder, whole

PROMPTS = Path(__file__).resolve().parent.parent / "servebuild" / "tools" / "bench_prompts"
DTYPES = ("float32", "bfloat16", "float16")


def parse_args(argv: list[str]):
    """Every option checked, and OUT absent or an empty folder, before anything is made (BadArgs: one line)."""
    p = OneLineParser(prog="tiny_model.py", description="a tiny random Llama with a tokenizer made here")
    p.add_argument("out")
    p.add_argument("--hidden", type=whole("--hidden", 8, 1 << 16), default=64)
    p.add_argument("--layers", type=whole("--layers", 1, 256), default=2)
    p.add_argument("--heads", type=whole("--heads", 1, 1024), default=4)
    p.add_argument("--kv-heads", type=whole("--kv-heads", 1, 1024), default=2)
    p.add_argument("--vocab", type=whole("--vocab", 260, 1 << 20), default=1024)
    p.add_argument("--max-positions", type=whole("--max-positions", 16, 1 << 24), default=8192)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--embedding-rows", type=whole("--embedding-rows", 0, 1 << 24), default=0)
    args = p.parse_args(argv)
    if args.hidden % args.heads or (args.hidden // args.heads) % 2:
        raise BadArgs(f"--hidden {args.hidden} is not --heads {args.heads} times an even head size")
    if args.heads % args.kv_heads:
        raise BadArgs(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    args.out = new_folder("OUT", args.out)
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadArgs as exc:
        print(f"tiny_model.py: {exc}", file=sys.stderr)
        return 2
    make(args)
    return 0


def make(args) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = [path.read_text(encoding="utf-8") for path in sorted(PROMPTS.glob("*.txt"))]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=args.vocab, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    tokenizer.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=max(len(tokenizer), args.embedding_rows),
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.max_positions,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype=args.dtype,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(getattr(torch, args.dtype))
    model.save_pretrained(out)
    print(f"{out}: vocab {len(tokenizer)}, {sum(t.numel() for t in model.parameters())} parameters")


if __name__ == "__main__":
    sys.exit(main())
