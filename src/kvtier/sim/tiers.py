"""A GPU prefix cache with an optional CPU tier: the lab's three rules at block granularity.

1. A GPU hit ends there: a request whose whole cacheable prefix is on the GPU never touches
   the CPU tier.
2. On a GPU miss the CPU tier is looked up (whole chunks, from the start of the prompt); what
   it holds beyond the GPU's prefix is loaded, not computed.
3. What neither tier holds is computed and placed on the GPU; the CPU tier receives it either
   at once (`write_through`, LMCache's behaviour) or only when the GPU evicts it
   (`store_on_evict`).

The CPU tier stores chunks of `chunk_blocks` consecutive GPU blocks (LMCache: 256 tokens over
vLLM's 16-token blocks, so 16; vLLM's native offload: 1,600 tokens). A chunk is named by the
id of its last block, which identifies the whole prefix up to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Literal

from .lru import LRUTier
from .requests import Request

Policy = Literal["write_through", "store_on_evict"]
POLICIES: tuple[str, ...] = ("write_through", "store_on_evict")
Flavor = Literal["lmcache", "vllm"]
FLAVORS: tuple[str, ...] = ("lmcache", "vllm")


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where one request's prompt tokens came from. gpu + cpu + computed == tokens."""

    label: str
    tokens: int
    gpu_tokens: int
    cpu_tokens: int
    computed_tokens: int
    gpu_blocks: int
    cpu_chunks: int

    @property
    def cached_tokens(self) -> int:
        return self.gpu_tokens + self.cpu_tokens


class TieredCache:
    """Replay requests one at a time (concurrency 1) through a GPU tier and an optional CPU tier.

    gpu_blocks:   usable GPU blocks (vLLM reserves one null block: usable = size / B - 1).
    block_tokens: tokens per GPU block (16 on CUDA, 128 on vLLM's CPU backend).
    cpu_chunks:   CPU tier capacity in chunks, or None for no CPU tier.
    chunk_blocks: GPU blocks per CPU chunk.
    policy:       when the CPU tier receives KV: 'write_through' or 'store_on_evict'.
    flavor:       how the CPU tier is looked up and ordered.
                  'lmcache': from the first chunk of the prompt; hits are touched head first
                  (LMCache's get), new chunks appended in prompt order (the lab's setup).
                  'vllm': vLLM's native OffloadingConnector: from the first chunk the GPU
                  does not hold (its scheduler looks up from the locally computed tokens on);
                  hits are touched in reverse, so a prefix's head is the most recent (its LRU
                  manager's touch), and stored chunks are appended in prompt order.
    """

    def __init__(self, gpu_blocks: int, block_tokens: int, *, cpu_chunks: int | None = None,
                 chunk_blocks: int = 1, policy: Policy = "write_through", flavor: Flavor = "lmcache"):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")
        self.flavor = flavor
        if chunk_blocks < 1 or block_tokens < 1:
            raise ValueError("chunk_blocks and block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.chunk_blocks = chunk_blocks
        self.policy = policy
        self.cpu: LRUTier | None = None if cpu_chunks is None else LRUTier(cpu_chunks)
        self._chunk_ends: set[int] = set()
        on_evict = self._store_evicted if (self.cpu is not None and policy == "store_on_evict") else None
        self.gpu = LRUTier(gpu_blocks, on_evict=on_evict)
        self._unique = 0

    def _store_evicted(self, key: int) -> None:
        # vLLM evicts a prefix tail first, so when a chunk's last block goes, the chunk is still whole.
        if key in self._chunk_ends:
            self._chunk_ends.discard(key)
            self.cpu.touch_in_order((key,))  # type: ignore[union-attr]

    def access(self, req: Request) -> Outcome:
        """Serve one request and update both tiers."""
        blocks, B, k = req.blocks, self.block_tokens, self.chunk_blocks
        g = self.gpu.prefix_hits(blocks, req.max_hit)
        loaded = chunks = 0
        cpu = self.cpu
        if cpu is not None:
            keys = blocks[k - 1::k]
            if g < req.max_hit and self.flavor == "vllm":
                start = g // k  # the scheduler looks up from the first chunk not computed locally
                c = cpu.prefix_hits(keys[start:])
                if c:
                    cpu.touch(reversed(keys[start:start + c]))
                    reach = min((start + c) * k, req.max_hit)
                    if reach > g:
                        loaded = reach - g
                        chunks = c
                if self.policy == "write_through":
                    cpu.touch_in_order(keys[start + c:])
            elif g < req.max_hit:  # rule 1: a full GPU hit never reaches the CPU tier
                c = cpu.prefix_hits(keys)
                if c:
                    cpu.touch(keys[:c])
                    reach = min(c * k, req.max_hit)
                    if reach > g:  # rule 2: load what the CPU holds beyond the GPU prefix
                        loaded = reach - g
                        chunks = c - g // k
                if self.policy == "write_through":  # rule 3: computed chunks go to the CPU at once
                    cpu.touch_in_order(keys[c:])
            if self.policy == "store_on_evict":
                self._chunk_ends.update(keys)
        cached = g + loaded
        hit_tokens = min(cached * B, req.tokens)
        gpu_tokens = min(g * B, req.tokens)
        self._place_on_gpu(req, g)
        return Outcome(req.label, req.tokens, gpu_tokens, hit_tokens - gpu_tokens, req.tokens - hit_tokens, g, chunks)

    def _place_on_gpu(self, req: Request, hits: int) -> None:
        # vLLM frees a request tail first: hashed blocks go to the end of the free queue in that
        # order (unique generated blocks, then the prompt blocks from last to first), unhashed
        # ones to its front, where they are reused before any cached block is evicted.
        first = self._unique - 1
        self._unique -= req.unique
        blocks = req.blocks
        # A prefix's resident part is a prefix (see lru.py), so past a missing block nothing is
        # resident; only a hit capped by max_hit can leave resident blocks behind it.
        absent = hits < req.max_hit or req.max_hit == len(blocks)
        self.gpu.touch_in_order(chain(range(first, self._unique - 1, -1), reversed(blocks[hits:])),
                                blocks[hits - 1::-1] if hits else (), reserve=req.scratch, absent=absent)

    def replay(self, requests: Iterable[Request]) -> list[Outcome]:
        return [self.access(r) for r in requests]


def gpu_blocks_for(cache_tokens: int, block_tokens: int, null_blocks: int = 1) -> int:
    """Usable GPU blocks for a KV cache of `cache_tokens` as the server log reports it."""
    return cache_tokens // block_tokens - null_blocks
