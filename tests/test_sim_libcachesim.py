"""Single-tier hit counts against libCacheSim's LRU on the Mooncake conversation trace
(the reference stream is explained in kvtier.sim.reference)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvtier.sim import TieredCache, read_mooncake
from kvtier.sim.reference import libcachesim_lru_hits

pytest.importorskip("libcachesim", reason="libCacheSim (PyPI libcachesim) is not installed")

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("KVTIER_TRACES", REPO.parent / "shared" / "traces"))
CONVERSATION = TRACES / "mooncake" / "conversation_trace.jsonl"


@pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake conversation trace not found at {CONVERSATION} (set KVTIER_TRACES)")
@pytest.mark.parametrize("capacity", [1_000, 8_000, 40_000])
def test_single_tier_lru_hits_equal_libcachesim(capacity: int):
    requests = read_mooncake(CONVERSATION)
    ours = [o.gpu_blocks for o in TieredCache(capacity, 512).replay(requests)]
    theirs = libcachesim_lru_hits(requests, capacity)
    assert sum(ours) > 0
    assert sum(ours) == sum(theirs)
    assert ours == theirs
