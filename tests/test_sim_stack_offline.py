"""The offline (vectorised) stack pass against a plain recency list, on streams built to hit its
corners: blocks listed twice in one request, unique blocks, cold blocks, ids beyond int64,
empty requests, capacities of zero and beyond the stream."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvtier.sim import Request, TieredCache, hits_by_capacity, stack_positions, vllm_hits_by_capacity
from kvtier.sim.stack import COLD, _count_leq_in_prefix


def _naive_positions(requests: list[Request]) -> list[list[int]]:
    """Stack position = index in a most-recent-first list of distinct blocks, before the request."""
    stack: list[object] = []
    out = []
    fresh = 0
    for r in requests:
        out.append([stack.index(b) if b in stack else COLD for b in r.blocks])
        for _ in range(r.unique):
            stack.insert(0, ("unique", fresh))
            fresh += 1
        for b in reversed(r.blocks):
            if b in stack:
                stack.remove(b)
            stack.insert(0, b)
    return out


def _stream(seed: int, n: int = 120, huge: bool = False, dupes: bool = True) -> list[Request]:
    rng = random.Random(seed)
    pool = [rng.randrange(2**70) if huge else rng.randrange(400) for _ in range(80)]
    out = []
    for _ in range(n):
        m = rng.choice([0, 1, 3, 8, 15])
        blocks = [rng.choice(pool) for _ in range(m)] if dupes else rng.sample(pool, m)
        out.append(Request(tuple(blocks), max(m, 1) * 16, max_hit=rng.randint(0, m), unique=rng.choice([0, 0, 2])))
    return out


@pytest.mark.parametrize("seed, huge, dupes", [(1, False, True), (2, True, True), (3, False, False), (4, True, False)])
def test_positions_equal_a_plain_recency_list(seed: int, huge: bool, dupes: bool) -> None:
    reqs = _stream(seed, huge=huge, dupes=dupes)
    want = _naive_positions(reqs)
    every = stack_positions(reqs, all_blocks=True)
    lead = stack_positions(reqs)
    for r, w, a, b in zip(reqs, want, every, lead):
        assert a.tolist() == w
        assert b.tolist() == w[: r.max_hit]


def test_hits_for_every_capacity_equal_the_per_request_loop() -> None:
    reqs = [r for r in _stream(5, dupes=False)]
    pos = stack_positions(reqs)
    caps = [0, 1, 7, 40, 10**12]
    fast = hits_by_capacity(pos, caps)
    slow = hits_by_capacity(list(pos), caps)  # a plain list takes the per-request loop
    assert np.array_equal(fast, slow)


def test_vllm_hits_reuse_the_pass_and_match_replays_at_small_capacities() -> None:
    from kvtier.sim import prompt_request

    rng = random.Random(6)
    reqs = []
    for d in range(60):
        doc = rng.randrange(8)
        tokens = rng.choice([t for t in range(20, 131) if t % 16])  # whole-block prompts: see the test below
        reqs.append(prompt_request(iter(range(doc << 20, (doc << 20) + 200)), tokens, 16, generated=rng.choice([1, 9, 40])))
    caps = [0, 1, 9, 20, 33, 64, 10**9]
    pos = stack_positions(reqs)
    got = hits_by_capacity(pos, caps)
    assert np.array_equal(got, vllm_hits_by_capacity(reqs, caps))
    for j, cap in enumerate(caps):
        if cap < max(r.n_blocks + r.unique + r.scratch for r in reqs) or cap > 10**6:
            continue  # the stack model needs the request to fit; a huge tier is checked below
        replayed = [o.gpu_blocks for o in TieredCache(cap, 16).replay(reqs)]
        assert got[:, j].tolist() == replayed, cap
    replayed = [o.gpu_blocks for o in TieredCache(10**6, 16).replay(reqs)]
    assert got[:, -1].tolist() == replayed
    assert got[:, 0].sum() == 0


def test_vllm_hits_refuse_a_recomputed_cached_block() -> None:
    from kvtier.sim import prompt_request

    reqs = [prompt_request(iter(range(100)), 64, 16), prompt_request(iter(range(100)), 64, 16)]
    # the second request hits 3 blocks and computes block 3 again: a second copy in vLLM
    assert [o.gpu_blocks for o in TieredCache(100, 16).replay(reqs)] == [0, 3]
    with pytest.raises(ValueError, match="second copy"):
        vllm_hits_by_capacity(reqs, [100])


def test_prefix_rank_counts_equal_brute_force() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 1000, 500)
    prefix = rng.integers(0, 501, 300)
    bound = rng.integers(-3, 1100, 300)
    want = [int((values[:k] <= b).sum()) for k, b in zip(prefix, bound)]
    assert _count_leq_in_prefix(values, prefix, bound).tolist() == want
    assert _count_leq_in_prefix(values[:0], prefix[:2] * 0, bound[:2]).tolist() == [0, 0]
