"""The lab's scenario on the simulator, against the lab's own account of it.

Hand arithmetic: 21,520 tokens / 16 = 1,345 blocks, one is vLLM's null block -> 1,344 usable.
A 5,011-token document (+ its generated token) occupies 313 full blocks + 1 partial block and
can hit 313 blocks = 5,008 tokens. vLLM frees the unhashed partial block to the front of its
free queue, so while a request runs one block is kept free for it and at most 1,343 blocks stay
cached. After a pass the last four documents hold 4 x 313 = 1,252 blocks and the fifth-last
keeps its first 1,343 - 1,252 = 91 blocks = 1,456 tokens -- the lab's measured 21,488 GPU
tokens in the reverse pass are 4 x 5,008 + 1,456.
"""

import pandas as pd

from kvtier.lab import experiments as ex

SHAPE = ex.LabShape(docs=10, doc_tokens=5011, gpu_cache_tokens=21_520, block_tokens=16)


def _pass(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[df["pass"].eq(name) & df["doc"].ge(0)].set_index("doc")


def test_second_pass_gets_zero_hits_at_the_lab_size():
    df = ex.replay(SHAPE)
    assert _pass(df, "second")["gpu_tokens"].sum() == 0
    assert ex.survivors_after_first_pass(SHAPE) == [6, 7, 8, 9]


def test_reverse_pass_hits_the_last_four_and_part_of_document_five():
    rev = _pass(ex.replay(SHAPE), "reverse")
    assert rev.loc[[9, 8, 7, 6], "gpu_tokens"].tolist() == [5008] * 4
    # doc 5 kept 91 blocks after pass two; the four hits need only their partial blocks, which
    # reuse the free one, so nothing more of doc 5 is evicted before it is read.
    assert rev.loc[5, "gpu_tokens"] == 91 * 16 == 21_488 - 4 * 5008
    assert rev.loc[[4, 3, 2, 1, 0], "gpu_tokens"].eq(0).all()


def test_whole_document_simulator_cannot_draw_a_partial_hit():
    # 21,520 // 5,011 = 4 documents fit; after pass two they are 6-9
    rev = _pass(ex.replay_whole_documents(SHAPE), "reverse")
    assert ((rev["gpu_tokens"] > 0) & (rev["computed_tokens"] > 0)).sum() == 0
    assert rev.loc[[9, 8, 7, 6], "gpu_tokens"].eq(5011).all()
    assert rev.loc[[5, 4, 3, 2, 1, 0], "gpu_tokens"].eq(0).all()


def test_two_tiers_serve_the_second_pass_entirely():
    # LMCache chunks of 256 tokens = 16 blocks; 5,011 tokens -> 19 full chunks = 4,864 tokens each.
    df = ex.replay(SHAPE, cpu_chunks=10_000, chunk_tokens=256)
    second = _pass(df, "second")
    assert second["cpu_tokens"].eq(4864).all() and second["computed_tokens"].eq(5011 - 4864).all()
    rev = _pass(df, "reverse")
    assert rev.loc[[9, 8, 7, 6], "cpu_tokens"].eq(0).all()  # rule 1: GPU hits never touch the CPU tier
    # doc 5: 91 blocks on the GPU, CPU chunks cover 304 blocks -> 213 blocks loaded
    assert rev.loc[5, "cpu_tokens"] == (304 - 91) * 16


def test_cpu_tier_one_chunk_short_loses_one_document_in_lmcache_order():
    # ten documents x 19 chunks = 190 chunks. At 189 the first pass evicts document 0's first
    # chunk. In the second pass document 0 misses at once; LMCache puts only its missing chunk
    # (a put skips present keys, which are not refreshed) and that evicts document 0's own next
    # chunk, the least recent. Documents 1-9 are found whole: 9 x 19 x 256 = 43,776 tokens.
    # (Refreshing present keys on a put, as the simulator did before, gave 0 here.)
    sweep = ex.cpu_sweep(SHAPE, 256, 28_672, [171, 189, 190]).set_index("cpu_chunks")
    assert sweep.loc[189, "cpu_tokens"] == 9 * 4864
    assert sweep.loc[190, "cpu_tokens"] == 10 * 4864
    # nine documents' worth: the first pass leaves documents 1-9, and each second-pass miss
    # puts 19 chunks that evict the next document's head before it is read
    assert sweep.loc[171, "cpu_tokens"] == 0


def test_reverse_pass_under_older_vllm_appends_the_partial_block():
    # vLLM 0.17-0.23 append the unhashed partial block to the free queue's end, so it takes a
    # slot in the LRU order: a request leaves 313 + 1 = 314 entries. After pass two the 1,344
    # blocks hold documents 9-6 (4 x 314 = 1,256) and document 5's most recent 88 entries, its
    # blocks 0-87. Each of the four reverse hits brings one new partial block, which evicts one
    # more of document 5's: 84 blocks = 1,344 tokens, 4 x 5,008 + 1,344 = 21,376 over the pass.
    old = ex.LabShape(docs=10, doc_tokens=5011, gpu_cache_tokens=21_520, block_tokens=16, unhashed_first=False)
    rev = _pass(ex.replay(old), "reverse")
    assert rev.loc[[9, 8, 7, 6], "gpu_tokens"].tolist() == [5008] * 4
    assert int(rev["gpu_tokens"].sum()) == 21_376
    assert rev.loc[5, "gpu_tokens"] == 21_376 - 4 * 5008


def test_store_on_evict_fills_the_cpu_tier_only_from_evictions():
    df = ex.replay(SHAPE, cpu_chunks=10_000, chunk_tokens=256, policy="store_on_evict")
    # docs 0-5 were evicted during pass one, docs 6-9 during pass two before they are read
    assert _pass(df, "second")["cpu_tokens"].eq(4864).all()


def test_capacity_thresholds_agree_with_direct_replay():
    any_hit, full = ex.second_pass_capacity_thresholds(SHAPE)
    assert ex.second_pass_hits_at(SHAPE, any_hit) > 0
    assert ex.second_pass_hits_at(SHAPE, any_hit - 16) == 0
    assert ex.second_pass_hits_at(SHAPE, full) == 10 * 5008
    assert ex.second_pass_hits_at(SHAPE, full - 16) < 10 * 5008
    # by hand: document 0's first block must outlive the other nine documents' 313 cached blocks
    # each, with one block kept free for a partial block, plus the null block
    assert any_hit == (9 * 313 + 1 + 1 + 1) * 16 == 45_120
    # all ten documents' 313 blocks, the free block and the null block
    assert full == (10 * 313 + 1 + 1) * 16 == 50_112
