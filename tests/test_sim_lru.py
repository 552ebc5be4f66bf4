"""The GPU tier: LRU in vLLM's order, prefix lookups that stop at the first missing block.

Expected values are worked out by hand from the rules, not read back from the code.
"""

from kvtier.sim import LRUTier, TieredCache, document_chain, gpu_blocks_for, prompt_request


def test_prefix_lookup_stops_at_first_missing_block():
    t = LRUTier(10)
    t.touch_in_order([3, 2, 0])  # 1 is missing
    assert t.prefix_hits([0, 1, 2, 3]) == 1
    assert t.prefix_hits([0, 1, 2, 3], limit=0) == 0


def test_tail_blocks_of_the_oldest_prefix_go_first():
    # capacity 6: request A = blocks a0..a3, then B = b0..b3 needs 4 slots -> A loses a3 and a2.
    c = TieredCache(6, 1)
    a = prompt_request(iter([10, 11, 12, 13]), 4, 1, generated=0)
    b = prompt_request(iter([20, 21, 22, 23]), 4, 1, generated=0)
    c.access(a)
    c.access(b)
    assert set(c.gpu.resident()) == {10, 11, 20, 21, 22, 23}
    # A's head still hits: two of its blocks; vLLM's max-hit rule caps a 4-token prompt at 3 blocks.
    assert c.access(a).gpu_blocks == 2


def test_prompt_request_by_hand():
    # 5,011 tokens in 16-token blocks: 313 full blocks (5,008 tokens), 3 tokens in a partial block.
    r = prompt_request(document_chain(0), 5011, 16, generated=1)
    assert (r.n_blocks, r.max_hit, r.scratch) == (313, 313, 1)
    # an exact multiple: the last block is never a hit (vLLM recomputes the last prompt token)
    r = prompt_request(document_chain(0), 4096, 128, generated=0)
    assert (r.n_blocks, r.max_hit, r.scratch) == (32, 31, 0)


def test_null_block_is_not_usable():
    assert gpu_blocks_for(21_520, 16) == 1344


def test_evictions_counted_and_reported():
    seen: list[int] = []
    t = LRUTier(2, on_evict=seen.append)
    t.touch_in_order([1, 2, 3])
    assert seen == [1] and t.evictions == 1 and t.resident() == [2, 3]
