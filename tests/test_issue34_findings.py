"""Issue 34, item 8: three numbers that did not follow their records (a held-out perturbation audit).

Each test fails on b8652f7: (i) blocks moved were rounded and blocks served floored, so a restore that
moved 124.96 blocks for 124.96 served read "125 / 124"; (iii) a request after eviction that took no
tokens from the pool still counted as a restore and its time entered the restore median. (ii), the
load flag from the samples, is in tests/test_load_rule.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.eviction import checks
from kvtier.eviction import longctx_analysis as lx

SCHEMAS = Path("workflow/schemas/eviction-run.schema.yaml"), Path("workflow/schemas/eviction-request.schema.yaml")
LONGCTX = Path("raw/eviction/longctx")
BIG = "2026-12-02T01-34-30Z-214a-200k-1-native"


def test_moved_and_served_go_through_the_same_rounding():
    per_block, block = 3_276_800, 1600  # the 200K launch's offloaded block (run.yaml, server log)
    pool_tokens = 199_936  # 200,000 less the 64-token preamble the KV cache still held
    load_bytes = pool_tokens * per_block // block  # the load skips those 64 tokens: 124.96 blocks
    assert load_bytes / per_block == pool_tokens / block == pytest.approx(124.96)
    assert checks.blocks_moved(load_bytes, per_block) == checks.blocks_served(pool_tokens, block) == 125
    # whole blocks stay whole (setup C's eviction test: 131 moved for 127 served, both exact)
    assert checks.blocks_moved(131 * 43_940_327, 43_940_327) == 131 and checks.blocks_served(127 * 1600, 1600) == 127


@pytest.fixture(scope="module")
def big_launch():
    """The 200K native launch's measured requests and its launch row (the records as pinned)."""
    return lx.load([LONGCTX / BIG], *SCHEMAS)


def test_table9c_prints_moved_equal_to_served_from_the_records(big_launch):
    reqs, runs = big_launch
    t = lx.size_table(reqs, runs, 3.0).values_only()
    row = t.iloc[0]
    # recomputed here from the records: bytes loaded over the block's bytes, pool tokens over its tokens
    r = reqs.values_only()
    rest = r[r.phase == "restore"]
    moved = (rest.load_bytes / rest.bytes_per_block).median()
    served = (rest.pool_tokens / rest.block_tokens).median()
    assert moved == pytest.approx(served) == pytest.approx(124.96)
    assert row.blocks_moved_median == pytest.approx(moved) and row.blocks_served_median == pytest.approx(served)


def test_a_recomputed_request_after_eviction_is_no_restore(big_launch):
    reqs, runs = big_launch
    before = lx.size_table(reqs, runs, 3.0).values_only().iloc[0]
    assert before.restores == 3 and before.restores_recomputed == 0
    # the audit's perturbation: restore 2 took no tokens from the pool and was computed again in 381 s
    r = reqs.copy()
    i = r.index[(r.phase == "restore").to_numpy() & (r["round"] == 2).to_numpy()][0]
    prompt = float(r.loc[i, "prompt_tokens"])
    r.loc[i, ["pool_tokens", "gpu_hit_tokens", "computed_tokens", "ttft_s"]] = [0.0, 0.0, prompt, 381.0]
    r.loc[i, ["load_bytes", "blocks_moved_exact", "blocks_served_exact"]] = [0.0, 0.0, 0.0]
    after = lx.size_table(r, runs, 3.0).values_only().iloc[0]
    assert after.restores == 2 and after.restores_recomputed == 1
    pooled = r[(r.phase == "restore").to_numpy() & (r.pool_tokens > 0).to_numpy()].ttft_s.astype(float)
    assert after.restore_median == pytest.approx(pooled.median()) and after.restore_max < 381.0
    assert after.ratio_n == 2


def test_the_control_still_counts_its_recomputed_requests():
    import numpy as np
    import pandas as pd

    after = pd.DataFrame({"pool_tokens": [0.0, 0.0, 5.0]})
    assert checks.restored_from_pool(after, "none").tolist() == [True, True, True]
    assert checks.restored_from_pool(after, "native").tolist() == [False, False, True]
    assert checks.restored_from_pool(pd.DataFrame({"pool_tokens": [np.nan]}), "native").tolist() == [False]
