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
from ..numbers import Number, load_registry, traced_adder
from ..production.sweep import SOURCES, RunResult, read_client_log, shares
from ..records.replayrun import ReplayRun
from ..records.touch import Touching, TouchingDict, carry, rows_of, scope, touching_rows
from ..workloads import Workload
from ..workloads.synthetic import peak_in_service
from .fit import fit_workload, targets_from_registry
from .replay import Config, replay, summarise
from .run import hour_weights as read_hour_weights

# client.jsonl fields the service model reads beyond those every sweep reads
SERVICE_FIELDS: dict[str, tuple[type, ...]] = {"first_chunk_s": (int, float), "completion_tokens": (int,)}


@dataclass(frozen=True)
class ServiceModel(Touching):  # carries the client log it was measured from (records.touch)
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


def service_model(client_log: "str | Path | ReplayRun", bins: int, above_last: str = "extend_last_segment") -> ServiceModel:
    """The service model of one capture (see ServiceModel), from its client log (a path, or a
    replay run's record). Errors name the file and the line."""
    with scope() as seen:
        model = _service_model(client_log, bins, above_last)
    return carry(model, *seen)


def _service_model(client_log: "str | Path | ReplayRun", bins: int, above_last: str) -> ServiceModel:
    if isinstance(client_log, ReplayRun):
        path, r = client_log.file("client.jsonl"), client_log.answered(SERVICE_FIELDS)
    else:
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


def registry(path: str | Path) -> dict[str, Number]:
    """The production numbers (a numbers file), each touching that file when read (records.touch)."""
    reg = load_registry([path])
    return TouchingDict(reg, default=[Path(path).as_posix()])


def predict(reg: dict[str, Number], results: list[RunResult], service: ServiceModel, hour_weights: "np.ndarray | str | Path",
            think_median_s: float, think_sigma: float, reusable: float | list[float], seed: int,
            prefix: str = "prodcpu") -> tuple[Workload, dict[str, Any], pd.DataFrame]:
    """Fit the workload to the capture's aggregates (`prefix`.*), then replay it (write-through) at
    every sweep run's pool size. Returns the workload, the fit's record (fit_workload's, its items
    touching the files the fit read) and one row per run and source: the measured share, the
    model's, and the difference in points (each run's rows touching the files they came from).
    `hour_weights`: the weights, or the production analysis's hourly table to read them from."""
    def num(key: str) -> int:
        if f"{prefix}.{key}" not in reg:
            raise KeyError(f"the sweep check needs {prefix}.{key} from the production analysis")
        return int(reg[f"{prefix}.{key}"].value)

    with scope() as sizes:
        block_tokens, gpu_tokens, op_blocks = num("pool.block_tokens"), num("gpu_pool.tokens"), num("pool.blocks")
    with scope() as fitted:
        weights = read_hour_weights(hour_weights) if isinstance(hour_weights, (str, Path)) else hour_weights
        w, record = fit_workload(reg, service.latency, weights, block_tokens, gpu_tokens, think_median_s, think_sigma,
                                 reusable, seed, op_blocks, prefix=prefix, decode_tokens_per_s=service.decode_tokens_per_s)
        per_req = replay(w, Config(gpu_tokens, op_blocks, "write_through"))
        record["model_requests"] = len(w.requests)
        record["peak_in_service"] = peak_in_service(w.times, per_req["computed"].to_numpy(), w.output_tokens, service.latency,
                                                    record["params"]["decode_tokens_per_s"])
    with scope() as targeted:
        targets_from_registry(reg, prefix)
    record.update(block_tokens=block_tokens, gpu_tokens=gpu_tokens, pool_blocks=op_blocks)
    fit_files = frozenset(fitted | sizes)
    rows, row_files = [], {}
    for x in results:
        with scope() as seen:
            blocks = pool_blocks_of(x, block_tokens)
            model = summarise(replay(w, Config(gpu_tokens, blocks, "write_through")), service.latency)
            measured = shares(x.tokens("measured"))
            for s in SOURCES:
                rows.append({"run": x.run.path.as_posix(), "pool_bytes": x.run.pool_bytes, "pool_tokens": x.run.pool_tokens,
                             "pool_blocks": blocks or 0, "calibration_point": blocks == op_blocks, "source": s,
                             "measured": measured[f"share_{s}"], "model": model[f"share_{s}"],
                             "error_points": 100 * (model[f"share_{s}"] - measured[f"share_{s}"]),
                             "model_restores_per_traffic_hour": model["restores_per_traffic_hour"]})
        row_files[x.run.path.as_posix()] = frozenset(seen) | fit_files
    table = touching_rows(pd.DataFrame(rows), "run", row_files)
    if table.calibration_point.sum() != len(SOURCES):
        raise ValueError(f"exactly one sweep run must have the capture's pool ({op_blocks} blocks of {block_tokens} tokens)")
    files = {k: targeted for k in ("targets",)} | {k: sizes for k in ("block_tokens", "gpu_tokens", "pool_blocks")}
    return w, TouchingDict(record, files, default=fit_files), table


