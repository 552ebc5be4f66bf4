"""Fit the synthetic workload to production, then calibrate its think time.

Targets come from the numbers registry (the production analysis), never from the note's text.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from ..coldread import ColdReadModel
from ..numbers import Number
from ..render.formats import TIME
from ..workloads import Workload
from ..workloads.synthetic import AgenticParams, Targets, TooFewRequests, assemble, draw, fit_prompts, fit_report
from .replay import Config, replay, summarise


def targets_from_registry(reg: dict[str, Number], prefix: str = "prod") -> Targets:
    """The production analysis's aggregates of one setup (its numbers prefix: `prod` for C,
    `prodcpu` for the CPU capture), in seconds and tokens."""
    def v(name: str) -> float:
        key = f"{prefix}.{name}"
        if key not in reg:
            raise KeyError(f"the counterfactual needs {key!r} from the production analysis")
        n = reg[key]
        return float(n.value) * (TIME[n.unit] if n.unit in TIME else 1.0)  # type: ignore[arg-type]

    return Targets(
        requests=int(v("requests")), period_s=v("period"), active_hours=int(v("hours.with_traffic")),
        mean_prompt=v("prompt.mean_tokens"), share_above_200k=v("prompt.share_above_200k"),
        share_above_500k=v("prompt.share_above_500k"), max_running=int(v("max_running")),
        max_model_len=int(v("context_tokens")), mean_output=v("tokens.generated") / v("requests"),
        gpu_share=v("tokens.share_gpu"), low_edge=v("prompt.low_edge"), high_edge=v("prompt.high_edge"),
        pool_share=v("tokens.share_pool"), restores_per_hour=v("restores.per_traffic_hour"),
    )


def gpu_share(w: Workload, gpu_tokens: int) -> float:
    r = replay(w, Config(gpu_tokens, None))
    return float(r["gpu"].sum() / r["tokens"].sum())


def calibrate(t: Targets, params: AgenticParams, model: ColdReadModel, hour_weights: np.ndarray, block_tokens: int,
              gpu_tokens: int, seed: int, steps: int = 8) -> tuple[AgenticParams, Workload, float]:
    """Scale think time (bisection, log scale) until a replay without the pool finds production's GPU share.

    The GPU tier never depends on the pool (blocks loaded from it land on the GPU like computed
    ones), so the calibration needs no pool and the pool's share stays a check of the model.

    A think time so long that the drawn sessions put too few requests inside the period (a short
    period: kvtier.workloads.synthetic.TooFewRequests) counts as too long; if production's GPU
    share lies beyond the longest think time that fills the period, the calibration stops short
    of it and the returned GPU share says by how much.
    """
    base = params.think_median_s
    d = draw(t, params, model, hour_weights, seed)  # the think time moves arrivals only: draw once
    lo, hi = np.log(1e-3), np.log(1e1)
    for _ in range(steps):
        mid = (lo + hi) / 2
        try:
            w = assemble(d, base * float(np.exp(mid)), block_tokens)
        except TooFewRequests:  # too long a think time for the period: look shorter
            hi = mid
            continue
        lo, hi = (mid, hi) if gpu_share(w, gpu_tokens) > t.gpu_share else (lo, mid)
    params = replace(params, think_median_s=base * float(np.exp((lo + hi) / 2)))
    try:
        w = assemble(d, params.think_median_s, block_tokens)
    except TooFewRequests:  # the last step was too long: the longest one that filled the period
        params = replace(params, think_median_s=base * float(np.exp(lo)))
        w = assemble(d, params.think_median_s, block_tokens)
    return params, w, gpu_share(w, gpu_tokens)


def operating_point(w: Workload, model: ColdReadModel, gpu_tokens: int, pool_blocks: int) -> dict[str, float]:
    """The note's aggregates for a replay at production's GPU and pool sizes (write-through)."""
    return summarise(replay(w, Config(gpu_tokens, pool_blocks)), model)


def fit_workload(reg: dict[str, Number], model: ColdReadModel, hour_weights: np.ndarray, block_tokens: int,
                 gpu_tokens: int, think_median_s: float, think_sigma: float, reusable: float | list[float],
                 seed: int, pool_blocks: int | None = None, steps: int = 3, prefix: str = "prod",
                 decode_tokens_per_s: float | None = None) -> tuple[Workload, dict]:
    """The whole fit; returns the workload and a record of targets, parameters and fit quality.

    `reusable` a number: the reusable share is assumed, the think time calibrated to the GPU
    share. A bracket [lo, hi]: the reusable share is fitted too (bisection) so that the replay at
    the GPU and pool sizes reproduces production's pool share while the think time keeps its GPU
    share; the computed share follows (the three sum to one) and the restore rate is a check.
    The replay is noisy in the reusable share (each value refits the prompts), so the closest
    of the points tried is kept.

    `prefix`: the setup's numbers prefix (targets_from_registry). `decode_tokens_per_s`: the
    decoding rate that spaces turns (None: AgenticParams' default, setup C's).
    """
    t = targets_from_registry(reg, prefix)
    base = AgenticParams(think_median_s=think_median_s, think_sigma=think_sigma)
    if decode_tokens_per_s is not None:
        base = replace(base, decode_tokens_per_s=float(decode_tokens_per_s))

    def at(share: float) -> tuple[float, AgenticParams, Workload, float, dict]:
        params = fit_prompts(t, share, base, seed)
        params, w, gpu = calibrate(t, params, model, hour_weights, block_tokens, gpu_tokens, seed)
        op = operating_point(w, model, gpu_tokens, pool_blocks) if pool_blocks is not None else {}
        return share, params, w, gpu, op

    if isinstance(reusable, (int, float)):
        tried = [at(float(reusable))]
    else:
        if pool_blocks is None:
            raise ValueError("fitting the reusable share needs the pool size")
        lo, hi = (float(x) for x in reusable)
        tried = [at(lo), at(hi)]
        for _ in range(steps):  # pool share grows with the reusable share
            mid = (lo + hi) / 2
            tried.append(at(mid))
            lo, hi = (mid, hi) if tried[-1][4]["share_pool"] < t.pool_share else (lo, mid)
    share, params, w, gpu, op = min(tried, key=lambda r: abs(r[4].get("share_pool", 0.0) - t.pool_share)
                                    + abs(r[3] - t.gpu_share))
    quality = fit_report(params, t, seed)
    quality["gpu_share"] = gpu
    quality.update({f"op_{k}": v for k, v in op.items()})
    return w, {"targets": asdict(t), "params": asdict(params), "fit": quality, "reusable": share,
               "reusable_fitted": not isinstance(reusable, (int, float)),
               "tried": [{"reusable": r[0], "gpu_share": r[3], **{k: r[4].get(k) for k in ("share_pool", "share_computed",
                                                                                          "restores_per_traffic_hour")}}
                         for r in tried]}
