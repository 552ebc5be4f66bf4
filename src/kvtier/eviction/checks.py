"""What a measured request did, from the /metrics snapshots taken around it.

Both the harness (to flag a run while it runs) and the analysis (from the raw .prom files)
call these, so the verdict in run.yaml and the published numbers come from the same code.
"""

from __future__ import annotations

from typing import Any

from ..records.geometry import offload_block_tokens
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

    Bytes per offloaded block come from kv_offload_config_info (vLLM >= 0.33), else from
    `bytes_per_block` (vLLM 0.32: the server log or the model's geometry). Besides the whole
    blocks the note counts, the exact quotients say how much was moved and served when a load
    starts or ends inside a block (a partial GPU hit, the last partial block).
    """
    d = request_delta(before, after)
    per_block = after.offload_bytes_per_block() or bytes_per_block
    block_tokens = offload_block_tokens(after, block_tokens)
    moved = served = None
    if d["load_bytes"] is not None and per_block:
        moved = round(d["load_bytes"] / per_block)
    if block_tokens:
        served = int(d["pool_tokens"] // block_tokens)  # type: ignore[operator]
    seen = sum(v for k, v in d.items() if k.endswith("_tokens"))  # type: ignore[misc]
    return {
        **d,
        "tokens_seen": seen,
        "bytes_per_block": per_block,
        "block_tokens": block_tokens,
        "blocks_moved": moved,
        "blocks_served": served,
        "evicted": bool(d["gpu_hit_tokens"] <= gpu_hit_tolerance * prompt_tokens),  # type: ignore[operator]
        "restored_from_pool": bool((d["pool_tokens"] or 0) > 0),
        "recomputed": bool(d["computed_tokens"] >= (1 - gpu_hit_tolerance) * prompt_tokens),  # type: ignore[operator]
    }


def exact_blocks(checks: dict[str, Any]) -> dict[str, float | None]:
    """Blocks moved and served as exact quotients: a load that starts or ends inside an offloaded
    block (after a partial GPU hit, or the last partial block) moves a fraction of one, which the
    whole-block counts of the note round away."""
    per_block, block = checks.get("bytes_per_block"), checks.get("block_tokens")
    moved = checks["load_bytes"] / per_block if checks.get("load_bytes") is not None and per_block else None
    served = checks["pool_tokens"] / block if block else None
    return {"blocks_moved_exact": moved, "blocks_served_exact": served,
            "tokens_moved": moved * block if moved is not None and block else None}
