"""A tiny random-init Llama and its tokenizer, built locally, so a real CPU vLLM can be run
without downloading anything.

The model is only a vehicle for telemetry: its outputs are noise, but the server's metrics
and log lines are the real thing. Needs torch, transformers and tokenizers (the vLLM venv).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from . import cliargs as A

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Model shapes. "cpu" is the ~2M-parameter model of the CPU-build runs (2,048 KV bytes a token);
# "gpu" is the same kind of model sized for one GPU (device-check): 8 layers of 8 KV heads x 128,
# 32,768 KV bytes a token, the order of a production model's, so offloaded blocks have a realistic size.
GEOMETRIES: dict[str, dict[str, int]] = {
    "cpu": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 4, "head_dim": 64, "max_len": 32768},
    "gpu": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 8,
            "num_key_value_heads": 8, "head_dim": 128, "max_len": 131072},
}


def kv_bytes_per_token(geometry: str, dtype_bytes: int = 2) -> int:
    """K and V of every layer for one token: what one token of the model's KV cache takes."""
    g = GEOMETRIES[geometry]
    return 2 * g["num_hidden_layers"] * g["num_key_value_heads"] * g["head_dim"] * dtype_bytes


WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def _corpus(rng: random.Random, sentences: int) -> list[str]:
    """Sentences of code-like words, so prompts built the same way tokenise predictably."""
    return [" ".join(f"{rng.choice(WORDS)}{rng.randrange(1000)}" for _ in range(rng.randrange(4, 16)))
            for _ in range(sentences)]


def build_tiny_model(out_dir: str | Path, seed: int = 0, vocab_size: int = 2048, max_len: int | None = None,
                     geometry: str = "cpu") -> Path:
    """Write a small Llama (bf16, random weights; ~2M parameters for "cpu") and a byte-level BPE
    tokenizer to out_dir."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    shape = dict(GEOMETRIES[geometry])
    default_len = shape.pop("max_len")
    max_len = default_len if max_len is None else max_len
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(rng, 20000), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|pad|>", model_max_length=max_len)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, **shape, max_position_embeddings=max_len, tie_word_embeddings=True,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    return out


def build_parser(prog: str = "kvtier tinymodel") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Build a tiny random-weight Llama and its tokenizer (nothing downloaded).")
    ap.add_argument("out", type=A.folder_to_write, help="model folder to write")
    ap.add_argument("seed", nargs="?", type=A.SEED, default=0)
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES), default="cpu", help="cpu: the CPU-build model; gpu: sized for one GPU")
    ap.add_argument("--max-len", type=A.COUNT, help="positions (default: the geometry's); same weights and tokenizer")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    print(build_tiny_model(a.out, a.seed, max_len=a.max_len, geometry=a.geometry))
    return 0


if __name__ == "__main__":  # pragma: no cover - convenience entry point
    raise SystemExit(main())
