"""Replays of a workload through the two-tier simulator, summarised as the note reports production.

Every summary uses the note's own conventions: prompt tokens by source, the pool's share of
what the GPU missed, restores (requests that loaded from the pool), and the prefill time those
restores stood in for, each restore expressed with the cold-read model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..coldread import ColdReadModel
from ..sim.fast import replay_flat
from ..workloads import Workload


@dataclass(frozen=True)
class Config:
    """One simulated server: GPU pool in tokens, RAM pool in blocks (None = no pool), policy.

    The pool behaves as vLLM's native offloading does (kvtier.sim flavor 'vllm')."""

    gpu_tokens: int
    pool_blocks: int | None
    policy: str = "write_through"

    def gpu_blocks(self, block_tokens: int) -> int:
        return self.gpu_tokens // block_tokens


def replay(w: Workload, cfg: Config) -> pd.DataFrame:
    """Per request: tokens from GPU, from the pool, computed (one row per request, arrival order),
    by the compiled replay (TieredCache's rules, flavor 'vllm')."""
    out = replay_flat(w.flat, cfg.gpu_blocks(w.block_tokens), w.block_tokens, cpu_chunks=cfg.pool_blocks,
                      policy=cfg.policy, flavor="vllm")
    return pd.DataFrame({"t": w.times, "tokens": out.tokens, "gpu": out.gpu_tokens, "pool": out.cpu_tokens,
                         "computed": out.computed_tokens})


def summarise(per_request: pd.DataFrame, model: ColdReadModel) -> dict[str, float]:
    """The note's production figures, for a simulated run."""
    total = float(per_request["tokens"].sum())
    gpu, pool, computed = (float(per_request[c].sum()) for c in ("gpu", "pool", "computed"))
    restores = per_request.loc[per_request["pool"] > 0, ["t", "pool"]]
    hours = np.floor(per_request["t"].to_numpy() / 3600.0)
    traffic_hours = len(np.unique(hours))
    return {
        "share_gpu": gpu / total,
        "share_pool": pool / total,
        "share_computed": computed / total,
        "pool_share_of_misses": pool / (pool + computed) if pool + computed else 0.0,
        "restores": float(len(restores)),
        "restores_per_traffic_hour": len(restores) / traffic_hours if traffic_hours else 0.0,
        "prefill_saved_s": float(np.sum(model.predict(restores["pool"].to_numpy(dtype=float)))) if len(restores) else 0.0,
    }


def gpu_only_curve(w: Workload, gpu_tokens: np.ndarray) -> pd.DataFrame:
    """GPU-cache hit share for each GPU pool size, one compiled replay per size (at ~0.01 s each
    these beat the single stack pass, which kvtier.sim.stack still offers and the benchmark
    compares: benchmarks/bench_counterfactual.py)."""
    tokens = w.prompt_tokens
    shares = [replay_flat(w.flat, int(g) // w.block_tokens, w.block_tokens).gpu_tokens.sum() / tokens.sum()
              for g in np.asarray(gpu_tokens)]
    return pd.DataFrame({"gpu_tokens": gpu_tokens, "share_gpu": np.asarray(shares, dtype=float)})
