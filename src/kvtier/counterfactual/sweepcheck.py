"""Does the counterfactual's calibration procedure predict a real server's pool-size sweep?

The procedure of setup C (kvtier.counterfactual.fit.fit_workload) is applied, unchanged, to the
CPU capture (setup `cpu`, numbers `prodcpu.*`): the synthetic agentic workload is fitted to the
capture's aggregates only (prompt sizes, session length, GPU share, pool share), with the
capture's own service-time model in place of setup C's cold reads. The fitted workload is then
replayed at every pool size of the measured sweep (kvtier.production.sweep) and its shares are
set beside the server's counters of each run. The calibration never sees the sweep: only the
capture (one of its runs) is the calibration point; the other runs are predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..coldread import ColdReadModel
from ..errors import RawRecordError
from ..numbers import Number
from ..production.sweep import SOURCES, RunResult, read_client_log, shares
from ..workloads import Workload
from ..workloads.synthetic import peak_in_service
from .fit import fit_workload
from .replay import Config, replay, summarise

# client.jsonl fields the service model reads beyond those every sweep reads
SERVICE_FIELDS: dict[str, tuple[type, ...]] = {"first_chunk_s": (int, float), "completion_tokens": (int,)}


@dataclass(frozen=True)
class ServiceModel:
    """How long the capture's server took to answer, measured from its client log.

    `latency`: seconds from sending a request to its first token against the prompt tokens the
    server computed for it (usage_prompt_tokens - cached_tokens): the median latency within each
    of a few quantile bins of computed tokens, interpolated as the cold-read model does
    (kvtier.coldread). `decode_tokens_per_s`: generated tokens over the time from the first token
    to the last, summed over all answers (so the model's decoding time adds up to the capture's).

    These are not prefill and decode speeds of the server alone: the client kept up to 16
    requests in flight against a server that ran a few at a time, so every latency includes the
    time the request waited in the server's queue. That is what spaced a session's turns in the
    capture, and the synthetic workload uses the service time only to space a session's turns
    (kvtier.workloads.synthetic._timing); the cache replays never read it, except to express
    restores as time (summarise's prefill_saved_s, which this check does not report)."""

    latency: ColdReadModel
    decode_tokens_per_s: float
    requests: int
    turn_growth_tokens: float  # for the report: median growth of a session's prompt from one answered turn to the next
    turn_growth_range: tuple[float, float] = (float("nan"), float("nan"))  # its smallest and largest


def _bins(computed: np.ndarray, latency: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Medians of computed tokens and of latency in `bins` quantile bins (by rank), neighbouring
    bins merged until the token medians are positive and strictly increasing."""
    order = np.argsort(computed, kind="stable")
    merged: list[np.ndarray] = []
    for g in np.array_split(order, bins):
        if not len(g):
            continue
        if merged and np.median(computed[g]) <= np.median(computed[merged[-1]]):  # ties across the edge
            merged[-1] = np.concatenate([merged[-1], g])
        else:
            merged.append(g)
    while len(merged) > 1 and np.median(computed[merged[0]]) <= 0:  # the origin is the model's own first point
        merged[:2] = [np.concatenate(merged[:2])]
    return (np.array([np.median(computed[g]) for g in merged], dtype=float),
            np.array([np.median(latency[g]) for g in merged], dtype=float))


def service_model(client_log: str | Path, bins: int, above_last: str = "extend_last_segment") -> ServiceModel:
    """The service model of one capture (see ServiceModel). Errors name the file and the line."""
    path = Path(client_log)
    r = read_client_log(path, SERVICE_FIELDS)
    for row in r.itertuples():
        if not 0 < row.first_chunk_s <= row.total_s:
            raise RawRecordError(path, f"first_chunk_s {row.first_chunk_s!r} outside (0, total_s = {row.total_s!r}]", line=row.line)
        if row.completion_tokens < 1:
            raise RawRecordError(path, f"completion_tokens {row.completion_tokens!r}: an answer has at least one token", line=row.line)
    computed = (r.usage_prompt_tokens - r.cached_tokens).to_numpy(dtype=float)
    latency = r.first_chunk_s.to_numpy(dtype=float)
    tokens, seconds = _bins(computed, latency, bins)
    if len(tokens) < 2:
        raise RawRecordError(path, f"the computed prompt tokens take fewer than two distinct bin medians ({bins} bins): "
                                   "no service-time model")
    decoding = float((r.total_s - r.first_chunk_s).sum())
    if decoding <= 0:
        raise RawRecordError(path, "no answer took any time after its first token: no decoding rate")
    model = ColdReadModel(tokens, seconds, above_last)
    by_turn = r.sort_values(["session", "index"], kind="stable")
    growth = by_turn.groupby("session").usage_prompt_tokens.diff().dropna()
    return ServiceModel(model, float(r.completion_tokens.sum()) / decoding, len(r),
                        float(growth.median()) if len(growth) else float("nan"),
                        (float(growth.min()), float(growth.max())) if len(growth) else (float("nan"), float("nan")))


def pool_blocks_of(run: RunResult, block_tokens: int) -> int | None:
    """The run's pool in the model's blocks (None: the run had no pool)."""
    return run.run.pool_tokens // block_tokens if run.run.tiered else None


def predict(reg: dict[str, Number], results: list[RunResult], service: ServiceModel, hour_weights: np.ndarray,
            think_median_s: float, think_sigma: float, reusable: float | list[float], seed: int,
            prefix: str = "prodcpu") -> tuple[Workload, dict[str, Any], pd.DataFrame]:
    """Fit the workload to the capture's aggregates (`prefix`.*), then replay it (write-through) at
    every sweep run's pool size. Returns the workload, the fit's record (fit_workload's) and one
    row per run and source: the measured share, the model's, and the difference in points."""
    def num(key: str) -> int:
        if f"{prefix}.{key}" not in reg:
            raise KeyError(f"the sweep check needs {prefix}.{key} from the production analysis")
        return int(reg[f"{prefix}.{key}"].value)

    block_tokens, gpu_tokens, op_blocks = num("pool.block_tokens"), num("gpu_pool.tokens"), num("pool.blocks")
    w, record = fit_workload(reg, service.latency, hour_weights, block_tokens, gpu_tokens, think_median_s, think_sigma,
                             reusable, seed, op_blocks, prefix=prefix, decode_tokens_per_s=service.decode_tokens_per_s)
    record.update(block_tokens=block_tokens, gpu_tokens=gpu_tokens, pool_blocks=op_blocks)
    rows = []
    for x in results:
        blocks = pool_blocks_of(x, block_tokens)
        model = summarise(replay(w, Config(gpu_tokens, blocks, "write_through")), service.latency)
        measured = shares(x.tokens("measured"))
        for s in SOURCES:
            rows.append({"run": x.run.path.as_posix(), "pool_bytes": x.run.pool_bytes, "pool_tokens": x.run.pool_tokens,
                         "pool_blocks": blocks or 0, "calibration_point": blocks == op_blocks, "source": s,
                         "measured": measured[f"share_{s}"], "model": model[f"share_{s}"],
                         "error_points": 100 * (model[f"share_{s}"] - measured[f"share_{s}"]),
                         "model_restores_per_traffic_hour": model["restores_per_traffic_hour"]})
    table = pd.DataFrame(rows)
    if table.calibration_point.sum() != len(SOURCES):
        raise ValueError(f"exactly one sweep run must have the capture's pool ({op_blocks} blocks of {block_tokens} tokens)")
    return w, record, table


def register(writer: Any, record: dict[str, Any], table: pd.DataFrame, service: ServiceModel, w: Workload,
             service_inputs: list[str], inputs: list[str]) -> None:
    """sweepcpu.cal.*: the service model (read from `service_inputs`), the fitted parameters, the
    fit's residuals at the calibration point, and per sweep run (sweepcpu.cal.run.<i>, as
    sweepcpu.run.<i>) the model's shares and their differences from the measured ones, in
    percentage points (all read from `inputs`)."""
    P = "sweepcpu.cal."
    add = writer.add
    writer.reading(*service_inputs)
    m = service.latency
    add(P + "service.requests", service.requests, "requests")
    add(P + "service.points", len(m.tokens), "count")
    for i, (tok, sec) in enumerate(zip(m.tokens, m.seconds), start=1):
        add(P + f"service.p{i}.tokens", float(tok), "tokens", note="median computed prompt tokens of a quantile bin")
        add(P + f"service.p{i}.seconds", float(sec), "s", note="median time to first token of the bin, queueing included")
    add(P + "service.decode_rate", service.decode_tokens_per_s, "count", note="generated tokens per second after the first")
    if np.isfinite(service.turn_growth_tokens):
        add(P + "capture.turn_growth_median", service.turn_growth_tokens, "tokens",
            note="median growth of a session's prompt from one answered turn to the next")
        add(P + "capture.turn_growth_min", service.turn_growth_range[0], "tokens", note="the smallest such growth")
        add(P + "capture.turn_growth_max", service.turn_growth_range[1], "tokens", note="the largest such growth")
    writer.reading(*inputs)
    p, f, t = record["params"], record["fit"], record["targets"]
    for k, unit in (("first_prompt_median", "tokens"), ("first_prompt_sigma", "count"), ("growth_median", "tokens"),
                    ("growth_sigma", "count"), ("turns_mean", "count"), ("think_sigma", "count"), ("system_tokens", "tokens")):
        add(P + f"model.{k}", p[k], unit)
    add(P + "model.think_median", p["think_median_s"], "s")
    add(P + "model.decode_rate", p["decode_tokens_per_s"], "count", note="measured: the service model's")
    add(P + "model.reusable_share", record["reusable"], "fraction")
    add(P + "model.reusable_fitted", int(bool(record["reusable_fitted"])), "count")
    tried = pd.DataFrame(record["tried"])
    add(P + "fit.reusable_tried", len(tried), "count")
    add(P + "fit.reusable_low", float(tried.reusable.min()), "fraction")
    add(P + "fit.reusable_high", float(tried.reusable.max()), "fraction")
    add(P + "fit.tried_share_pool_min", float(tried.share_pool.min()), "fraction", note="pool share at the capture's sizes, over the reusable shares tried")
    add(P + "fit.tried_share_pool_max", float(tried.share_pool.max()), "fraction")
    add(P + "model.requests", len(w.requests), "requests")
    add(P + "model.block_tokens", record["block_tokens"], "tokens")
    add(P + "model.gpu_tokens", record["gpu_tokens"], "tokens")
    add(P + "model.pool_blocks", record["pool_blocks"], "blocks")
    # the prompt aggregates (fit_report, a fresh draw) and the calibration's GPU share without the pool
    add(P + "fit.mean_prompt", f["mean_prompt"], "tokens")
    add(P + "target.mean_prompt", t["mean_prompt"], "tokens")
    add(P + "fit.share_above_low", f["share_above_200k"], "fraction")
    add(P + "target.share_above_low", t["share_above_200k"], "fraction")
    add(P + "fit.share_above_high", f["share_above_500k"], "fraction")
    add(P + "target.share_above_high", t["share_above_500k"], "fraction")
    add(P + "target.low_edge", t["low_edge"], "tokens")
    add(P + "target.high_edge", t["high_edge"], "tokens")
    add(P + "fit.reusable_share_reached", f["reusable_share"], "fraction", note="an unbounded cache's share on a fresh draw")
    add(P + "fit.gpu_share_no_pool", f["gpu_share"], "fraction", note="the think-time calibration's replay, no pool")
    # residuals at the calibration point (the replay at the capture's GPU and pool sizes)
    targets = {"gpu": t["gpu_share"], "pool": t["pool_share"], "computed": 1.0 - t["gpu_share"] - t["pool_share"]}
    for s in SOURCES:
        add(P + f"fit.share_{s}", f[f"op_share_{s}"], "fraction")
        add(P + f"target.share_{s}", targets[s], "fraction")
        add(P + f"fit.residual_points_{s}", 100 * (f[f"op_share_{s}"] - targets[s]), "count",
            note="model less capture at the calibration point, percentage points")
    add(P + "fit.worst_residual_points", 100 * max(abs(f[f"op_share_{s}"] - targets[s]) for s in SOURCES), "count")
    add(P + "fit.restores_per_traffic_hour", f["op_restores_per_traffic_hour"], "count")
    add(P + "target.restores_per_traffic_hour", t["restores_per_hour"], "count")
    add(P + "fit.restores_ratio", f["op_restores_per_traffic_hour"] / t["restores_per_hour"], "x",
        note="the model's restores per hour with traffic over the capture's")
    per_req = replay(w, Config(record["gpu_tokens"], record["pool_blocks"], "write_through"))
    add(P + "model.peak_in_service", peak_in_service(w.times, per_req["computed"].to_numpy(), w.output_tokens, m,
                                                     p["decode_tokens_per_s"]), "requests")
    add(P + "target.max_running", t["max_running"], "requests")
    # per run, in the sweep's order (smallest pool first, as sweepcpu.run.<i>)
    runs = list(dict.fromkeys(table.run))
    worst = worst_other = 0.0
    calibration_run = None
    for i, run in enumerate(runs):
        g = table[table.run == run].set_index("source")
        q = P + f"run.{i}."
        add(q + "pool_blocks", int(g.pool_blocks.iloc[0]), "blocks")
        add(q + "calibration_point", int(bool(g.calibration_point.iloc[0])), "count")
        for s in SOURCES:
            add(q + f"share_{s}", float(g.loc[s, "model"]), "fraction")
            add(q + f"error_points_{s}", float(g.loc[s, "error_points"]), "count",
                note="calibrated model less measured share, percentage points")
        run_worst = float(g.error_points.abs().max())
        add(q + "worst_points", run_worst, "count")
        add(q + "restores_per_traffic_hour", float(g.model_restores_per_traffic_hour.iloc[0]), "count")
        worst = max(worst, run_worst)
        if g.calibration_point.iloc[0]:
            calibration_run = i
        else:
            worst_other = max(worst_other, run_worst)
    add(P + "calibration_run", calibration_run, "count")
    add(P + "worst_points", worst, "count", note="largest gap of any share, any run, percentage points")
    add(P + "worst_points_predicted", worst_other, "count", note="the same over the runs other than the calibration point")
    gpu = table[table.source == "gpu"].model
    add(P + "share_gpu_min", float(gpu.min()), "fraction", note="the model's share from the KV cache, over the runs")
    add(P + "share_gpu_max", float(gpu.max()), "fraction")
    pool_err = table[(table.source == "pool") & ~table.calibration_point].error_points.abs()
    add(P + "worst_pool_points_predicted", float(pool_err.max()) if len(pool_err) else 0.0, "count")
