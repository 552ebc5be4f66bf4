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

import gc
from collections import deque
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Iterable, Literal

from .lru import LRUTier, move_or_insert
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
        self._write_through = policy == "write_through"
        self._store_on_evict = on_evict is not None

    def _store_evicted(self, key: int) -> None:
        # vLLM evicts a prefix tail first, so when a chunk's last block goes, the chunk is still whole.
        if key in self._chunk_ends:
            self._chunk_ends.discard(key)
            self.cpu.touch_in_order((key,))  # type: ignore[union-attr]

    def _store_evicted_batch(self, victims: list[int]) -> None:
        """`_store_evicted` for every victim of one GPU trim, in order, with one CPU update.

        Storing them one by one trims the CPU tier after each; when none of them is resident
        there, inserting all and trimming once evicts the same entries in the same order. A
        victim already resident could be evicted and stored again on the way, so then one by one.
        """
        ends = self._chunk_ends
        stored = list(filter(ends.__contains__, victims))
        if not stored:
            return
        ends.difference_update(stored)
        cpu = self.cpu
        entries = cpu._entries  # type: ignore[union-attr]
        if entries.keys().isdisjoint(stored):
            deque(map(entries.__setitem__, stored, repeat(None)), maxlen=0)
            cpu._trim()  # type: ignore[union-attr]
        else:  # LRUTier.touch_in_order((key,)) for each, without a call per key
            move, cap = entries.move_to_end, cpu.capacity  # type: ignore[union-attr]
            for key in stored:
                if key in entries:
                    move(key)
                else:
                    entries[key] = None
                    if len(entries) > cap:
                        cpu._trim()  # type: ignore[union-attr]

    def access(self, req: Request) -> Outcome:
        """Serve one request and update both tiers.

        The hot path of every replay: the tiers' dict operations are inlined here (same steps
        as LRUTier.prefix_hits / touch / touch_in_order) because per-call overhead, not the dict
        work, dominated at a few dozen blocks a request.
        """
        blocks, max_hit, tokens = req.blocks, req.max_hit, req.tokens
        gpu = self.gpu
        gent = gpu._entries
        n = len(blocks)
        head = blocks if max_hit >= n else blocks[:max_hit]
        if head and head[0] in gent:  # most lookups miss at once; skip building the flags then
            flags = list(map(gent.__contains__, head))
            try:
                g = flags.index(False)
            except ValueError:
                g = len(flags)
        else:
            g = 0
        loaded = chunks = 0
        cpu = self.cpu
        if cpu is not None:
            k = self.chunk_blocks
            keys = blocks[k - 1::k]
            if g < max_hit:  # rule 1: a full GPU hit never reaches the CPU tier
                cent = cpu._entries
                if self.flavor == "vllm":
                    start = g // k  # the scheduler looks up from the first chunk not computed locally
                    rest = keys[start:] if start else keys
                    flags = list(map(cent.__contains__, rest))  # as LRUTier.prefix_hits
                    c = flags.index(False) if False in flags else len(flags)
                    if c:
                        deque(map(cent.move_to_end, reversed(rest[:c])), maxlen=0)
                        reach = min((start + c) * k, max_hit)
                        if reach > g:
                            loaded = reach - g
                            chunks = c
                else:
                    rest = keys
                    flags = list(map(cent.__contains__, keys))
                    c = flags.index(False) if False in flags else len(flags)
                    if c:
                        deque(map(cent.move_to_end, keys[:c]), maxlen=0)
                        reach = min(c * k, max_hit)
                        if reach > g:  # rule 2: load what the CPU holds beyond the GPU prefix
                            loaded = reach - g
                            chunks = c - g // k
                if self._write_through:  # rule 3: computed chunks go to the CPU at once
                    new = rest[c:] if c else rest
                    # none of them resident (the flags say so; touching the hits moved none in or
                    # out): insert as LRUTier.touch_in_order does, without its copy and check
                    if flags.count(True) == c:
                        deque(map(cent.__setitem__, new, repeat(None)), maxlen=0)
                        excess = len(cent) - cpu.capacity
                        if excess > 0:
                            if cpu.on_evict is None:
                                cpu.evictions += excess
                                deque(map(cent.popitem, repeat(False, excess)), maxlen=0)
                            else:
                                cpu._trim()
                    else:
                        cpu.touch_in_order(new)
            if self._store_on_evict:
                self._chunk_ends.update(keys)
        hit_tokens = min((g + loaded) * self.block_tokens, tokens)
        gpu_tokens = min(g * self.block_tokens, tokens)
        # Place on the GPU. vLLM frees a request tail first: hashed blocks go to the end of the
        # free queue in that order (unique generated blocks, then the prompt blocks from last to
        # first), unhashed ones to its front, where they are reused before any cached block is
        # evicted. The hit prefix is touched after the rest, from its last block to its first.
        u = req.unique
        missed = reversed(blocks[g:] if g else blocks)
        if u:
            first = self._unique - 1
            self._unique -= u
            missed = chain(range(first, first - u, -1), missed)
        # A prefix's resident part is a prefix (see lru.py), so past a missing block nothing is
        # resident; only a hit capped by max_hit can leave resident blocks behind it. Setting keys
        # one by one keeps the first of repeated ones where it is, as dict.fromkeys does.
        if g < max_hit or max_hit == n:
            deque(map(gent.__setitem__, missed, repeat(None)), maxlen=0)
        else:
            fresh = dict.fromkeys(missed)
            if gent.keys().isdisjoint(fresh):
                gent.update(fresh)
            else:
                move_or_insert(gent, fresh)
        if g:
            deque(map(gent.move_to_end, blocks[g - 1::-1]), maxlen=0)
        limit = gpu.capacity - req.scratch  # room kept free for the request's unhashed blocks
        excess = len(gent) - (limit if limit > 0 else 0)
        if excess > 0:
            on_evict = gpu.on_evict
            if on_evict is None:
                gpu.evictions += excess
                deque(map(gent.popitem, repeat(False, excess)), maxlen=0)
            elif self._store_on_evict and on_evict == self._store_evicted:
                gpu.evictions += excess
                self._store_evicted_batch(list(map(itemgetter(0), map(gent.popitem, repeat(False, excess)))))
            else:  # a caller's own callback: one call per victim, as LRUTier does
                gpu._trim(limit)
        return Outcome(req.label, tokens, gpu_tokens, hit_tokens - gpu_tokens, tokens - hit_tokens, g, chunks)

    def replay(self, requests: Iterable[Request]) -> list[Outcome]:
        """`access` for each request in order. The cyclic garbage collector is paused meanwhile:
        a replay allocates millions of short-lived tuples and no cycles, and its passes cost ~5%."""
        paused = gc.isenabled()
        gc.disable()
        try:
            return list(map(self.access, requests))
        finally:
            if paused:
                gc.enable()


def gpu_blocks_for(cache_tokens: int, block_tokens: int, null_blocks: int = 1) -> int:
    """Usable GPU blocks for a KV cache of `cache_tokens` as the server log reports it."""
    return cache_tokens // block_tokens - null_blocks