def register(writer: Any, record: dict[str, Any], table: pd.DataFrame, service: ServiceModel, w: Workload) -> None:
    """sweepcpu.cal.*: the service model, the fitted parameters, the fit's residuals at the
    calibration point, and per sweep run (sweepcpu.cal.run.<i>, as sweepcpu.run.<i>) the model's
    shares and their differences from the measured ones, in percentage points. Each number names
    the files its computation read (records.touch: the service model its client log, the fit's
    record what the fit read, each run's rows that run's records and the fit's)."""
    P = "sweepcpu.cal."
    add = traced_adder(writer)
    m = lambda: service.latency  # noqa: E731 (read in each number's computation, so it names the client log)
    add(P + "service.requests", lambda: service.requests, "requests")
    add(P + "service.points", lambda: len(m().tokens), "count")
    for i in range(1, len(service.latency.tokens) + 1):
        add(P + f"service.p{i}.tokens", lambda: float(m().tokens[i - 1]), "tokens", note="median computed prompt tokens of a quantile bin")
        add(P + f"service.p{i}.seconds", lambda: float(m().seconds[i - 1]), "s",
            note="median time to first token of the bin, queueing included")
    add(P + "service.decode_rate", lambda: service.decode_tokens_per_s, "count", note="generated tokens per second after the first")
    if np.isfinite(service.turn_growth_tokens):
        add(P + "capture.turn_growth_median", lambda: service.turn_growth_tokens, "tokens",
            note="median growth of a session's prompt from one answered turn to the next")
        add(P + "capture.turn_growth_min", lambda: service.turn_growth_range[0], "tokens", note="the smallest such growth")
        add(P + "capture.turn_growth_max", lambda: service.turn_growth_range[1], "tokens", note="the largest such growth")
    _register_fit(add, record)
    _register_runs(add, table)


