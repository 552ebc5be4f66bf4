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
from ..workloads.synthetic import AgenticParams, Targets, assemble, draw, fit_prompts, fit_report
from .replay import Config, replay


def targets_from_registry(reg: dict[str, Number]) -> Targets:
    def v(key: str) -> float:
        if key not in reg:
            raise KeyError(f"the counterfactual needs {key!r} from the production analysis")
        n = reg[key]
        return float(n.value) * (TIME[n.unit] if n.unit in TIME else 1.0)  # type: ignore[arg-type]

    return Targets(
        requests=int(v("prod.requests")), period_s=v("prod.period"), active_hours=int(v("prod.hours.with_traffic")),
        mean_prompt=v("prod.prompt.mean_tokens"), share_above_200k=v("prod.prompt.share_above_200k"),
        share_above_500k=v("prod.prompt.share_above_500k"), max_running=int(v("prod.max_running")),
        max_model_len=int(v("prod.context_tokens")), mean_output=v("prod.tokens.generated") / v("prod.requests"),
        gpu_share=v("prod.tokens.share_gpu"), low_edge=v("prod.prompt.low_edge"), high_edge=v("prod.prompt.high_edge"),
    )


def gpu_share(w: Workload, gpu_tokens: int) -> float:
    r = replay(w, Config(gpu_tokens, None))
    return float(r["gpu"].sum() / r["tokens"].sum())


def calibrate(t: Targets, params: AgenticParams, model: ColdReadModel, hour_weights: np.ndarray, block_tokens: int,
              gpu_tokens: int, seed: int, steps: int = 8) -> tuple[AgenticParams, Workload, float]:
    """Scale think time (bisection, log scale) until a replay without the pool finds production's GPU share.

    The GPU tier never depends on the pool (blocks loaded from it land on the GPU like computed
    ones), so the calibration needs no pool and the pool's share stays a check of the model.
    """
    base = params.think_median_s
    d = draw(t, params, model, hour_weights, seed)  # the think time moves arrivals only: draw once
    lo, hi = np.log(1e-2), np.log(1e1)
    for _ in range(steps):
        mid = (lo + hi) / 2
        w = assemble(d, base * float(np.exp(mid)), block_tokens)
        lo, hi = (mid, hi) if gpu_share(w, gpu_tokens) > t.gpu_share else (lo, mid)
    params = replace(params, think_median_s=base * float(np.exp((lo + hi) / 2)))
    w = assemble(d, params.think_median_s, block_tokens)
    return params, w, gpu_share(w, gpu_tokens)


def fit_workload(reg: dict[str, Number], model: ColdReadModel, hour_weights: np.ndarray, block_tokens: int,
                 gpu_tokens: int, think_median_s: float, think_sigma: float, reusable: float,
                 seed: int) -> tuple[Workload, dict]:
    """The whole fit; returns the workload and a record of targets, parameters and fit quality."""
    t = targets_from_registry(reg)
    params = fit_prompts(t, reusable, AgenticParams(think_median_s=think_median_s, think_sigma=think_sigma), seed)
    params, w, share = calibrate(t, params, model, hour_weights, block_tokens, gpu_tokens, seed)
    quality = fit_report(params, t, seed)
    quality["gpu_share"] = share
    return w, {"targets": asdict(t), "params": asdict(params), "fit": quality}
