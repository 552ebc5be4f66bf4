"""The KV geometry of the model a server loads, from its config.json, by vLLM 0.32's rules.

What a launch needs to know before it starts (issue 33): the GPU attention block size, whether
the offloaded block (1,600 tokens) is a whole number of them (vLLM's offloading config refuses
it otherwise: vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py), the KV bytes
per token, and whether vLLM stores the pool's chunks whole for this model.

The block size follows vllm/platforms/interface.py (update_block_size_for_backend): --block-size
if given, else the backend's preferred size from CacheConfig.DEFAULT_BLOCK_SIZE (16; the CPU
backend's 128); for hybrid attention + Mamba/linear-attention models (_align_hybrid_block_size)
it is raised to the smallest multiple of the kernel block (16) whose attention page holds the
Mamba state: 16 x ceil(mamba_page / (16 x attention page of one token)), even over --block-size.
The Mamba state's page is vLLM's MambaSpec for Mamba2 layers (mamba_utils.mamba2_state_shape)
and gated-delta-net layers (gated_delta_net_state_shape), in the model's dtype at TP 1.

Whole chunks: the offloading scheduler (offloading/scheduler.py, _build_store_jobs) stores, for
each chunk, only the GPU blocks that are not 0; sliding-window and Mamba groups skip blocks (0)
inside a chunk, so their stores hold parts of chunks. Only a model whose every layer is full
attention (MLA included) is stored whole chunk by chunk.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..records.startup_args import option_value

DEFAULT_BLOCK_TOKENS = {"cuda": 16, "cpu": 128}  # CacheConfig.DEFAULT_BLOCK_SIZE; the CPU attention backend's
KERNEL_BLOCK = 16  # FlashAttention's kernel block (MultipleOf(16)): the hybrid alignment unit on CUDA
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class ModelGeometry:
    """What the server's KV cache looks like for this model (None: not known from config.json)."""

    full_attention_layers: int
    sliding_window_layers: int
    linear_layers: int  # Mamba / linear attention: a state per request, no KV per token
    mla: bool
    kv_bytes_per_token: int | None  # K and V of every attention layer (MLA: its compressed latent)
    gpu_block_tokens: int | None
    gpu_block_from: str
    mamba_page_bytes: int | None = None

    @property
    def stores_whole_chunks(self) -> bool:
        """vLLM stores every chunk whole only for a model of full-attention layers alone."""
        return self.sliding_window_layers == 0 and self.linear_layers == 0

    def record(self) -> dict[str, Any]:
        """run.yaml's server.model_geometry."""
        return {**asdict(self), "stores_whole_chunks": self.stores_whole_chunks}


def _layer_kinds(cfg: dict[str, Any], n: int) -> list[str]:
    """Each layer as "full", "sliding" or "linear", from the config's own description of them."""
    if isinstance(cfg.get("layer_types"), list):  # Gemma 3, gpt-oss, Qwen3-Next, Qwen 3.5, ...
        kinds = []
        for t in cfg["layer_types"]:
            t = str(t)
            kinds.append("sliding" if "sliding" in t or "chunked" in t else
                         "linear" if ("linear" in t or "mamba" in t or "conv" in t) else "full")
        return kinds
    if isinstance(cfg.get("layers_block_type"), list):  # Jamba, Granite 4, Falcon-H1 style
        return ["linear" if "mamba" in str(t) else "full" for t in cfg["layers_block_type"]]
    if isinstance(cfg.get("hybrid_override_pattern"), str):  # Nemotron-H: M mamba, * attention, - MLP, E MoE
        return ["linear" if c == "M" else "full" for c in cfg["hybrid_override_pattern"] if c in "M*"]
    if cfg.get("full_attention_interval"):
        k = int(cfg["full_attention_interval"])
        return ["full" if (i + 1) % k == 0 else "linear" for i in range(n)]
    window = cfg.get("sliding_window")
    if window and cfg.get("use_sliding_window", True) is not False:
        pattern = cfg.get("sliding_window_pattern")
        if pattern:  # Gemma 2/3: every pattern-th layer is global
            return ["full" if (i + 1) % int(pattern) == 0 else "sliding" for i in range(n)]
        if "max_window_layers" in cfg:  # Qwen2: layers from max_window_layers on slide
            return ["full" if i < int(cfg["max_window_layers"]) else "sliding" for i in range(n)]
        return ["sliding"] * n  # Mistral 7B v0.1: every layer slides
    return ["full"] * n


