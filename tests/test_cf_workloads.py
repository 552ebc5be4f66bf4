"""Workloads for the counterfactual: regrouping, trace readers, Mooncake validation, the model."""

from __future__ import annotations

import io
import os
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from kvtier.errors import RawRecordError
from kvtier.sim import TieredCache
from kvtier.sim.stack import hits_by_capacity, stack_positions
from kvtier.workloads import regroup, traces
from kvtier.workloads.base import SCOPE_SHIFT, vllm_request

SHARED = Path(os.environ.get("KVTIER_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces"))
MOONCAKE = SHARED / "mooncake" / "conversation_trace.jsonl"


def test_regroup_names_a_block_by_the_last_base_block_it_reaches() -> None:
    # 64-token ids -> 160-token blocks: block 0 covers tokens 0-159, reaching base block 2 (128-191)
    assert regroup([10, 11, 12, 13, 14], 320, 64, 160) == (12, 14)
    # only full target blocks are cacheable: 300 tokens hold one block of 160
    assert regroup([10, 11, 12, 13, 14], 300, 64, 160) == (12,)
    # 512 -> 1,600 (not a multiple): block 0 ends at token 1,600, inside base block 3
    assert regroup(list(range(7)), 3_300, 512, 1_600) == (3, 6)
    assert regroup([5], 512, 512, 512, scope=3) == ((3 << SCOPE_SHIFT) | 5,)


def test_vllm_request_keeps_the_last_token_out_of_hits() -> None:
    r = vllm_request((1, 2, 3), 4_800, 1_600, 100)
    # 4,800 tokens: the last block holds the final prompt token, so only two blocks may hit;
    # 99 generated tokens of KV fill no further block: one unhashed partial block
    assert (r.max_hit, r.unique, r.scratch) == (2, 0, 1)
    r = vllm_request((1, 2, 3), 4_800, 1_600, 1_700)
    assert (r.unique, r.scratch) == (1, 1)  # 1,699 generated: one full unique block + a partial one


def _tgz(tmp_path: Path, convs: dict[str, dict]) -> Path:
    path = tmp_path / "t.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, conv in convs.items():
            data = json.dumps(conv).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_kv_cache_tester_flattens_subagents_and_scopes_ids(tmp_path: Path) -> None:
    conv = {"block_size": 64, "models": ["big"], "requests": [
        {"t": 0.0, "type": "n", "model": "big", "in": 128, "out": 5, "hash_ids": [1, 2]},
        {"t": 10.0, "type": "subagent", "models": ["big"], "requests": [
            {"t": 2.5, "type": "n", "model": "big", "in": 64, "out": 1, "hash_ids": [1]}]},
        {"t": 11.0, "type": "subagent", "models": ["small"], "requests": [
            {"t": 0.5, "type": "n", "model": "small", "in": 64, "out": 1, "hash_ids": [1]}]},
        {"t": 20.0, "type": "n", "model": "big", "in": 192, "out": 5, "hash_ids": [1, 2, 3]},
    ]}
    w = traces.kv_cache_tester(_tgz(tmp_path, {"a.json": conv, "b.json": conv}), 64)
    assert len(w.requests) == 8
    # interleaved by recorded time, both conversations starting at 0: no seed, no random gap
    assert w.times.tolist() == [0.0, 0.0, 11.5, 11.5, 12.5, 12.5, 20.0, 20.0]
    firsts = {r.blocks[0] for r in w.requests if r.tokens == 128}
    assert firsts == {(1 << SCOPE_SHIFT) | 1, (3 << SCOPE_SHIFT) | 1}  # same local id, two conversations
    # the sub-agent on the same model shares its parent's scope; the one on another model does not
    same = [r.blocks[0] for t, r in zip(w.times, w.requests) if t == 12.5]
    other = [r.blocks[0] for t, r in zip(w.times, w.requests) if t == 11.5]
    assert set(same) == firsts and not set(other) & firsts


def test_kv_cache_tester_start_gap_is_fixed(tmp_path: Path) -> None:
    conv = {"block_size": 64, "requests": [{"t": 1.0, "type": "n", "in": 64, "out": 1, "hash_ids": [1]}]}
    w = traces.kv_cache_tester(_tgz(tmp_path, {"a.json": conv, "b.json": conv, "c.json": conv}), 64, start_gap_s=30.0)
    assert w.times.tolist() == [1.0, 31.0, 61.0]


def test_regroup_refuses_a_smaller_block(tmp_path: Path) -> None:
    # 64-token ids at 16 tokens a block would name four blocks by one id each
    with pytest.raises(ValueError, match="smaller"):
        regroup([10, 11], 128, 64, 16)
    conv = {"block_size": 64, "requests": [{"t": 0.0, "type": "n", "in": 64, "out": 1, "hash_ids": [1]}]}
    with pytest.raises(ValueError, match="t.tgz: its 64-token ids cannot be regrouped into 16-token blocks"):
        traces.kv_cache_tester(_tgz(tmp_path, {"a.json": conv}), 16)


def test_kv_cache_tester_refuses_another_block_size(tmp_path: Path) -> None:
    with pytest.raises(RawRecordError, match="a.json: block_size 16"):
        traces.kv_cache_tester(_tgz(tmp_path, {"a.json": {"block_size": 16, "requests": []}}), 64)


def test_mooncake_bad_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n{"timestamp": 1}\n')
    with pytest.raises(RawRecordError, match=r"m\.jsonl:2: not a Mooncake record"):
        traces.mooncake(bad)


@pytest.mark.skipif(not MOONCAKE.exists(), reason=f"public trace not present at {MOONCAKE} (set KVTIER_TRACES)")
def test_mooncake_validation_against_the_paper() -> None:
    """Mooncake (FAST'25) reports a cache ratio of about 40% for the conversation trace with an
    unbounded cache, and a local cache of 3M tokens reaching less than half of that."""
    w = traces.mooncake(MOONCAKE, 512)
    tokens = w.prompt_tokens
    positions = stack_positions(w.requests)
    hits = hits_by_capacity(positions, [10**12, 3_000_000 // 512])
    unbounded, lru_3m = np.minimum(hits * 512, tokens[:, None]).sum(axis=0) / tokens.sum()
    assert unbounded == pytest.approx(0.40, abs=0.04)
    assert lru_3m < unbounded / 2
    # the single pass agrees with a direct LRU replay at the same capacity
    direct = TieredCache(3_000_000 // 512, 512).replay(w.requests)
    assert sum(o.gpu_tokens for o in direct) / tokens.sum() == pytest.approx(lru_3m, abs=1e-12)


SYNTHETIC = SHARED / "mooncake" / "synthetic_trace.jsonl"


@pytest.mark.skipif(not SYNTHETIC.exists(), reason=f"public trace not present at {SYNTHETIC} (set KVTIER_TRACES)")
def test_mooncake_synthetic_trace_reuse_matches_the_paper() -> None:
    """The paper's Table 2 gives a cache ratio of about 66% for its synthetic trace."""
    from kvtier.counterfactual.public import reuse_shares

    unbounded, lru_3m = reuse_shares(str(SYNTHETIC), 512, [10**15, 3_000_000])
    assert unbounded == pytest.approx(0.66, abs=0.04)
    assert lru_3m < unbounded
