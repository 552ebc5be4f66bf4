"""The measured pool-size curve: one fixed stream at several pool sizes, each size launched repeatedly.

Every run is a kvtier replay --fixed-order launch (kvtier.replay.repeats): the same requests, in
the same order, at every size and on every repeat, which its run.yaml attests by the sent stream's
sha256 (stream.digest). Runs whose digests differ sent different requests, so comparing them would
mix the effect of the stream into that of the pool: the analysis refuses them, naming both.

Per run it reads what the sweep reads (kvtier.production.sweep.read_run: counters, client log,
the stream in the server's blocks) and the host's load over the run (host_series.csv). A run whose
mean 1-minute load or mean CPU steal is above the configured threshold is flagged and kept out of
the medians (it is still listed). Per pool size: the median and range of the pool's share of
prompt tokens and of the KV cache's misses over the kept runs, the simulator's replay of the same
stream at that size (sweep.predict, each run's own records), and the gap between the two.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..replay.monitor import HOST_SERIES, METRICS_SERIES
from . import benchjson, sweep

GIB = 2**30
SHARES = ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses")
RUN_FILES = (*sweep.RUN_FILES, "host.yaml", HOST_SERIES, METRICS_SERIES)


@dataclass(frozen=True)
class Load:
    load1_mean: float
    load1_max: float
    steal_mean: float
    samples: int


@dataclass(frozen=True)
class CurveRun:
    result: sweep.RunResult
    digest: str
    load: Load
    flagged: bool
    bench: dict[str, Any]

    @property
    def path(self) -> Path:
        return self.result.run.path

    def shares(self, model: str) -> dict[str, float]:
        return sweep.shares(self.result.tokens(model))


def run_folders(manifest: str | Path, records: str | Path) -> list[str]:
    """The curve's run folders: each folder directly under `records` that holds pinned files
    (a launch that failed, `<name>.failed`, is never pinned)."""
    from ..eviction.workflow import pinned_records

    root = Path(records)
    return sorted({(root / Path(p).relative_to(root).parts[0]).as_posix()
                   for p in pinned_records(str(manifest), str(records)) if len(Path(p).relative_to(root).parts) > 1})


def read_load(path: str | Path) -> Load:
    """host_series.csv: the load over the run (the first sample's CPU shares cover no interval)."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        raise RawRecordError(path, f"{len(rows)} load samples: a run's series needs at least two")
    try:
        load = [float(r["load1"]) for r in rows]
        steal = [float(r["steal_share"]) for r in rows[1:]]
    except (KeyError, TypeError, ValueError) as e:
        raise RawRecordError(path, f"not a load series ({e})") from None
    return Load(float(np.mean(load)), max(load), float(np.mean(steal)), len(rows))


def digest_of(run: sweep.SweepRun) -> str:
    stream = run.meta.get("stream") or {}
    if stream.get("mode") != "fixed-order" or not isinstance(stream.get("digest"), str):
        raise RawRecordError(run.path / "run.yaml", "no fixed-stream digest (stream.digest): not a kvtier replay --fixed-order run, "
                                                    "whose requests would depend on how fast the server answered")
    return str(stream["digest"])


def analyse(run_dirs: Iterable[str | Path], load_threshold: float, steal_threshold: float) -> list[CurveRun]:
    """Every run, read and replayed; all must have sent the same stream to the same KV cache."""
    runs: list[CurveRun] = []
    for d in run_dirs:
        run = sweep.read_run(d)
        table, admission = sweep.predict(run, sweep.stream(run))
        load = read_load(Path(d) / HOST_SERIES)
        flagged = load.load1_mean > load_threshold or load.steal_mean > steal_threshold
        runs.append(CurveRun(sweep.RunResult(run, table, admission), digest_of(run), load, flagged, benchjson.result(d)))
    if not runs:
        raise ValueError("curve: no runs")
    base = runs[0]
    for x in runs[1:]:
        if x.digest != base.digest:
            raise RawRecordError(x.path / "run.yaml", f"sent stream {x.digest[:16]}..., but {base.path} sent {base.digest[:16]}...: "
                                                      "the runs did not send the same requests, so their shares cannot be compared")
        if x.result.run.kv_cache_tokens != base.result.run.kv_cache_tokens:
            raise RawRecordError(x.path / "run.yaml", f"KV cache of {x.result.run.kv_cache_tokens} tokens, {base.path} has "
                                                      f"{base.result.run.kv_cache_tokens}: not one curve")
    runs.sort(key=lambda x: (x.result.run.pool_tokens, x.path.as_posix()))
    return runs


def sizes(runs: list[CurveRun]) -> list[list[CurveRun]]:
    """The runs grouped by pool size (tokens the pool holds), smallest first."""
    out: dict[int, list[CurveRun]] = {}
    for x in runs:
        out.setdefault(x.result.run.pool_tokens, []).append(x)
    return [out[k] for k in sorted(out)]


def tidy(runs: list[CurveRun]) -> pd.DataFrame:
    """One row per run: its size, load, flag, measured and simulated shares, latency percentiles."""
    rows = []
    for i, group in enumerate(sizes(runs)):
        for x in group:
            r = x.result.run
            row: dict[str, Any] = {"size": i, "run": x.path.as_posix(), "pool_bytes": r.pool_bytes, "pool_tokens": r.pool_tokens,
                                   "kv_cache_tokens": r.kv_cache_tokens, "requests": len(x.result.table),
                                   "failed": x.bench["failed"], "load1_mean": x.load.load1_mean, "load1_max": x.load.load1_max,
                                   "steal_mean": x.load.steal_mean, "flagged": x.flagged,
                                   "agree": int(x.result.table.agrees.sum())}
            for model in ("measured", "simulated"):
                for k, v in x.shares(model).items():
                    row[f"{model}_{k}"] = v
            for m in ("ttft", "tpot", "itl"):
                for p in benchjson.PERCENTILES:
                    row[f"p{p}_{m}_ms"] = x.bench[f"p{p}_{m}_ms"]
            rows.append(row)
    return pd.DataFrame(rows)


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": min(values), "max": max(values)}


def register_numbers(writer: Any, runs: list[CurveRun], load_threshold: float, steal_threshold: float) -> None:
    """curve.*: the stream and the thresholds; per size (curve.size.<i>, smallest pool first) the
    median and range of each share over the kept runs, the simulator's, the gap in points, and
    the latency percentiles; per run (curve.size.<i>.run.<j>) its load, flag and shares."""
    files = [x.path / f for x in runs for f in RUN_FILES]
    base = runs[0].result.run
    writer.reading(*files)
    writer.add("curve.runs", len(runs), "count")
    groups = sizes(runs)
    writer.add("curve.sizes", len(groups), "count")
    writer.add("curve.sizes_with_pool", sum(1 for g in groups if g[0].result.run.tiered), "count")
    writer.add("curve.repeats_min", min(len(g) for g in groups), "count")
    writer.add("curve.repeats_max", max(len(g) for g in groups), "count")
    writer.add("curve.requests", len(runs[0].result.table), "requests")
    writer.add("curve.requests_all_equal", int(len({len(x.result.table) for x in runs}) == 1), "count")
    writer.add("curve.failed", int(sum(x.bench["failed"] for x in runs)), "requests")
    writer.add("curve.kv_cache_tokens", base.kv_cache_tokens, "tokens")
    writer.add("curve.block_tokens", int(base.shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    chunked = [x.result.run for x in runs if x.result.run.tiered]
    if chunked:
        writer.add("curve.chunk_tokens", int(chunked[0].shape["chunk_blocks"]) * int(chunked[0].shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    sc, st = base.meta["scaling"], base.meta["stream"]
    writer.add("curve.sessions", int(base.meta.get("sessions") or len(base.meta.get("session_ids") or [])), "count")
    writer.add("curve.scale", float(sc["scale"]), "x")
    writer.add("curve.in_flight", int(st["in_flight"]), "requests")
    writer.add("curve.prompt_tokens", float(base.measured["prompt"]), "tokens")
    writer.add("curve.flagged", sum(1 for x in runs if x.flagged), "count")
    writer.add("curve.kept", sum(1 for x in runs if not x.flagged), "count")
    writer.add("curve.load1_min", min(x.load.load1_mean for x in runs), "count", note="mean 1-minute load over a run, lowest run")
    writer.add("curve.load1_max", max(x.load.load1_mean for x in runs), "count", note="mean 1-minute load over a run, highest run")
    writer.add("curve.steal_max", max(x.load.steal_mean for x in runs), "fraction")
    writer.add("curve.exact", int(sum(int(x.result.table.agrees.sum()) for x in runs)), "requests")
    writer.add("curve.requests_all", int(sum(len(x.result.table) for x in runs)), "requests")
    writer.reading()
    writer.add("curve.load_threshold", float(load_threshold), "count", note="mean 1-minute load above which a run is flagged")
    writer.add("curve.steal_threshold", float(steal_threshold), "fraction", note="mean CPU steal above which a run is flagged")
    for name, q in zip(("low", "mid", "high"), benchjson.PERCENTILES):
        writer.add(f"curve.percentile.{name}", q, "count", note="a latency percentile the results JSON and Table 8 report")
    writer.reading(*files)
    worst_spread = worst_gap = 0.0
    monotone = True
    last_pool = -1.0
    for i, group in enumerate(groups):
        p = f"curve.size.{i}."
        r = group[0].result.run
        writer.reading(*[x.path / f for x in group for f in RUN_FILES])
        writer.add(p + "pool_bytes", r.pool_bytes, "B")
        writer.add(p + "pool_tokens", r.pool_tokens, "tokens")
        writer.add(p + "pool_chunks", int(r.shape["cpu_chunks"] or 0), "count")
        writer.add(p + "pool_over_cache", r.pool_tokens / r.kv_cache_tokens, "x")
        writer.add(p + "runs", len(group), "count")
        kept = [x for x in group if not x.flagged] or group  # all flagged: the medians are of all, and say so
        writer.add(p + "kept", sum(1 for x in group if not x.flagged), "count")
        for k in SHARES:
            meas = [x.shares("measured")[k] for x in kept]
            sim = [x.shares("simulated")[k] for x in kept]
            if any(math.isnan(v) for v in meas + sim):
                continue
            for stat, v in _stats(meas).items():
                writer.add(p + f"measured.{k}.{stat}", v, "fraction")
            writer.add(p + f"measured.{k}.spread_points", 100 * (max(meas) - min(meas)), "count",
                       note="largest less smallest over the kept runs, percentage points")
            writer.add(p + f"simulated.{k}.median", float(np.median(sim)), "fraction")
            gap = 100 * (float(np.median(sim)) - float(np.median(meas)))
            writer.add(p + f"simulated.{k}.error_points", gap, "count", note="simulated median less measured median, points")
            per_run = max(abs(a - b) for a, b in zip(sim, meas)) * 100
            writer.add(p + f"simulated.{k}.worst_run_points", per_run, "count")
            if k in ("share_pool", "pool_share_of_misses"):
                worst_spread = max(worst_spread, 100 * (max(meas) - min(meas)))
            if k in ("share_gpu", "share_pool", "share_computed"):
                worst_gap = max(worst_gap, per_run)
        pool_med = float(np.median([x.shares("measured")["share_pool"] for x in kept]))
        monotone &= pool_med >= last_pool - 1e-12
        last_pool = pool_med
        writer.add(p + "exact", int(sum(int(x.result.table.agrees.sum()) for x in group)), "requests")
        writer.add(p + "requests", int(sum(len(x.result.table) for x in group)), "requests")
        for m in ("ttft", "tpot", "itl"):
            for q in benchjson.PERCENTILES:
                vals = [float(x.bench[f"p{q}_{m}_ms"]) for x in kept]
                for stat, v in _stats(vals).items():
                    writer.add(p + f"p{q}_{m}_ms.{stat}", v, "ms")
        for j, x in enumerate(group):
            q = p + f"run.{j}."
            writer.reading(*[x.path / f for f in RUN_FILES])
            writer.add(q + "flagged", int(x.flagged), "count")
            writer.add(q + "load1_mean", x.load.load1_mean, "count")
            writer.add(q + "load1_max", x.load.load1_max, "count")
            writer.add(q + "steal_mean", x.load.steal_mean, "fraction")
            for k in ("share_pool", "pool_share_of_misses"):
                v = x.shares("measured")[k]
                if not math.isnan(v):
                    writer.add(q + f"measured.{k}", v, "fraction")
            for m in ("ttft", "tpot", "itl"):
                for pq in benchjson.PERCENTILES:
                    writer.add(q + f"p{pq}_{m}_ms", float(x.bench[f"p{pq}_{m}_ms"]), "ms")
    writer.reading(*files)
    diffs = [100 * abs(x.shares("measured")[k] - float(np.median([y.shares("measured")[k] for y in g if not y.flagged])))
             for g in groups if any(not y.flagged for y in g) for x in g if x.flagged
             for k in ("share_gpu", "share_pool", "share_computed")]
    if diffs:
        writer.add("curve.flagged_max_diff_points", max(diffs), "count",
                   note="largest gap between a flagged run's share and its size's median over the kept runs, points")
    writer.add("curve.worst_spread_points", worst_spread, "count", note="largest same-size spread of the pool's two shares, points")
    writer.add("curve.worst_error_points", worst_gap, "count", note="largest gap, simulated less measured, any run and source, points")
    writer.add("curve.pool_share_monotone", int(monotone), "count", note="1: the median pool share never falls as the pool grows")


def _style() -> dict[str, dict]:
    from ..render.svg import OKABE_ITO

    return {"measured": dict(color=OKABE_ITO["black"], marker="o", linestyle="none", capsize=3,
                             label="measured: median, range of the kept runs"),
            "simulated": dict(color=OKABE_ITO["vermillion"], marker="x", linestyle="none", markersize=7,
                              label="simulator, the same stream")}


def figure(t: pd.DataFrame, out: str | Path) -> None:
    """(a) the pool's share of prompt tokens, (b) its share of the KV cache's misses, against pool
    size / KV cache size: the measured median with its range (kept runs), the simulator beside it.
    Stacked panels in the shared figure style (kvtier.render.svg), markers only: each size is
    measured on its own."""
    from ..render.svg import WIDTH, panels, save_svg

    style = _style()
    k = t[~t.flagged] if (~t.flagged).any() else t
    k = k.assign(ratio=k.pool_tokens / k.kv_cache_tokens)
    fig, axes = panels(2, 2.1, sharex=True)
    fig.set_size_inches(WIDTH, 2.1 * 2 + 1.0)
    for ax, share, title in zip(axes, ("share_pool", "pool_share_of_misses"),
                                ("(a) prompt tokens from the pool (%)", "(b) KV-cache misses the pool served (%)")):
        g = k.groupby("ratio")
        med = 100 * g[f"measured_{share}"].median()
        lo, hi = 100 * g[f"measured_{share}"].min(), 100 * g[f"measured_{share}"].max()
        ax.errorbar(med.index, med.values, yerr=[med.values - lo.values, hi.values - med.values], **style["measured"])
        sim = 100 * g[f"simulated_{share}"].median()
        ax.plot(sim.index, sim.values, **style["simulated"])
        ax.set_title(title, loc="left")
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[1].set_xlabel("pool size / KV cache size")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower left", ncol=1, handletextpad=0.4, borderaxespad=0.2)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    save_svg(fig, out, "curve_cpu")


@dataclass(frozen=True)
class Timing:
    """How long the curve took, from each launch's own record: host.yaml's observation (server
    start to stop) and run.yaml's wait for /health. A sweep is one round of the interleaved order
    (every size once, by recorded start time, never by folder name); its span runs from its first
    launch's start to its last one's end, waits for the server lock included, and `alone` sums its
    launches' own times (what the round takes on a machine nobody else uses)."""

    launch_s: list[float]
    health_s: list[float]
    sweep_s: list[float]
    sweep_alone_s: list[float]
    experiment_s: float
    experiment_alone_s: float


def timing(runs: list[CurveRun]) -> Timing:
    """The curve's times (see Timing). A round that does not hold every size once is refused."""
    from datetime import datetime

    from ..yamlio import load_yaml

    spans = []
    for x in runs:
        path = x.path / "host.yaml"
        obs = (load_yaml(path.read_text(encoding="utf-8")) or {}).get("observation") or {}
        try:
            start, end = datetime.fromisoformat(str(obs["start"])), datetime.fromisoformat(str(obs["end"]))
        except (KeyError, ValueError) as e:
            raise RawRecordError(path, f"no observation start and end ({e}): the launch's time is unknown") from None
        if end <= start:
            raise RawRecordError(path, f"observation ends ({end}) before it starts ({start})")
        health = x.result.run.meta["server"].get("health_wait_s")
        if not isinstance(health, (int, float)):
            raise RawRecordError(x.path / "run.yaml", f"server.health_wait_s is {health!r}: no start-up time")
        spans.append((start, end, x.result.run.pool_tokens, float(health)))
    spans.sort(key=lambda s: s[0])
    n = len({s[2] for s in spans})
    rounds = [spans[i:i + n] for i in range(0, len(spans), n)]
    for r in rounds:
        if sorted(s[2] for s in r) != sorted({s[2] for s in spans}):
            raise RawRecordError(runs[0].path.parent, "the launches in start order are not rounds of every size once: "
                                                      "not an interleaved curve, so no sweep time")
    own = [(e - s).total_seconds() for s, e, _, _ in spans]
    return Timing(own, [s[3] for s in spans], [(r[-1][1] - r[0][0]).total_seconds() for r in rounds],
                  [sum((e - s).total_seconds() for s, e, _, _ in r) for r in rounds],
                  (spans[-1][1] - spans[0][0]).total_seconds(), float(sum(own)))


def register_timing(writer: Any, runs: list[CurveRun]) -> None:
    """curve.time.*: each launch, its wait for /health, each sweep (round) and the whole experiment."""
    t = timing(runs)
    writer.reading(*[x.path / f for x in runs for f in ("host.yaml", "run.yaml")])
    for name, values in (("launch", t.launch_s), ("health", t.health_s), ("sweep", t.sweep_s), ("sweep_alone", t.sweep_alone_s)):
        for stat, v in _stats(values).items():
            writer.add(f"curve.time.{name}.{stat}", float(v), "s")
    writer.add("curve.time.sweeps", len(t.sweep_s), "count")
    writer.add("curve.time.experiment", t.experiment_s, "s", note="first launch's start to last launch's end")
    writer.add("curve.time.experiment_alone", t.experiment_alone_s, "s", note="the launches' own times, summed")
