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

import re
from dataclasses import dataclass
from typing import Iterable, Literal

from .lru import LRUTier
from .pool import BlockPool
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

    The readable reference of the simulator; `kvtier.sim.fast` replays the same rules compiled.

    gpu_blocks:   usable GPU blocks (vLLM reserves one null block: usable = size / B - 1).
    block_tokens: tokens per GPU block (16 on CUDA, 128 on vLLM's CPU backend).
    cpu_chunks:   CPU tier capacity in chunks, or None for no CPU tier.
    chunk_blocks: GPU blocks per CPU chunk.
    policy:       when the CPU tier receives KV: 'write_through' or 'store_on_evict'.
    flavor:       how the CPU tier is looked up and ordered.
                  'lmcache' (LMCache 0.5.6, the lab): looked up from the first chunk of the
                  prompt; the leading hits are refreshed last to first (`touch_cache` walks
                  the request's hit keys in reverse, so the head ends most recent); a put
                  skips keys already present, which are not refreshed.
                  'vllm': vLLM 0.32's native offloading, looked up and stored for every
                  request (see `_native`): from the chunk of the first token the GPU lacks,
                  loads of at least one chunk, stores of the prompt's full chunks, and at the
                  request's end its chunks re-ranked so a prefix's head is the most recent.
    unhashed_first: vLLM >= 0.24 frees a request's unhashed partial block to the front of the
                  free queue; False models 0.17-0.23, which append it (`frees_unhashed_first`).
    step_tokens:  'vllm' flavor: the scheduler's token budget per step (max_num_batched_tokens,
                  chunked prefill). The connector offers a request's chunks step by step as its
                  prefill computes them, at most this many tokens a step (see `_native`); None
                  offers all of them at once, when the request starts.
    """

    def __init__(self, gpu_blocks: int, block_tokens: int, *, cpu_chunks: int | None = None,
                 chunk_blocks: int = 1, policy: Policy = "write_through", flavor: Flavor = "lmcache",
                 unhashed_first: bool = True, step_tokens: int | None = None):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")
        if chunk_blocks < 1 or block_tokens < 1:
            raise ValueError("chunk_blocks and block_tokens must be >= 1")
        if step_tokens is not None and step_tokens < 1:
            raise ValueError(f"step_tokens must be >= 1 or None, got {step_tokens}")
        self.flavor = flavor
        self.step_tokens = step_tokens
        self.block_tokens = block_tokens
        self.chunk_blocks = chunk_blocks
        self.policy = policy
        self.unhashed_first = unhashed_first
        self.gpu = BlockPool(gpu_blocks)
        self.cpu: LRUTier | None = None if cpu_chunks is None else LRUTier(cpu_chunks)
        self._chunk_ends: set[int] = set()  # store_on_evict: GPU blocks that end a chunk not yet stored
        self._unique = 0  # ids of blocks that can never hit: -1, -2, ...
        self.stored_chunks = 0  # chunks the CPU tier took in ('vllm' flavor: what the server's stores copy)

    def _fresh_ids(self, n: int) -> list[int]:
        first = self._unique - 1
        self._unique -= n
        return list(range(first, first - n, -1))

    def _lmcache(self, keys: tuple[int, ...], g: int, max_hit: int) -> tuple[int, int]:
        """LMCache on a GPU miss: (GPU blocks loaded, chunks loaded); writes through the rest."""
        cpu, k = self.cpu, self.chunk_blocks
        assert cpu is not None
        loaded = chunks = 0
        c = cpu.prefix_hits(keys)
        if c:
            cpu.touch(reversed(keys[:c]))  # touch_cache: last hit first, the head ends most recent
            reach = min(c * k, max_hit)
            if reach > g:  # rule 2: load what the CPU holds beyond the GPU prefix
                loaded, chunks = reach - g, c - g // k
        if self.policy == "write_through":  # rule 3, as puts: a put skips present keys
            cpu.touch_in_order([key for key in keys[c:] if key not in cpu])
        return loaded, chunks

    def _native(self, keys: tuple[int, ...], g: int, tokens: int) -> tuple[int, int, list[int]]:
        """vLLM's native offloading (0.32: OffloadingConnectorScheduler + CPUOffloadingManager, LRU),
        for every request: (GPU blocks loaded, chunks loaded, the keys re-ranked when it ends, in
        the order they are made most recent).

        The lookup starts at the chunk holding the first token the GPU lacks and a load is taken
        only if it brings at least one chunk's worth of tokens (so one that starts mid-chunk
        loads that chunk's remainder plus whole chunks). Stores offer the prompt's full chunks
        (a partial last chunk is never stored; generated tokens neither: offload_prompt_only)
        from the end of the load, or from chunk 0 when nothing was loaded, as the prefill
        computes them: with `step_tokens`, after each scheduler step the chunks it completed
        (`_build_store_jobs`); without, all at once. An offer keeps its present chunks and
        inserts its absent ones in prompt order after evicting the least recent chunks that are
        neither in this offer nor still being written (a store is copied in the step after the
        one that offered it and completes at that step's end, so the previous step's stores
        cannot be evicted) -- or, if too few, stores nothing, and the next step offers those
        chunks again (the connector does not advance past a failed offer; the request's end
        offers what is left, a step after its last, when every copy is done: at least one token
        is generated after the prompt's, so the prefill's last stores finish before it ends). When the request ends, every chunk it loaded or offered (a present
        one still being written excepted: the manager records only ready ones) is re-ranked tail
        first, so the head is the most recent.
        """
        cpu, k = self.cpu, self.chunk_blocks
        assert cpu is not None
        start = g // k
        c = cpu.prefix_hits(keys[start:])
        loaded = chunks = 0
        if c and (start + c) * k - g >= k:
            loaded, chunks = (start + c) * k - g, c
        seen: set[int] = set(range(start, start + c)) if loaded else set()
        if self.policy == "write_through":
            m, nxt = len(keys), start + c if loaded else 0
            if self.step_tokens is None:
                ends = [m]
            else:  # chunks complete after each step of the prefill, then the request's end (all of them)
                tpc, S = k * self.block_tokens, self.step_tokens
                done = min((g + loaded) * self.block_tokens, tokens - 1 if loaded else tokens)
                ends = [min(min(done + S * (i + 1), tokens) // tpc, m) for i in range(-(-(tokens - done) // S))] + [m]
            pinned: set[int] = set()  # keys stored by the previous step: their copy is in flight
            for i, n in enumerate(ends):
                if i == len(ends) - 1:  # the end's offer comes a step after the last decode step
                    pinned = set()
                stored: list[int] = []
                if n > nxt:
                    offer = keys[nxt:n]
                    absent = [key for key in offer if key not in cpu]
                    seen.update(j for j in range(nxt, n) if keys[j] not in pinned)
                    ok = True
                    if absent:
                        need = len(cpu) + len(absent) - cpu.capacity
                        protected = pinned.union(offer)
                        if need > 0:
                            ok = need <= len(cpu) - sum(1 for key in protected if key in cpu)
                            if ok:
                                cpu.evict_first(need, skip=protected)
                        if ok:
                            cpu.touch_in_order(absent, absent=True)
                            self.stored_chunks += len(absent)
                            stored = absent
                    if ok:
                        nxt = n
                pinned = set(stored)
        return loaded, chunks, [keys[j] for j in sorted(seen, reverse=True)]

    def _lookup(self, req: Request) -> tuple[int, int, int, list[int]]:
        """The lookups of one request in both tiers, and the CPU tier's stores for it:
        (GPU blocks hit, GPU blocks loaded from the CPU tier, chunks loaded, the CPU tier's keys
        to re-rank when the request ends, in order: 'vllm' flavor only)."""
        blocks, max_hit = req.blocks, req.max_hit
        g = self.gpu.prefix_hits(blocks, max_hit)
        loaded = chunks = 0
        finish: list[int] = []
        cpu = self.cpu
        if cpu is not None:
            keys = blocks[self.chunk_blocks - 1::self.chunk_blocks]
            if self.flavor == "vllm":
                loaded, chunks, finish = self._native(keys, g, req.tokens)
            elif g < max_hit:  # rule 1: a full GPU hit never reaches LMCache
                loaded, chunks = self._lmcache(keys, g, max_hit)
            if self.policy == "store_on_evict":
                self._chunk_ends.update(keys)
        return g, loaded, chunks, finish

    def _finish(self, keys: list[int]) -> None:
        """The request's end in the CPU tier (on_request_finished): its keys re-ranked."""
        cpu = self.cpu
        if keys and cpu is not None:
            cpu.touch(key for key in keys if key in cpu)

    def _outcome(self, req: Request, g: int, loaded: int, chunks: int) -> Outcome:
        B, tokens = self.block_tokens, req.tokens
        # a load that reaches the prompt's end leaves its last token to compute (vLLM's scheduler)
        hit_tokens = min((g + loaded) * B, tokens - 1 if loaded and self.flavor == "vllm" else tokens)
        gpu_tokens = min(g * B, tokens)
        return Outcome(req.label, tokens, gpu_tokens, hit_tokens - gpu_tokens, tokens - hit_tokens, g, chunks)

    def access(self, req: Request) -> Outcome:
        """Serve one request and update both tiers."""
        blocks = req.blocks
        g, loaded, chunks, finish = self._lookup(req)
        self._finish(finish)
        cpu = self.cpu
        # Freed tail first: [the unhashed block, when appended], the generated blocks last to first,
        # the prompt's computed blocks last to first (a new copy each), then its hit blocks.
        scratch_in_lru = 0 if self.unhashed_first else req.scratch
        fresh = self._fresh_ids(scratch_in_lru + req.unique) + list(reversed(blocks[g:]))
        gone = self.gpu.release(fresh, blocks[g - 1::-1] if g else (),
                                reserve=req.scratch if self.unhashed_first else 0)
        if gone and self.policy == "store_on_evict" and cpu is not None:
            # vLLM evicts a prefix tail first, so when a chunk's last block goes, the chunk is still whole.
            ends = self._chunk_ends
            for key in gone:
                if key in ends:
                    ends.discard(key)
                    cpu.touch_in_order((key,))
        return self._outcome(req, g, loaded, chunks)

    def replay(self, requests: Iterable[Request]) -> list[Outcome]:
        """`access` for each request in order."""
        return list(map(self.access, requests))


def frees_unhashed_first(vllm_version: str) -> bool:
    """Whether this vLLM version's BlockPool.free_blocks prepends unhashed blocks (0.24 and later)."""
    parts = [int(x) for x in re.findall(r"\d+", vllm_version)[:2]]
    if len(parts) < 2:
        raise ValueError(f"not a vLLM version: {vllm_version!r}")
    return tuple(parts) >= (0, 24)


def gpu_blocks_for(cache_tokens: int, block_tokens: int, null_blocks: int = 1) -> int:
    """Usable GPU blocks for a KV cache of `cache_tokens` as the server log reports it."""
    return cache_tokens // block_tokens - null_blocks