def _register_fit(add: Any, record: dict[str, Any]) -> None:
    P = "sweepcpu.cal."
    p, f, t = (lambda: record["params"]), (lambda: record["fit"]), (lambda: record["targets"])
    for k, unit in (("first_prompt_median", "tokens"), ("first_prompt_sigma", "count"), ("growth_median", "tokens"),
                    ("growth_sigma", "count"), ("turns_mean", "count"), ("think_sigma", "count"), ("system_tokens", "tokens")):
        add(P + f"model.{k}", lambda: p()[k], unit)
    add(P + "model.think_median", lambda: p()["think_median_s"], "s")
    add(P + "model.decode_rate", lambda: p()["decode_tokens_per_s"], "count", note="measured: the service model's")
    add(P + "model.reusable_share", lambda: record["reusable"], "fraction")
    add(P + "model.reusable_fitted", lambda: int(bool(dict.__getitem__(record, "reusable_fitted"))), "count", settings=True)
    tried = lambda: pd.DataFrame(record["tried"])  # noqa: E731
    add(P + "fit.reusable_tried", lambda: len(tried()), "count")
    add(P + "fit.reusable_low", lambda: float(tried().reusable.min()), "fraction")
    add(P + "fit.reusable_high", lambda: float(tried().reusable.max()), "fraction")
    add(P + "fit.tried_share_pool_min", lambda: float(tried().share_pool.min()), "fraction",
        note="pool share at the capture's sizes, over the reusable shares tried")
    add(P + "fit.tried_share_pool_max", lambda: float(tried().share_pool.max()), "fraction")
    add(P + "model.requests", lambda: record["model_requests"], "requests")
    add(P + "model.block_tokens", lambda: record["block_tokens"], "tokens")
    add(P + "model.gpu_tokens", lambda: record["gpu_tokens"], "tokens")
    add(P + "model.pool_blocks", lambda: record["pool_blocks"], "blocks")
    # the prompt aggregates (fit_report, a fresh draw) and the calibration's GPU share without the pool
    add(P + "fit.mean_prompt", lambda: f()["mean_prompt"], "tokens")
    add(P + "target.mean_prompt", lambda: t()["mean_prompt"], "tokens")
    add(P + "fit.share_above_low", lambda: f()["share_above_200k"], "fraction")
    add(P + "target.share_above_low", lambda: t()["share_above_200k"], "fraction")
    add(P + "fit.share_above_high", lambda: f()["share_above_500k"], "fraction")
    add(P + "target.share_above_high", lambda: t()["share_above_500k"], "fraction")
    add(P + "target.low_edge", lambda: t()["low_edge"], "tokens")
    add(P + "target.high_edge", lambda: t()["high_edge"], "tokens")
    add(P + "fit.reusable_share_reached", lambda: f()["reusable_share"], "fraction", note="an unbounded cache's share on a fresh draw")
    add(P + "fit.gpu_share_no_pool", lambda: f()["gpu_share"], "fraction", note="the think-time calibration's replay, no pool")
    # residuals at the calibration point (the replay at the capture's GPU and pool sizes)
    targets = lambda: {"gpu": t()["gpu_share"], "pool": t()["pool_share"],  # noqa: E731
                       "computed": 1.0 - t()["gpu_share"] - t()["pool_share"]}
    for s in SOURCES:
        add(P + f"fit.share_{s}", lambda: f()[f"op_share_{s}"], "fraction")
        add(P + f"target.share_{s}", lambda: targets()[s], "fraction")
        add(P + f"fit.residual_points_{s}", lambda: 100 * (f()[f"op_share_{s}"] - targets()[s]), "count",
            note="model less capture at the calibration point, percentage points")
    add(P + "fit.worst_residual_points", lambda: 100 * max(abs(f()[f"op_share_{s}"] - targets()[s]) for s in SOURCES), "count")
    add(P + "fit.restores_per_traffic_hour", lambda: f()["op_restores_per_traffic_hour"], "count")
    add(P + "target.restores_per_traffic_hour", lambda: t()["restores_per_hour"], "count")
    add(P + "fit.restores_ratio", lambda: f()["op_restores_per_traffic_hour"] / t()["restores_per_hour"], "x",
        note="the model's restores per hour with traffic over the capture's")
    add(P + "model.peak_in_service", lambda: record["peak_in_service"], "requests")
    add(P + "target.max_running", lambda: t()["max_running"], "requests")


def _register_runs(add: Any, table: pd.DataFrame) -> None:
    """Per run, in the sweep's order (smallest pool first, as sweepcpu.run.<i>), and over the runs."""
    P = "sweepcpu.cal."
    runs = list(dict.fromkeys(table.run))
    for i, run in enumerate(runs):
        g = lambda: rows_of(table, run).set_index("source")  # noqa: E731
        q = P + f"run.{i}."
        add(q + "pool_blocks", lambda: int(g().pool_blocks.iloc[0]), "blocks")
        add(q + "calibration_point", lambda: int(bool(g().calibration_point.iloc[0])), "count")
        for s in SOURCES:
            add(q + f"share_{s}", lambda: float(g().loc[s, "model"]), "fraction")
            add(q + f"error_points_{s}", lambda: float(g().loc[s, "error_points"]), "count",
                note="calibrated model less measured share, percentage points")
        add(q + "worst_points", lambda: float(g().error_points.abs().max()), "count")
        add(q + "restores_per_traffic_hour", lambda: float(g().model_restores_per_traffic_hour.iloc[0]), "count")
    worst = lambda calibration: max((float(rows_of(table, r).error_points.abs().max()) for r in runs  # noqa: E731
                                     if calibration or not bool(rows_of(table, r).calibration_point.iloc[0])), default=0.0)
    add(P + "calibration_run", lambda: next(i for i, r in enumerate(runs) if bool(rows_of(table, r).calibration_point.iloc[0])),
        "count")
    add(P + "worst_points", lambda: worst(True), "count", note="largest gap of any share, any run, percentage points")
    add(P + "worst_points_predicted", lambda: worst(False), "count", note="the same over the runs other than the calibration point")
    gpu = lambda: rows_of(table)[table.source == "gpu"].model  # noqa: E731
    add(P + "share_gpu_min", lambda: float(gpu().min()), "fraction", note="the model's share from the KV cache, over the runs")
    add(P + "share_gpu_max", lambda: float(gpu().max()), "fraction")

    def pool_err() -> pd.Series:
        t = rows_of(table)
        return t[(t.source == "pool") & ~t.calibration_point].error_points.abs()

    add(P + "worst_pool_points_predicted", lambda: float(pool_err().max()) if len(pool_err()) else 0.0, "count")
