"""A tiny random-init Llama and its tokenizer, built locally, so a real CPU vLLM can be run
without downloading anything.

The model is only a vehicle for telemetry: its outputs are noise, but the server's metrics
and log lines are the real thing. Needs torch, transformers and tokenizers (the vLLM venv).
"""

from __future__ import annotations

import random
from pathlib import Path

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def _corpus(rng: random.Random, sentences: int) -> list[str]:
    """Sentences of code-like words, so prompts built the same way tokenise predictably."""
    return [" ".join(f"{rng.choice(WORDS)}{rng.randrange(1000)}" for _ in range(rng.randrange(4, 16)))
            for _ in range(sentences)]


def build_tiny_model(out_dir: str | Path, seed: int = 0, vocab_size: int = 2048, max_len: int = 32768) -> Path:
    """Write a ~2M-parameter Llama (bf16, random weights) and a byte-level BPE tokenizer to out_dir."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, head_dim=64,
                         max_position_embeddings=max_len, tie_word_embeddings=True,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    return out


if __name__ == "__main__":  # pragma: no cover - convenience entry point
    import sys

    print(build_tiny_model(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
