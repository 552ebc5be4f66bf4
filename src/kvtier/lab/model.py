"""Sizes that follow from a model's architecture: KV bytes per token and parameter count.

The lab needs both: the KV of its ten documents against LMCache's CPU limit, and the
"1.5B" it prints. Both are computed from the configuration record, never typed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import RawRecordError
from ..records.model import read_model_record
from ..records.touch import Touching, carry

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


@dataclass(frozen=True)
class ModelShape(Touching):  # its sizes touch the model record when read (records.touch)
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool
    dtype_bytes: int
    qkv_bias: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head, in the model dtype."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def parameters(self) -> int:
        """Parameters of a Llama/Qwen2-style decoder: attention, gated MLP, RMS norms, embeddings."""
        kv_dim = self.kv_heads * self.head_dim
        attn = self.hidden * self.hidden * 2 + self.hidden * kv_dim * 2
        if self.qkv_bias:
            attn += self.hidden + 2 * kv_dim
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embed + self.hidden


def read_model(path: str | Path) -> ModelShape:
    """The model's shape from its record (kvtier.records.model reads and checks it)."""
    rec = read_model_record(path)
    cfg = rec.config
    if cfg["torch_dtype"] not in DTYPE_BYTES:
        raise RawRecordError(path, f"unknown torch_dtype {cfg['torch_dtype']!r}", record="config.torch_dtype")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        raise RawRecordError(path, "hidden_size is not a multiple of num_attention_heads", record="config")
    return carry(ModelShape(
        name=rec.name,
        hidden=int(cfg["hidden_size"]), intermediate=int(cfg["intermediate_size"]),
        layers=int(cfg["num_hidden_layers"]), heads=int(cfg["num_attention_heads"]),
        kv_heads=int(cfg["num_key_value_heads"]), vocab=int(cfg["vocab_size"]),
        tied_embeddings=bool(cfg["tie_word_embeddings"]), dtype_bytes=DTYPE_BYTES[cfg["torch_dtype"]],
        qkv_bias=bool(rec.architecture.get("qkv_bias", False)),
    ), path)
