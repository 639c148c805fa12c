"""Make a tiny random Llama with a real tokenizer, both local (no hub): the model the bench tests serve
on the CPU with `transformers serve`, and the H200 runs serve with SGLang.

    python scripts/tiny_model.py OUT_DIR [--hidden 64 --layers 2 --vocab 1024 --max-positions 8192]
                                         [--embedding-rows N]

The tokenizer is a byte-level BPE trained here on the bench's own prompts (servebuild/tools/bench_prompts),
so every prompt the bench sends tokenizes to real, varied ids; the weights are random (seed 0).
--embedding-rows pads the vocabulary (embedding and head rows) to N, as real checkpoints pad theirs: an
engine warm-up that sends random ids (SGLang's prefill_shapes sends ids below 2**16) stays in range.
"""

from __future__ import annotations

import argparse
from pathlib import Path

PROMPTS = Path(__file__).resolve().parent.parent / "servebuild" / "tools" / "bench_prompts"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-positions", type=int, default=8192)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--embedding-rows", type=int, default=0)
    args = p.parse_args()

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
    main()
