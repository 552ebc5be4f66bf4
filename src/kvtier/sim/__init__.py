"""Block-level simulator of a prefix KV cache with an optional CPU tier (stdlib + numpy only).

    from kvtier.sim import TieredCache, prompt_request, document_chain, gpu_blocks_for
    cache = TieredCache(gpu_blocks_for(21_520, 16), 16, cpu_chunks=5_000, chunk_blocks=16)
    outcome = cache.access(prompt_request(document_chain(0), 5_011, 16))

`LRUTier` is one tier in vLLM's eviction order; `TieredCache` applies the lab's three rules;
`stack_positions` / `hits_by_capacity` give single-tier hits for every capacity from one pass
over a trace (`vllm_hits_by_capacity` when requests carry unhashed scratch blocks);
`replay_offline` gives the lmcache write-through two-tier outcomes for every CPU capacity at once.
"""

from .lru import LRUTier
from .offline import OfflineResult, offline_arrays, replay_offline
from .requests import Request, document_chain, prompt_request, read_mooncake
from .stack import hits_by_capacity, stack_positions, stream_positions, vllm_hits_by_capacity
from .tiers import POLICIES, Outcome, TieredCache, gpu_blocks_for

__all__ = [
    "LRUTier", "OfflineResult", "Outcome", "POLICIES", "Request", "TieredCache", "document_chain", "gpu_blocks_for",
    "hits_by_capacity", "offline_arrays", "prompt_request", "read_mooncake", "replay_offline", "stack_positions",
    "stream_positions", "vllm_hits_by_capacity",
]
