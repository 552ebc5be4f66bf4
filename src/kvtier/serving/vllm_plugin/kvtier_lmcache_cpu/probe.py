"""Learn the in-block layout of vLLM's CPU KV cache from vLLM's own cache writer.

One probe block is written by CPUAttentionBackendImpl.do_kv_cache_update (the code vLLM runs
before every attention call) with values that encode each source position in base-256 digits;
reading the block back gives the element every (offset, head, K/V, dim) lands in. The digits
are 1..256, exact in bf16, fp16 and fp32, and 0 marks an element nothing wrote.
"""

from __future__ import annotations

import types

import torch

from .layout import BlockLayout

EXACT = (torch.bfloat16, torch.float16, torch.float32)


def block_map(block_size: int, num_heads: int, head_size: int, dtype: torch.dtype, isa: str | None = None) -> BlockLayout:
    """The layout vLLM 0.32's CPU kernel `isa` (default: the one vLLM picks) gives one block."""
    from vllm.v1.attention.backend import AttentionType
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl, _get_attn_isa

    if dtype not in EXACT:
        raise ValueError(f"KV cache dtype {dtype} is not handled (quantized caches are not): use one of {EXACT}")
    isa = isa or _get_attn_isa(dtype, block_size, head_size, "auto")
    shape = (block_size, num_heads, 2, head_size)
    n = block_size * num_heads * 2 * head_size
    source = torch.arange(n, dtype=torch.long).view(shape)
    impl = types.SimpleNamespace(attn_type=AttentionType.DECODER, kv_cache_dtype="auto")
    layer = types.SimpleNamespace(isa=isa, _k_scale_float=1.0, _v_scale_float=1.0)
    decoded = torch.zeros(n, dtype=torch.long)
    digits = 0
    while 256 ** digits < n:
        digits += 1
    for j in range(digits):
        code = ((source // 256 ** j) % 256 + 1).to(dtype)          # [block_size, heads, 2, head_size]
        cache = torch.zeros(1, num_heads, block_size, 2 * head_size, dtype=dtype)
        CPUAttentionBackendImpl.do_kv_cache_update(impl, layer, code[:, :, 0].contiguous(), code[:, :, 1].contiguous(),
                                                   cache, torch.arange(block_size, dtype=torch.long))
        got = cache.view(-1).to(torch.long)
        if int(got.min()) < 1:
            raise RuntimeError(f"vLLM's {isa} cache writer left {int((got < 1).sum())} elements of a block unwritten")
        decoded += (got - 1) * 256 ** j
    if not torch.equal(torch.sort(decoded).values, torch.arange(n, dtype=torch.long)):
        raise RuntimeError(f"vLLM's {isa} cache writer does not place each value of a block in its own element")
    pos = torch.empty(n, dtype=torch.long)
    pos[decoded] = torch.arange(n, dtype=torch.long)                  # source position -> element
    return BlockLayout(pos.view(shape), f"vLLM's {isa} cache writer").check()
