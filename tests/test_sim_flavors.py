"""The CPU tier's two flavors: LMCache (lookup from the prompt's start) and vLLM's native offload
(lookup from the first chunk the GPU lacks, prefix head kept most recent)."""

from __future__ import annotations

import pytest

from kvtier.sim import Request, TieredCache


def _a() -> Request:
    return Request((1, 2, 3, 4), 400, max_hit=4)


def _b() -> Request:
    return Request((5, 6, 7, 8), 400, max_hit=4)


@pytest.mark.parametrize("flavor, pool_tokens", [("vllm", 199), ("lmcache", 0)])
def test_store_on_evict_serves_the_evicted_tail(flavor: str, pool_tokens: int) -> None:
    # GPU of 6 blocks: B pushes out A's two tail blocks (4, then 3); only they reach the pool.
    cache = TieredCache(6, 100, cpu_chunks=10, policy="store_on_evict", flavor=flavor)
    cache.access(_a())
    cache.access(_b())
    assert sorted(cache.cpu.resident()) == [3, 4]  # type: ignore[union-attr]
    again = cache.access(_a())
    assert again.gpu_tokens == 200
    # vLLM looks the pool up from block 2 on and loads 3 and 4 -- the prompt's end, so its last
    # token is computed again (the scheduler keeps one); LMCache looks from block 0 and stops
    assert again.cpu_tokens == pool_tokens
    assert again.computed_tokens == 200 - pool_tokens


def test_vllm_flavor_keeps_the_prefix_head_most_recent() -> None:
    cache = TieredCache(0, 100, cpu_chunks=4, flavor="vllm")  # no GPU room: every block goes to the pool
    cache.access(_a())
    cache.access(_a())  # a pool hit: at the end 4, 3, 2, 1 are re-ranked, the head becomes the most recent
    assert cache.cpu.resident() == [4, 3, 2, 1]  # type: ignore[union-attr]
    cache.access(Request((9,), 100, max_hit=1))  # one new block evicts the tail (4), not the head
    assert cache.cpu.resident() == [3, 2, 1, 9]  # type: ignore[union-attr]


def test_unknown_flavor_is_refused() -> None:
    with pytest.raises(ValueError, match="flavor"):
        TieredCache(4, 100, cpu_chunks=4, flavor="sglang")  # type: ignore[arg-type]
