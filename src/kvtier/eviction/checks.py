"""What a measured request did, from the /metrics snapshots taken around it.

Both the harness (to flag a run while it runs) and the analysis (from the raw .prom files)
call these, so the verdict in run.yaml and the published numbers come from the same code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..records.geometry import offload_block_bytes_of as offload_block_bytes, offload_block_tokens
from ..records.prometheus import Snapshot


def request_delta(before: Snapshot, after: Snapshot) -> dict[str, float | None]:
    """Prompt tokens by source and offload loads between two snapshots of one request."""
    b, a = before.tokens_by_source(), after.tokens_by_source()
    out: dict[str, float | None] = {
        "gpu_hit_tokens": a["local_cache_hit"] - b["local_cache_hit"],
        "pool_tokens": a["external_kv_transfer"] - b["external_kv_transfer"],
        "computed_tokens": a["local_compute"] - b["local_compute"],
    }
    lb, la = before.load_bytes(), after.load_bytes()
    tb, ta = before.load_time(), after.load_time()
    out["load_bytes"] = None if lb is None or la is None else la - lb
    out["load_time_s"] = None if tb is None or ta is None else ta - tb
    return out


def restore_checks(before: Snapshot, after: Snapshot, prompt_tokens: int, block_tokens: int | None,
                   gpu_hit_tolerance: float = 0.1, bytes_per_block: int | None = None) -> dict[str, Any]:
    """Was the prefix evicted, where did its tokens come from, how many blocks moved.

    Bytes per offloaded block and its tokens come from kv_offload_config_info (vLLM >= 0.33),
    else from `bytes_per_block` (vLLM 0.32: the server log or the model's geometry) and
    `block_tokens` (run.yaml): records.geometry. Besides the whole
    blocks the note counts, the exact quotients say how much was moved and served when a load
    starts or ends inside a block (a partial GPU hit, the last partial block).
    """
    d = request_delta(before, after)
    per_block = offload_block_bytes(after, bytes_per_block)
    block_tokens = offload_block_tokens(after, block_tokens)
    seen = sum(v for k, v in d.items() if k.endswith("_tokens"))  # type: ignore[misc]
    return {
        **d,
        "tokens_seen": seen,
        "bytes_per_block": per_block,
        "block_tokens": block_tokens,
        "blocks_moved": blocks_moved(d["load_bytes"], per_block),
        "blocks_served": blocks_served(d["pool_tokens"], block_tokens),
        "evicted": evicted(d["gpu_hit_tokens"], prompt_tokens, gpu_hit_tolerance),
        "restored_from_pool": bool((d["pool_tokens"] or 0) > 0),
        "recomputed": recomputed(d["computed_tokens"], prompt_tokens, gpu_hit_tolerance),
    }


# One function per verdict, so the analysis can compute each from the records it rests on alone.
def whole_blocks(quotient: float) -> int:
    """A quotient of blocks to the nearest whole block: moved and served go through this one
    rounding, so that a load the pool served in full reads as equal (124.96 moved for 124.96
    served is 125 / 125, never 125 / 124 as a rounded count beside a floored one would read)."""
    return int(round(quotient))


def blocks_moved(load_bytes: float | None, per_block: int | None) -> int | None:
    """Offloaded blocks the load bytes make, to the nearest whole block (the note's count)."""
    return whole_blocks(load_bytes / per_block) if load_bytes is not None and per_block else None


def blocks_served(pool_tokens: float | None, block_tokens: int | None) -> int | None:
    """Offloaded blocks' worth of tokens the pool served, to the nearest whole block (as moved)."""
    return whole_blocks(pool_tokens / block_tokens) if pool_tokens is not None and block_tokens else None


def restored_from_pool(after: pd.DataFrame, tier: str) -> np.ndarray:
    """Which requests after eviction count as restores: with a tier, those the pool served tokens
    to (a request the server computed again instead is recomputed, not restored); without one
    (the control), every request after eviction, each recomputed by design."""
    served = (pd.to_numeric(after.pool_tokens, errors="coerce").fillna(0) > 0).to_numpy()
    return served | (tier == "none")  # read for both tiers: a count over them names the files it read


def evicted(gpu_hit_tokens: float, prompt_tokens: int, tolerance: float) -> bool:
    """The prefix was out of the GPU's KV cache: (almost) nothing hit there."""
    return bool(gpu_hit_tokens <= tolerance * prompt_tokens)


def recomputed(computed_tokens: float, prompt_tokens: int, tolerance: float) -> bool:
    """(Almost) every prompt token was computed again."""
    return bool(computed_tokens >= (1 - tolerance) * prompt_tokens)


def exact_blocks(checks: dict[str, Any]) -> dict[str, float | None]:
    """Blocks moved and served as exact quotients: a load that starts or ends inside an offloaded
    block (after a partial GPU hit, or the last partial block) moves a fraction of one, which the
    whole-block counts of the note round away."""
    per_block, block = checks.get("bytes_per_block"), checks.get("block_tokens")
    moved = checks["load_bytes"] / per_block if checks.get("load_bytes") is not None and per_block else None
    served = checks["pool_tokens"] / block if block else None
    return {"blocks_moved_exact": moved, "blocks_served_exact": served,
            "tokens_moved": moved * block if moved is not None and block else None}
