"""Where the simulator follows vLLM's and LMCache's code rather than a plain LRU (issue 10,
item 3). Each expected value is worked out by hand in the comment; the oracle test
(tests/test_sim_oracle.py) checks the GPU cases against vLLM's own KVCacheManager."""

from __future__ import annotations

import pytest

from kvtier.sim import Request, TieredCache, frees_unhashed_first


def _r(blocks: tuple[int, ...], tokens: int, max_hit: int, scratch: int = 1) -> Request:
    return Request(blocks, tokens, max_hit=max_hit, scratch=scratch)


def test_a_recomputed_last_block_is_a_second_copy() -> None:
    # 5 usable blocks; every request has a partial block, so 4 stay cached after each.
    # A = (7,) then X = (1, 2, 3), 48 tokens: at most 2 blocks hit, block 3 is recomputed.
    # X again hits 1, 2 and computes 3 into a new block while the old copy of 3 stays cached:
    # queue 7, 3(old), 3(new), 2, 1 -> five entries, 7 is evicted. So A misses afterwards.
    # (Moving the cached copy instead, as the simulator did before, kept 7: A hit 1 block.)
    cache = TieredCache(5, 16)
    a, x = _r((7,), 17, 1), _r((1, 2, 3), 48, 2)
    got = [o.gpu_blocks for o in cache.replay([a, x, x, a])]
    assert got == [0, 0, 2, 0]
    assert cache.gpu.resident().count(3) == 1  # the old copy of 3 went when A was placed


def test_a_hit_uses_the_first_copy_and_eviction_the_front() -> None:
    cache = TieredCache(10, 16)
    x = _r((1, 2), 32, 1)
    cache.replay([x, x])
    # freed: 2, 1 / then copy 2', hit 1 moved: queue 2, 2', 1
    assert cache.gpu.resident() == [2, 2, 1]
    cache.access(_r((1, 2, 5), 48, 2))  # hits 1 and 2 (its first copy, the oldest), computes 5
    assert cache.gpu.resident() == [2, 5, 2, 1]


@pytest.mark.parametrize("version, first", [("0.17.0", False), ("0.23.1", False), ("0.24.0", True), ("0.32.0", True),
                                            ("1.0", True)])
def test_free_order_follows_the_version(version: str, first: bool) -> None:
    assert frees_unhashed_first(version) is first


def test_unhashed_block_takes_an_lru_slot_before_0_24() -> None:
    # 4 usable blocks; A, B, C each one full block and a partial one, then A again.
    # >= 0.24: the partial block is reused from the front, 3 blocks stay cached: {1, 2, 3}, A hits.
    # 0.17-0.23: the partial block is an LRU entry freed before its full block:
    # pA 1 | pA 1 pB 2 | pA 1 pB 2 pC 3 -> six entries, pA and 1 evicted: A misses.
    reqs = [_r((1,), 20, 1), _r((2,), 20, 1), _r((3,), 20, 1), _r((1,), 20, 1)]
    assert [o.gpu_blocks for o in TieredCache(4, 16).replay(reqs)] == [0, 0, 0, 1]
    assert [o.gpu_blocks for o in TieredCache(4, 16, unhashed_first=False).replay(reqs)] == [0, 0, 0, 0]


def test_lmcache_touch_cache_refreshes_hits_last_to_first() -> None:
    # no GPU room, a CPU tier of 4 chunks of one block. A = (1, 2, 3, 4) is put, then read again:
    # touch_cache walks the hit keys in reverse -> order 4, 3, 2, 1 (head most recent). A new
    # chunk 9 evicts 4, so A finds 1, 2, 3. (Touching head first evicted 1: nothing found.)
    cache = TieredCache(0, 100, cpu_chunks=4, flavor="lmcache")
    a = _r((1, 2, 3, 4), 400, 4, scratch=0)
    cache.replay([a, a])
    assert cache.cpu.resident() == [4, 3, 2, 1]  # type: ignore[union-attr]
    cache.access(_r((9,), 100, 1, scratch=0))
    assert cache.access(a).cpu_tokens == 300


