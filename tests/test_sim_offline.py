"""The offline two-tier path (kvtier.sim.offline) against TieredCache(flavor="lmcache",
policy="write_through") replayed once per CPU capacity: identical Outcomes on prefix-chained
streams built to reach every branch (shared and repeated prompts, full GPU hits, capped hits,
capacity 0, tiers smaller than a request, chunk_blocks 1, 3 and 16), and on the Mooncake trace."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from kvtier.sim import Request, TieredCache, offline_arrays, prompt_request, read_mooncake, replay_offline
from kvtier.sim import stream_positions

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("KVTIER_TRACES", REPO.parent / "shared" / "traces"))
CONVERSATION = TRACES / "mooncake" / "conversation_trace.jsonl"


def _replayed(reqs: list[Request], gpu: int, B: int, cpu: int, k: int) -> list:
    return TieredCache(gpu, B, cpu_chunks=cpu, chunk_blocks=k, policy="write_through", flavor="lmcache").replay(reqs)


def _sessions(seed: int, n: int = 300, grow: int = 7, capped: bool = False, vllm: bool = False) -> list[Request]:
    """Conversations that grow turn by turn as prefix-chained ids; some prompts sent again unchanged
    (full GPU hits), some with a shared system prefix; `capped`: max_hit one short of the prompt
    sometimes; `vllm`: vLLM-style requests (max_hit (N - 1) // B, unique and scratch blocks)."""
    rng = random.Random(seed)
    chains: list[list[int]] = [[]]
    out: list[Request] = []
    nxt = 0
    for i in range(n):
        if rng.random() < 0.7 and len(chains) > 1:
            s = rng.choice(chains[1:])
        else:
            s = list(chains[0][: rng.choice([0, 2])]) if chains[0] else []  # maybe a shared prefix
            chains.append(s)
        if rng.random() < 0.8 or not s:  # else the same prompt again
            for _ in range(rng.randint(1, grow)):
                s.append(nxt)
                nxt += 1
        if not chains[0]:
            chains[0] = list(s)
        blocks = tuple(s)
        if vllm:
            tokens = len(blocks) * 16 - rng.choice([0, 0, 5])
            out.append(prompt_request(iter(blocks), tokens, 16, generated=rng.choice([1, 7, 40]), label=str(i)))
            continue
        m = len(blocks) - (rng.random() < 0.3) if capped else len(blocks)
        out.append(Request(blocks, len(blocks) * 16 - rng.choice([0, 3]), max_hit=max(m, 0), label=str(i)))
    return out


def _check(reqs: list[Request], gpu: int, B: int, caps: list[int], k: int) -> None:
    got = replay_offline(reqs, gpu, B, caps, chunk_blocks=k)
    assert len(got) == len(caps)
    for cap, outs in zip(caps, got):
        want = _replayed(reqs, gpu, B, cap, k)
        assert outs == want, (gpu, cap, k)


@pytest.mark.parametrize("k", [1, 3, 16])
@pytest.mark.parametrize("gpu", [0, 5, 30, 90, 400, 10**6])
@pytest.mark.parametrize("capped", [False, True])
def test_equals_tiered_cache_for_every_capacity(k: int, gpu: int, capped: bool) -> None:
    grow = 40 if k == 16 else 7  # chunks of 16 need long prompts
    reqs = _sessions(gpu + k, grow=grow, capped=capped)
    longest = max(r.n_blocks for r in reqs) // k
    caps = [0, 1, 2, max(longest // 2, 1), longest, 3 * longest, 50, 10**6]  # tiers smaller than a request too
    _check(reqs, gpu, 16, caps, k)


@pytest.mark.parametrize("k", [1, 4])
def test_vllm_style_requests(k: int) -> None:
    """Unique and scratch blocks and max_hit (N - 1) // B, GPU tiers that hold every request."""
    reqs = _sessions(11, vllm=True)
    big = max(r.n_blocks + r.unique + r.scratch for r in reqs)
    for gpu in [big, big + 40, 10**5]:
        _check(reqs, gpu, 16, [0, 1, 7, 30, 10**5], k)


def test_hand_made_outcomes() -> None:
    """One prompt three times, then a longer one sharing it, then a stranger: by hand, chunk_blocks 2."""
    a = Request((1, 2, 3, 4), 64, max_hit=4, label="a")
    a2 = Request((1, 2, 3, 4, 5, 6), 96, max_hit=5, label="a2")
    x = Request((9, 10), 32, max_hit=2, label="x")
    reqs = [a, a, a2, x, a2]
    # GPU of 4 blocks, CPU of 8 chunks: a misses both tiers, then hits the GPU fully (touching nothing
    # on the CPU); a2 gets 4 from the GPU, chunk 6 is new; x evicts blocks 3 and 4 from the GPU but
    # nothing from the CPU, so the last a2 gets blocks 1-2 from the GPU and 3-5 from the CPU: chunks
    # (3, 4) and (5, 6), the last capped by max_hit.
    [outs] = replay_offline(reqs, 4, 16, [8], chunk_blocks=2)
    assert [(o.gpu_blocks, o.cpu_chunks, o.gpu_tokens, o.cpu_tokens, o.computed_tokens) for o in outs] == [
        (0, 0, 0, 0, 64), (4, 0, 64, 0, 0), (4, 0, 64, 0, 32), (0, 0, 0, 0, 32), (2, 2, 32, 48, 16)]
    assert outs == _replayed(reqs, 4, 16, 8, 2)
    _check(reqs, 4, 16, [0, 1, 2, 3, 8], 2)


def test_empty_and_zero_width() -> None:
    assert replay_offline([], 10, 16, [0, 5]) == [[], []]
    reqs = [Request((), 5, max_hit=0, label="e"), Request((1,), 16, max_hit=0), Request((1, 2), 40, max_hit=2)]
    _check(reqs, 1, 16, [0, 1, 5], 1)
    assert replay_offline(reqs, 1, 16, []) == []
    res = offline_arrays(reqs, 1, 16, [3])
    assert res.cpu_tokens.shape == (3, 1)


def test_forward_positions_are_a_plain_recency_list() -> None:
    rng = random.Random(3)
    streams = [[rng.randrange(30) for _ in range(rng.choice([0, 1, 4, 9]))] for _ in range(80)]
    streams = [list(dict.fromkeys(s)) for s in streams]  # no key twice in a request
    stack: list[int] = []
    want = []
    for s in streams:
        want += [stack.index(b) if b in stack else np.iinfo(np.int64).max for b in s]
        for b in s:
            if b in stack:
                stack.remove(b)
            stack.insert(0, b)
    offsets = np.cumsum([0] + [len(s) for s in streams])
    ids = np.array([b for s in streams for b in s], dtype=np.int64)
    assert stream_positions(ids, offsets, order="forward").tolist() == want
    with pytest.raises(ValueError):
        stream_positions(ids, offsets, order="sideways")


def test_refuses_what_it_cannot_answer_exactly() -> None:
    with pytest.raises(ValueError, match="twice"):
        replay_offline([Request((1, 2, 1), 48, max_hit=3)], 10, 16, [4])
    # block 2 follows block 1, then block 3: not prefix-chained, a resident block behind a missing one
    with pytest.raises(ValueError, match="prefix"):
        replay_offline([Request((1, 2), 32, max_hit=2), Request((3, 2), 32, max_hit=2)], 10, 16, [4])
    with pytest.raises(ValueError):
        replay_offline([Request((1,), 16, max_hit=1)], 10, 16, [-1])


@pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake conversation trace not found at {CONVERSATION} (set KVTIER_TRACES)")
@pytest.mark.parametrize("gpu, k", [(2_000, 1), (20_000, 1), (2_000, 16)])
def test_mooncake_conversation(gpu: int, k: int) -> None:
    requests = read_mooncake(CONVERSATION)
    caps = [0, gpu // 4, 2 * gpu // k]
    got = replay_offline(requests, gpu, 512, caps, chunk_blocks=k)
    for cap, outs in zip(caps, got):
        want = _replayed(requests, gpu, 512, cap, k)
        assert outs == want, cap
    assert sum(o.cpu_chunks for o in got[-1]) > 0
