"""Block-level simulator of a prefix KV cache with an optional CPU tier (stdlib + numpy only).

    from kvtier.sim import TieredCache, prompt_request, document_chain, gpu_blocks_for
    cache = TieredCache(gpu_blocks_for(21_520, 16), 16, cpu_chunks=5_000, chunk_blocks=16)
    outcome = cache.access(prompt_request(document_chain(0), 5_011, 16))

`BlockPool` is vLLM's GPU block pool (physical copies, its free order), `LRUTier` a CPU tier;
`TieredCache` applies the lab's three rules;
`stack_positions` / `hits_by_capacity` give single-tier hits for every capacity from one pass
over a trace (`vllm_hits_by_capacity` when requests carry unhashed scratch blocks).
"""

from . import fast
from .lru import LRUTier
from .pool import BlockPool
from .requests import Request, document_chain, prompt_request, read_mooncake
from .stack import hits_by_capacity, stack_positions, stream_positions, vllm_hits_by_capacity
from .tiers import POLICIES, Outcome, TieredCache, frees_unhashed_first, gpu_blocks_for

__all__ = [
    "BlockPool", "LRUTier", "fast", "Outcome", "POLICIES", "Request", "TieredCache", "document_chain", "frees_unhashed_first",
    "gpu_blocks_for", "hits_by_capacity", "prompt_request", "read_mooncake", "stack_positions", "stream_positions",
    "vllm_hits_by_capacity",
]