def test_lmcache_put_skips_present_chunks() -> None:
    # CPU of 4: A = (1, 2, 3), then 8 and 9 evict 1 -> 2, 3, 8, 9. A again misses at once (1 is
    # gone); the put writes 1 only -- 2 and 3 are present and not refreshed -> 2 goes: 3, 8, 9, 1.
    # So 8 is still there. (Refreshing 2 and 3 on the put evicted 8 instead.)
    cache = TieredCache(0, 100, cpu_chunks=4, flavor="lmcache")
    a = _r((1, 2, 3), 300, 3, scratch=0)
    cache.replay([a, _r((8,), 100, 1, scratch=0), _r((9,), 100, 1, scratch=0)])
    assert cache.access(a).cpu_tokens == 0
    assert cache.cpu.resident() == [3, 8, 9, 1]  # type: ignore[union-attr]
    assert cache.access(_r((8,), 100, 1, scratch=0)).cpu_tokens == 100


def _doc(n: int, base: int = 0) -> tuple[int, ...]:
    return tuple(range(base, base + n))


def test_native_load_needs_a_chunks_worth_of_tokens() -> None:
    # chunks of 4 blocks. The CPU holds chunks 0 and 1 of a 12-block document; the GPU its first
    # 7 blocks. The lookup starts at chunk 1 (block 7 is in it) and hits it: 8 - 7 = 1 block,
    # less than a chunk -> vLLM loads nothing (the simulator used to load that block).
    cache = TieredCache(7, 16, cpu_chunks=2, chunk_blocks=4, flavor="vllm")
    cache.cpu.touch_in_order([3, 7])  # type: ignore[union-attr]  # chunk keys: blocks 3 and 7
    cache.gpu.release(list(reversed(range(7))), ())
    out = cache.access(Request(_doc(12), 200, max_hit=12))
    assert (out.gpu_blocks, out.cpu_tokens) == (7, 0)
    # with the GPU holding 4 blocks the lookup starts at chunk 1, hits it, and loads a whole chunk
    cache = TieredCache(4, 16, cpu_chunks=2, chunk_blocks=4, flavor="vllm")
    cache.cpu.touch_in_order([3, 7])  # type: ignore[union-attr]
    cache.gpu.release(list(reversed(range(4))), ())
    out = cache.access(Request(_doc(12), 200, max_hit=12))
    assert (out.gpu_blocks, out.cpu_tokens, out.cpu_chunks) == (4, 64, 1)


def test_native_stores_from_chunk_zero_when_nothing_is_loaded() -> None:
    # CPU of 3 one-block chunks. A = (1, 2, 3) is stored; B = (7, 8, 9) evicts it. A again hits
    # its 2 capped blocks on the GPU and loads nothing, so vLLM offers all of A's chunks: 1, 2, 3
    # are stored again (7, 8, 9 evicted), the head most recent. (A full GPU hit used to leave the
    # CPU tier alone.) A partial last chunk is never stored: 48 tokens = 3 full blocks, 3 chunks.
    cache = TieredCache(10, 16, cpu_chunks=3, flavor="vllm")
    a, b = _r(_doc(3, 1), 48, 2), _r(_doc(3, 7), 48, 2)
    cache.replay([a, b])
    assert cache.cpu.resident() == [9, 8, 7]  # type: ignore[union-attr]
    assert cache.access(a).gpu_blocks == 2
    assert cache.cpu.resident() == [3, 2, 1]  # type: ignore[union-attr]


def test_native_store_is_all_or_nothing() -> None:
    # 3 chunks offered to a CPU tier of 2: vLLM's prepare_store cannot evict enough and stores none
    cache = TieredCache(10, 16, cpu_chunks=2, flavor="vllm")
    cache.access(_r(_doc(3, 1), 50, 3))
    assert cache.cpu.resident() == []  # type: ignore[union-attr]
