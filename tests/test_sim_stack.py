"""Hits for every capacity from one pass (stack positions) equal replaying each capacity."""

import random

import numpy as np

from kvtier.sim import Request, TieredCache, hits_by_capacity, stack_positions


def _trace(seed: int, n: int = 300) -> list[Request]:
    """Conversations that grow turn by turn (shared prefixes), as block-id chains."""
    rng = random.Random(seed)
    convs: list[list[int]] = []
    next_id = 0
    out = []
    for _ in range(n):
        if convs and rng.random() < 0.7:
            c = rng.choice(convs)
        else:
            c = []
            convs.append(c)
        for _ in range(rng.randint(1, 6)):
            c.append(next_id)
            next_id += 1
        out.append(Request(tuple(c), len(c) * 16, max_hit=len(c), unique=rng.choice([0, 0, 1])))
    return out


def test_stack_positions_match_replay_at_every_capacity():
    reqs = _trace(1)
    caps = [40, 64, 100, 257, 1000]
    from_stack = hits_by_capacity(stack_positions(reqs), caps)
    for j, cap in enumerate(caps):
        cache = TieredCache(cap, 16)
        replayed = np.array([o.gpu_blocks for o in cache.replay(reqs)])
        big = np.array([r.n_blocks + r.unique for r in reqs]) <= cap  # the stack model needs the request to fit
        assert (from_stack[big, j] == replayed[big]).all(), f"capacity {cap}"


def test_stack_position_by_hand():
    # A=[1,2], B=[3], then A again: touches so far (most recent first) are 1,2 (A, head last-freed
    # = most recent), then 3 -> before the third request: 3 is at 0, 1 at 1, 2 at 2.
    reqs = [Request((1, 2), 32, 2), Request((3,), 16, 1), Request((1, 2), 32, 2)]
    pos = stack_positions(reqs)
    assert pos[2].tolist() == [1, 2]
    assert hits_by_capacity(pos, [2, 3])[2].tolist() == [1, 2]


def _vllm_trace(seed: int, n: int = 300) -> list[Request]:
    """Growing conversations as vLLM requests: a partial (scratch) block and sometimes generated blocks."""
    from kvtier.sim import prompt_request

    rng = random.Random(seed)
    convs: list[list[int]] = []
    next_id = 0
    out = []
    for _ in range(n):
        c = rng.choice(convs) if convs and rng.random() < 0.7 else None
        if c is None:
            c = []
            convs.append(c)
        for _ in range(rng.randint(1, 6)):
            c.append(next_id)
            next_id += 1
        tokens = len(c) * 16 - rng.randrange(0, 16)
        out.append(prompt_request(iter(c), tokens, 16, generated=rng.choice([0, 3, 20])))
    return out


def test_vllm_hits_by_capacity_match_replay_with_scratch_blocks():
    from kvtier.sim.stack import vllm_hits_by_capacity

    reqs = _vllm_trace(2)
    assert any(r.scratch for r in reqs) and any(r.unique for r in reqs)
    caps = [50, 64, 100, 257, 1000]
    assert max(r.n_blocks + r.unique + r.scratch for r in reqs) <= min(caps)
    exact = vllm_hits_by_capacity(reqs, caps)
    assert exact[:, 0].sum() > 0
    for j, cap in enumerate(caps):
        replayed = np.array([o.gpu_blocks for o in TieredCache(cap, 16).replay(reqs)])
        assert (exact[:, j] == replayed).all(), f"capacity {cap}"
