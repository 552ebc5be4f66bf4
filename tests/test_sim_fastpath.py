"""The inlined `TieredCache.access` against the same rules spelled out with LRUTier's own methods
(the simulator as it was before its hot path was inlined): outcomes, both tiers' contents in
order and their eviction counts must agree on streams built to reach every branch -- repeated
blocks, capped hits, scratch and unique blocks, tiny tiers, both flavors and policies."""

from __future__ import annotations

import random
from itertools import chain

import pytest

from kvtier.sim import Outcome, Request, TieredCache


class _MethodByMethod(TieredCache):
    """TieredCache.access as composed from LRUTier.prefix_hits / touch / touch_in_order."""

    def access(self, req: Request) -> Outcome:
        blocks, B, k = req.blocks, self.block_tokens, self.chunk_blocks
        g = self.gpu.prefix_hits(blocks, req.max_hit)
        loaded = chunks = 0
        cpu = self.cpu
        if cpu is not None:
            keys = blocks[k - 1::k]
            if g < req.max_hit and self.flavor == "vllm":
                start = g // k
                c = cpu.prefix_hits(keys[start:])
                if c:
                    cpu.touch(reversed(keys[start:start + c]))
                    reach = min((start + c) * k, req.max_hit)
                    if reach > g:
                        loaded, chunks = reach - g, c
                if self.policy == "write_through":
                    cpu.touch_in_order(keys[start + c:])
            elif g < req.max_hit:
                c = cpu.prefix_hits(keys)
                if c:
                    cpu.touch(keys[:c])
                    reach = min(c * k, req.max_hit)
                    if reach > g:
                        loaded, chunks = reach - g, c - g // k
                if self.policy == "write_through":
                    cpu.touch_in_order(keys[c:])
            if self.policy == "store_on_evict":
                self._chunk_ends.update(keys)
        hit_tokens = min((g + loaded) * B, req.tokens)
        gpu_tokens = min(g * B, req.tokens)
        first = self._unique - 1
        self._unique -= req.unique
        absent = g < req.max_hit or req.max_hit == len(blocks)
        self.gpu.touch_in_order(chain(range(first, self._unique - 1, -1), reversed(blocks[g:])),
                                blocks[g - 1::-1] if g else (), reserve=req.scratch, absent=absent)
        return Outcome(req.label, req.tokens, gpu_tokens, hit_tokens - gpu_tokens, req.tokens - hit_tokens, g, chunks)


def _stream(seed: int, n: int = 400) -> list[Request]:
    """Sessions that grow (shared prefixes), some blocks repeated, capped and scratch requests."""
    rng = random.Random(seed)
    sessions: list[list[int]] = []
    out = []
    next_id = 0
    for i in range(n):
        s = rng.choice(sessions) if sessions and rng.random() < 0.75 else None
        if s is None:
            s = []
            sessions.append(s)
        for _ in range(rng.randint(1, 7) if rng.random() < 0.85 or not s else 0):  # or the same prompt again
            s.append(next_id)
            next_id += 1
        blocks = list(s)
        if rng.random() < 0.05 and blocks:
            blocks.append(rng.choice(blocks))  # a block listed twice
        cap = len(blocks) - rng.choice([0, 0, 1]) if blocks else 0
        out.append(Request(tuple(blocks), max(len(blocks), 1) * 16, max_hit=max(cap, 0), scratch=rng.choice([0, 1]),
                           unique=rng.choice([0, 0, 2]), label=str(i)))
    return out


def _state(c: TieredCache) -> tuple:
    return (c.gpu.resident(), c.gpu.evictions, None if c.cpu is None else (c.cpu.resident(), c.cpu.evictions))


@pytest.mark.parametrize("flavor", ["lmcache", "vllm"])
@pytest.mark.parametrize("policy", ["write_through", "store_on_evict"])
@pytest.mark.parametrize("gpu, cpu, k", [(30, 40, 1), (60, 25, 3), (8, 6, 1), (120, 400, 2), (0, 5, 1), (45, None, 1)])
@pytest.mark.parametrize("hooks", [False, True])
def test_inlined_access_equals_method_by_method(flavor: str, policy: str, gpu: int, cpu: int | None, k: int,
                                                hooks: bool) -> None:
    reqs = _stream(gpu * 7 + k)
    fast = TieredCache(gpu, 16, cpu_chunks=cpu, chunk_blocks=k, policy=policy, flavor=flavor)  # type: ignore[arg-type]
    ref = _MethodByMethod(gpu, 16, cpu_chunks=cpu, chunk_blocks=k, policy=policy, flavor=flavor)  # type: ignore[arg-type]
    seen: dict[str, list[int]] = {"fast": [], "ref": []}
    if hooks:  # callbacks a caller attaches must see every eviction, in order, on either path
        for name, c in (("fast", fast), ("ref", ref)):
            if c.cpu is not None:
                c.cpu.on_evict = seen[name].append
            if c.gpu.on_evict is None:
                c.gpu.on_evict = seen[name].append
    got, want = [], []
    for i, r in enumerate(reqs):
        got.append(fast.access(r))
        want.append(ref.access(r))
        if i % 50 == 0:
            assert _state(fast) == _state(ref), i
    assert got == want
    assert _state(fast) == _state(ref)
    assert seen["fast"] == seen["ref"] and (seen["fast"] or not hooks or gpu > 100)


def test_replay_restores_the_garbage_collector() -> None:
    import gc

    assert gc.isenabled()
    TieredCache(10, 16).replay(_stream(1, 20))
    assert gc.isenabled()
    gc.disable()
    try:
        TieredCache(10, 16).replay(_stream(1, 20))
        assert not gc.isenabled()
    finally:
        gc.enable()