def _mamba_page(cfg: dict[str, Any], width: int) -> int | None:
    """Bytes of one Mamba/linear-attention layer's state (vLLM's MambaSpec page, TP 1, model dtype)."""
    def get(*names: str) -> int | None:
        for name in names:
            if cfg.get(name) is not None:
                return int(cfg[name])
        return None

    k_heads, v_heads = get("linear_num_key_heads"), get("linear_num_value_heads")
    if k_heads and v_heads:  # gated delta net (Qwen3-Next): conv over q, k, v; state (v_heads, v_dim, k_dim)
        k_dim, v_dim, kernel = get("linear_key_head_dim"), get("linear_value_head_dim"), get("linear_conv_kernel_dim")
        if not (k_dim and v_dim and kernel):
            return None
        conv = (k_dim * k_heads * 2 + v_dim * v_heads) * (kernel - 1)
        return (conv + v_heads * v_dim * k_dim) * width
    heads = get("mamba_n_heads", "mamba_num_heads", "num_heads")
    head_dim = get("mamba_d_head", "mamba_head_dim", "head_dim")
    state = get("mamba_d_state", "ssm_state_size", "state_size")
    groups = get("mamba_n_groups", "n_groups") or 1
    kernel = get("mamba_d_conv", "conv_kernel")
    if not (heads and head_dim and state and kernel):
        return None
    intermediate = heads * head_dim  # Mamba2: d_inner = expand x hidden = heads x head_dim
    conv = (intermediate + 2 * groups * state) * (kernel - 1)
    return (conv + heads * head_dim * state) * width


def geometry(model_dir: str | Path, platform: str = "cuda", extra_args: list[str] | None = None) -> ModelGeometry | None:
    """The geometry of the model in `model_dir` as this server would hold it (None: no readable
    config.json, e.g. a model name vLLM downloads)."""
    extra_args = list(extra_args or [])
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    try:
        n = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        return None
    kinds = _layer_kinds(cfg, n)
    full, sliding, linear = (kinds.count(k) for k in ("full", "sliding", "linear"))
    dtype = option_value(extra_args, "--dtype")
    name = dtype if dtype not in (None, "auto") else str(cfg.get("torch_dtype") or cfg.get("dtype") or "")
    width = DTYPE_BYTES.get(name)
    mla = cfg.get("kv_lora_rank") is not None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size", 0)) // heads)
    if width is None:
        per_layer = None
    elif mla:
        per_layer = (int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)) * width
    else:
        per_layer = 2 * kv_heads * head_dim * width
    kv = per_layer * (full + sliding) if per_layer is not None else None
    block_arg = option_value(extra_args, "--block-size")
    given = None if block_arg is None else int(block_arg)
    if given:
        block, how = given, "--block-size"
    elif platform == "cpu":
        block, how = DEFAULT_BLOCK_TOKENS["cpu"], "the CPU attention backend's default"
    elif mla:
        block, how = None, "the MLA attention backend's choice at start (FlashMLA: 64)"
    else:
        block, how = DEFAULT_BLOCK_TOKENS["cuda"], "vLLM's default (CacheConfig.DEFAULT_BLOCK_SIZE)"
    page = None
    if linear and platform == "cuda":
        page = _mamba_page(cfg, width) if width else None
        if page is None or per_layer is None or mla:
            block, how = None, "vLLM's choice at start for this hybrid model (its Mamba state is not known here)"
        else:
            align = max(KERNEL_BLOCK, block or KERNEL_BLOCK)
            need = align * math.ceil(page / (align * per_layer))
            need = KERNEL_BLOCK * math.ceil(need / KERNEL_BLOCK)
            if block is None or block < need:
                block, how = need, (f"raised by vLLM for this hybrid model: the attention page must hold the "
                                    f"{page:,}-byte Mamba state (_align_hybrid_block_size)")
    return ModelGeometry(full, sliding, linear, mla, kv, block, how, page)
