"""The counterfactual rules' bodies: fit the workload, sweep pool sizes and policies, summarise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..coldread import ColdReadModel
from ..numbers import NumbersWriter, atomic_write_text
from ..records.touch import touch
from ..workloads import Workload
from ..workloads.synthetic import peak_in_service
from .replay import Config, replay, summarise


def hour_weights(hours_csv: str | Path) -> np.ndarray:
    """Tokens per clock hour of the period (the production analysis's tidy table): sessions of the
    synthetic workload start in proportion to them, so quiet hours stay quiet. Touches the table
    (records.touch): what is computed from the weights names it."""
    touch(hours_csv)
    w = pd.read_csv(hours_csv)["tokens"].to_numpy(dtype=float)
    if not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"{hours_csv}: no traffic in any hour of the period")
    return w


def sweep(w: Workload, model: ColdReadModel, gpu_tokens: int, pool_ratios: list[float], gpu_ratios: list[float],
          op_pool_blocks: int, policy: str) -> pd.DataFrame:
    """Pool sizes (as multiples of the GPU pool, the operating point included) at the note's GPU
    size; and, for the server's own policy (write-through), GPU sizes at the note's pool size.
    One replay per row."""
    rows = []
    pool_sizes = sorted({int(round(r * gpu_tokens / w.block_tokens)) for r in pool_ratios} | {op_pool_blocks})
    for blocks in pool_sizes:
        cfg = Config(gpu_tokens, blocks if blocks > 0 else None, policy)
        rows.append({"vary": "pool", "policy": policy, "gpu_tokens": gpu_tokens, "pool_blocks": blocks,
                     "pool_tokens": blocks * w.block_tokens, **summarise(replay(w, cfg), model)})
    for r in gpu_ratios if policy == "write_through" else ():
        g = int(round(r * gpu_tokens))
        cfg = Config(g, op_pool_blocks, policy)
        rows.append({"vary": "gpu", "policy": policy, "gpu_tokens": g, "pool_blocks": op_pool_blocks,
                     "pool_tokens": op_pool_blocks * w.block_tokens, **summarise(replay(w, cfg), model)})
    return pd.DataFrame(rows)


def write_json(path: str | Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def register(writer: NumbersWriter, fit: dict, sweeps: pd.DataFrame, curve: pd.DataFrame, w: Workload,
             model: ColdReadModel, gpu_tokens: int, op_pool_blocks: int) -> None:
    """The appendix's numbers: the model, its fit, the operating point and the sweep's landmarks."""
    p, f, t = fit["params"], fit["fit"], fit["targets"]
    add = writer.add
    add("cf.model.first_prompt_median", p["first_prompt_median"], "tokens")
    add("cf.model.first_prompt_sigma", p["first_prompt_sigma"], "count")
    add("cf.model.growth_median", p["growth_median"], "tokens")
    add("cf.model.turns_mean", p["turns_mean"], "count")
    add("cf.model.think_median", p["think_median_s"], "s")
    add("cf.model.think_sigma", p["think_sigma"], "count")
    fitted = bool(fit.get("reusable_fitted"))
    add("cf.model.reusable_share", fit["reusable"], "fraction",
        note=("fitted to production's pool share" if fitted else "assumed") + ": share an unbounded cache could serve")
    add("cf.model.reusable_fitted", int(fitted), "count", note="1: fitted jointly with the think time, 0: assumed")
    tried = pd.DataFrame(fit.get("tried", []))
    if fitted and len(tried):
        add("cf.fit.reusable_tried", len(tried), "count")
        add("cf.fit.reusable_low", float(tried["reusable"].min()), "fraction")
        add("cf.fit.reusable_high", float(tried["reusable"].max()), "fraction")
    add("cf.model.growth_sigma", p["growth_sigma"], "count", note="fixed")
    add("cf.model.system_tokens", p["system_tokens"], "tokens", note="fixed")
    add("cf.model.decode_rate", p["decode_tokens_per_s"], "count", note="fixed: generated tokens per second")
    add("cf.model.requests", len(w.requests), "requests")
    add("cf.model.lookups", w.lookups(), "count")
    add("cf.fit.mean_prompt", f["mean_prompt"], "tokens")
    add("cf.fit.share_above_200k", f["share_above_200k"], "fraction")
    add("cf.fit.share_above_500k", f["share_above_500k"], "fraction")
    add("cf.fit.gpu_share", f["gpu_share"], "fraction")
    add("cf.target.mean_prompt", t["mean_prompt"], "tokens")
    add("cf.target.share_above_200k", t["share_above_200k"], "fraction")
    add("cf.target.share_above_500k", t["share_above_500k"], "fraction")
    add("cf.target.max_running", t["max_running"], "requests")
    worst = max(abs(f[f"op_{k}"] - t[v]) for k, v in (("share_gpu", "gpu_share"), ("share_pool", "pool_share"))) \
        if "op_share_pool" in f else float("nan")
    if "op_share_pool" in f:
        computed_target = 1.0 - t["gpu_share"] - t["pool_share"]
        worst = max(worst, abs(f["op_share_computed"] - computed_target))
    add("cf.fit.worst_share_error", worst, "fraction", note="largest gap of the three shares at the operating point")
    add("cf.fit.worst_share_error_points", worst * 100, "count", note="the same, in percentage points")
    op = sweeps[(sweeps["vary"] == "pool") & (sweeps["pool_blocks"] == op_pool_blocks)].set_index("policy")
    wt, soe = op.loc["write_through"], op.loc["store_on_evict"]
    for k in ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses"):
        add(f"cf.op.{k}", wt[k], "fraction")
        add(f"cf.op_store_on_evict.{k}", soe[k], "fraction")
    add("cf.op.restores", wt["restores"], "count")
    add("cf.op.restores_per_traffic_hour", wt["restores_per_traffic_hour"], "count")
    add("cf.op.prefill_saved", wt["prefill_saved_s"], "s")
    add("cf.op_store_on_evict.prefill_saved", soe["prefill_saved_s"], "s")
    per_req = replay(w, Config(gpu_tokens, op_pool_blocks, "write_through"))
    add("cf.op.peak_in_service", peak_in_service(w.times, per_req["computed"].to_numpy(), w.output_tokens, model,
                                                p["decode_tokens_per_s"]), "requests")
    pools = sweeps[(sweeps["vary"] == "pool") & (sweeps["policy"] == "write_through")].set_index("pool_blocks")
    largest = int(pools.index.max())
    add("cf.sweep.largest_pool_ratio", largest * w.block_tokens / gpu_tokens, "x")
    add("cf.sweep.largest_pool.pool_share_of_misses", pools.loc[largest, "pool_share_of_misses"], "fraction")
    add("cf.sweep.largest_pool.share_computed", pools.loc[largest, "share_computed"], "fraction")
    add("cf.sweep.largest_pool.prefill_saved", pools.loc[largest, "prefill_saved_s"], "s")
    add("cf.sweep.no_pool.share_computed", pools.loc[0, "share_computed"] if 0 in pools.index else np.nan, "fraction")
    add("cf.sweep.pool_sizes", len(pools), "count")
    # the policies compared at a pool half the GPU pool's size (the nearest size swept)
    both = sweeps[sweeps["vary"] == "pool"]
    half = int(both.loc[(both["pool_tokens"] / gpu_tokens - 0.5).abs().idxmin(), "pool_blocks"])
    add("cf.sweep.half_pool.ratio", half * w.block_tokens / gpu_tokens, "x")
    for policy in ("write_through", "store_on_evict"):
        row = both[(both["policy"] == policy) & (both["pool_blocks"] == half)].iloc[0]
        add(f"cf.sweep.half_pool.{policy}.pool_share_of_misses", row["pool_share_of_misses"], "fraction")
    add("cf.gpu.half.share_gpu", float(np.interp(0.5 * gpu_tokens, curve["gpu_tokens"], curve["share_gpu"])), "fraction")
    add("cf.gpu.double.share_gpu", float(np.interp(2.0 * gpu_tokens, curve["gpu_tokens"], curve["share_gpu"])), "fraction")
    add("cf.gpu.op.share_gpu", float(np.interp(gpu_tokens, curve["gpu_tokens"], curve["share_gpu"])), "fraction")

