"""The counterfactual rules' bodies: fit the workload, sweep pool sizes and policies, summarise."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from ..coldread import ColdReadModel
from ..numbers import NumbersWriter, atomic_write_text, traced_adder
from ..records.touch import rows_of, touch
from ..records.traced import plain
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


def reader(value: Any, path: str | Path) -> Callable[[], Any]:
    """`value`, as written to `path` (a table, the workload, the cold-read model): each call
    touches the file (records.touch), so a number computed from it names the file."""
    def read() -> Any:
        touch(path)
        return value
    return read


@dataclass(frozen=True)
class Written:
    """What the counterfactual's numbers read, each as written: the fit's record (records.traced:
    its items touch workload_fit.json), the sweeps (rows by policy, each naming its CSV), the GPU
    curve, the workload and the cold-read model, each a reader that touches its file."""

    fit: Mapping[str, Any]
    sweeps: pd.DataFrame
    curve: Callable[[], pd.DataFrame]
    workload: Callable[[], Workload]
    model: Callable[[], ColdReadModel]


def register(writer: NumbersWriter, r: Written, gpu_tokens: int, op_pool_blocks: int) -> None:
    """The appendix's numbers: the model, its fit, the operating point and the sweep's landmarks.
    Each is computed through traced_adder, so it names the files it read; the parameters the fit
    is given (fixed, or config) name none."""
    add = traced_adder(writer)
    fit, W, M = r.fit, r.workload, r.model
    p, f, t = (lambda: fit["params"]), (lambda: fit["fit"]), (lambda: fit["targets"])
    add("cf.model.first_prompt_median", lambda: p()["first_prompt_median"], "tokens")
    add("cf.model.first_prompt_sigma", lambda: p()["first_prompt_sigma"], "count")
    add("cf.model.growth_median", lambda: p()["growth_median"], "tokens")
    add("cf.model.turns_mean", lambda: p()["turns_mean"], "count")
    add("cf.model.think_median", lambda: p()["think_median_s"], "s")
    settings = plain(fit)  # the parameters the fit is given: config or AgenticParams' fixed values
    add("cf.model.think_sigma", lambda: settings["params"]["think_sigma"], "count", settings=True)
    fitted = bool(settings.get("reusable_fitted"))
    add("cf.model.reusable_share", lambda: fit["reusable"], "fraction",
        note=("fitted to production's pool share" if fitted else "assumed") + ": share an unbounded cache could serve")
    add("cf.model.reusable_fitted", lambda: int(fitted), "count", note="1: fitted jointly with the think time, 0: assumed",
        settings=True)
    tried = lambda: pd.DataFrame([dict(x) for x in fit["tried"]])  # noqa: E731
    if fitted and len(settings.get("tried", [])):
        add("cf.fit.reusable_tried", lambda: len(tried()), "count")
        add("cf.fit.reusable_low", lambda: float(tried()["reusable"].min()), "fraction")
        add("cf.fit.reusable_high", lambda: float(tried()["reusable"].max()), "fraction")
    add("cf.model.growth_sigma", lambda: settings["params"]["growth_sigma"], "count", note="fixed", settings=True)
    add("cf.model.system_tokens", lambda: settings["params"]["system_tokens"], "tokens", note="fixed", settings=True)
    add("cf.model.decode_rate", lambda: settings["params"]["decode_tokens_per_s"], "count",
        note="fixed: generated tokens per second", settings=True)
    add("cf.model.requests", lambda: len(W().requests), "requests")
    add("cf.model.lookups", lambda: W().lookups(), "count")
    for k in ("mean_prompt", "share_above_200k", "share_above_500k", "gpu_share"):
        add(f"cf.fit.{k}", lambda: f()[k], "tokens" if k == "mean_prompt" else "fraction")
    for k, unit in (("mean_prompt", "tokens"), ("share_above_200k", "fraction"), ("share_above_500k", "fraction"),
                    ("max_running", "requests")):
        add(f"cf.target.{k}", lambda: t()[k], unit)
    add("cf.fit.worst_share_error", lambda: _worst(f(), t()), "fraction", note="largest gap of the three shares at the operating point")
    add("cf.fit.worst_share_error_points", lambda: _worst(f(), t()) * 100, "count", note="the same, in percentage points")
    _register_sweeps(add, r, gpu_tokens, op_pool_blocks)


def _worst(f: Mapping[str, Any], t: Mapping[str, Any]) -> float:
    """The largest gap of the three shares at the operating point (NaN: the fit has none)."""
    if "op_share_pool" not in f:
        return float("nan")
    worst = max(abs(f[f"op_{k}"] - t[v]) for k, v in (("share_gpu", "gpu_share"), ("share_pool", "pool_share")))
    return max(worst, abs(f["op_share_computed"] - (1.0 - t["gpu_share"] - t["pool_share"])))


def _register_sweeps(add: Any, r: Written, gpu_tokens: int, op_pool_blocks: int) -> None:
    """The operating point of both policies, the pool sweep's landmarks and the GPU curve's."""
    W, M, sweeps = r.workload, r.model, r.sweeps
    pool = lambda policy: rows_of(sweeps, policy).query("vary == 'pool'")  # noqa: E731 (touches the policy's CSV)
    op = lambda policy: pool(policy).set_index("pool_blocks").loc[op_pool_blocks]  # noqa: E731
    for k in ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses"):
        add(f"cf.op.{k}", lambda: op("write_through")[k], "fraction")
        add(f"cf.op_store_on_evict.{k}", lambda: op("store_on_evict")[k], "fraction")
    add("cf.op.restores", lambda: op("write_through")["restores"], "count")
    add("cf.op.restores_per_traffic_hour", lambda: op("write_through")["restores_per_traffic_hour"], "count")
    add("cf.op.prefill_saved", lambda: op("write_through")["prefill_saved_s"], "s")
    add("cf.op_store_on_evict.prefill_saved", lambda: op("store_on_evict")["prefill_saved_s"], "s")

    def peak() -> int:
        w = W()
        per_req = replay(w, Config(gpu_tokens, op_pool_blocks, "write_through"))
        return peak_in_service(w.times, per_req["computed"].to_numpy(), w.output_tokens, M(),
                               plain(r.fit)["params"]["decode_tokens_per_s"])  # a fixed parameter: a setting
    add("cf.op.peak_in_service", peak, "requests")
    pools = lambda: pool("write_through").set_index("pool_blocks")  # noqa: E731
    largest = int(pools().index.max())
    add("cf.sweep.largest_pool_ratio", lambda: int(pools().index.max()) * W().block_tokens / gpu_tokens, "x")
    add("cf.sweep.largest_pool.pool_share_of_misses", lambda: pools().loc[largest, "pool_share_of_misses"], "fraction")
    add("cf.sweep.largest_pool.share_computed", lambda: pools().loc[largest, "share_computed"], "fraction")
    add("cf.sweep.largest_pool.prefill_saved", lambda: pools().loc[largest, "prefill_saved_s"], "s")
    add("cf.sweep.no_pool.share_computed", lambda: pools().loc[0, "share_computed"] if 0 in pools().index else np.nan, "fraction")
    add("cf.sweep.pool_sizes", lambda: len(pools()), "count")
    # the policies compared at a pool half the GPU pool's size (the nearest size swept)
    both = lambda: rows_of(sweeps).query("vary == 'pool'")  # noqa: E731
    half = lambda: int(both().loc[(both()["pool_tokens"] / gpu_tokens - 0.5).abs().idxmin(), "pool_blocks"])  # noqa: E731
    add("cf.sweep.half_pool.ratio", lambda: half() * W().block_tokens / gpu_tokens, "x")
    for policy in ("write_through", "store_on_evict"):
        add(f"cf.sweep.half_pool.{policy}.pool_share_of_misses",
            lambda: pool(policy).set_index("pool_blocks").loc[half(), "pool_share_of_misses"], "fraction")
    for name, ratio in (("half", 0.5), ("double", 2.0), ("op", 1.0)):
        add(f"cf.gpu.{name}.share_gpu", lambda: float(np.interp(ratio * gpu_tokens, r.curve()["gpu_tokens"], r.curve()["share_gpu"])),
            "fraction")
