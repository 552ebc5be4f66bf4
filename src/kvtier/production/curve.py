"""The measured pool-size curve: one fixed stream at several pool sizes, each size launched repeatedly.

Every run is a kvtier replay --fixed-order launch (kvtier.replay.repeats): the same requests, in
the same order, at every size and on every repeat, which its run.yaml attests by the sent stream's
sha256 (stream.digest). Runs whose digests differ sent different requests, so comparing them would
mix the effect of the stream into that of the pool: the analysis refuses them, naming both.

Per run it reads what the sweep reads (kvtier.production.sweep.read_run: counters, client log,
the stream in the server's blocks) and the host's load over the run (host_series.csv). A run the
one load rule flags (kvtier.loadrule: median 1-minute load over its samples above
`load_rule.max_load_per_cpu` times host.yaml's CPUs), or whose mean CPU steal is above
`curve.steal_threshold`, is flagged and kept out of the medians (it is still listed). Per pool size: the median and range of the pool's share of
prompt tokens and of the KV cache's misses over the kept runs, the simulator's replay of the same
stream at that size (sweep.predict, each run's own records), and the gap between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

import numpy as np
import pandas as pd

from .. import loadrule
from ..errors import RawRecordError
from ..numbers import traced_adder
from ..records.replayrun import FieldTouching, HOST_SERIES, HOST_YAML, METRICS_SERIES, RUN_YAML, Load, read_load  # noqa: F401
from ..records import identity
from ..records.touch import quiet, scope, touch
from . import benchjson, sweep

GIB = 2**30
SHARES = ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses")
RUN_FILES = (*sweep.RUN_FILES, HOST_YAML, HOST_SERIES, METRICS_SERIES)


@dataclass(frozen=True)
class CurveRun(FieldTouching):
    """A run of the curve: its replays (sweep.RunResult), the stream's digest (run.yaml), the
    host's load (host_series.csv) and whether it is flagged by it, and its bench-shaped result
    (benchjson: each field touches the file it came from)."""

    FILES: ClassVar[dict[str, tuple[str, ...]]] = {"digest": (RUN_YAML,), "flagged": (HOST_SERIES, HOST_YAML)}
    result: sweep.RunResult
    digest: str
    load: Load
    flagged: bool
    bench: dict[str, Any]

    def _folder(self) -> Path:
        return object.__getattribute__(self, "result").run.path

    @property
    def path(self) -> Path:
        return self.result.run.path

    def shares(self, model: str) -> dict[str, float]:
        return sweep.shares(self.result.tokens(model))


def run_folders(manifest: str | Path, records: str | Path) -> list[str]:
    """The curve's run folders: each folder directly under `records` that holds pinned files
    (a launch that failed, `<name>.failed`, is never read, whatever the manifest says: records.access)."""
    from ..eviction.workflow import pinned_records

    root = Path(records)
    return sorted({(root / Path(p).relative_to(root).parts[0]).as_posix()
                   for p in pinned_records(str(manifest), str(records)) if len(Path(p).relative_to(root).parts) > 1})


def _identity(folder: Path) -> identity.Identity:
    """A curve run's identity (records.identity): run.yaml's server and stream, host.yaml's start."""
    import yaml

    from ..yamlio import load_yaml

    def read(path: Path) -> dict[str, Any]:
        try:
            data = load_yaml(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RawRecordError(path, "missing: every run folder needs it") from None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise RawRecordError(path, f"not readable YAML ({e})") from None
        return data if isinstance(data, dict) else {}

    host = read(folder / HOST_YAML) if (folder / HOST_YAML).is_file() else {}
    start = (host.get("observation") or {}).get("start")
    return identity.curve(folder, read(folder / RUN_YAML), str(start) if start else None)


def digest_of(run: sweep.SweepRun) -> str:
    stream = run.meta.get("stream") or {}
    if stream.get("mode") != "fixed-order" or not isinstance(stream.get("digest"), str):
        raise RawRecordError(run.file(RUN_YAML), "no fixed-stream digest (stream.digest): not a kvtier replay --fixed-order run, "
                                                 "whose requests would depend on how fast the server answered")
    return str(stream["digest"])


def analyse(run_dirs: Iterable[str | Path], max_load_per_cpu: float, steal_threshold: float) -> list[CurveRun]:
    """Every run, read and replayed; all must have sent the same stream to the same KV cache."""
    runs: list[CurveRun] = []
    run_dirs = list(run_dirs)
    read = [sweep.read_run(d) for d in run_dirs]  # each by the run contract first: what breaks a folder itself is named so
    with quiet():  # each launch once: its folder is what its records say, and no other folder is it too
        identity.check_unique(_identity(Path(d)) for d in run_dirs)
    for run in read:
        load = run.load()
        if load.cpus is None:
            raise RawRecordError(Path(d) / HOST_YAML, "no host.cpus: the load rule's threshold is per CPU (docs/LOAD-RULE.md)")
        flagged = loadrule.flagged(load.load1_median, max_load_per_cpu, load.cpus) or load.steal_mean > steal_threshold
        runs.append(CurveRun(sweep.replayed(run), digest_of(run), load, flagged, benchjson.result(run)))
    if not runs:
        raise ValueError("curve: no runs")
    base = runs[0]
    for x in runs[1:]:
        if x.digest != base.digest:
            raise RawRecordError(x.path / RUN_YAML, f"sent stream {x.digest[:16]}..., but {base.path} sent {base.digest[:16]}...: "
                                                    "the runs did not send the same requests, so their shares cannot be compared")
        if x.result.run.kv_cache_tokens != base.result.run.kv_cache_tokens:
            raise RawRecordError(x.path / RUN_YAML, f"KV cache of {x.result.run.kv_cache_tokens} tokens, {base.path} has "
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
                                   "failed": x.bench["failed"], "load1_mean": x.load.load1_mean, "load1_median": x.load.load1_median,
                                   "load1_max": x.load.load1_max,
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


def _kept(group: list[CurveRun]) -> list[CurveRun]:
    """The runs of a size kept in its medians: those not flagged (all flagged: all, and the numbers say so)."""
    return [x for x in group if not x.flagged] or group


def register_numbers(writer: Any, runs: list[CurveRun], max_load_per_cpu: float, steal_threshold: float) -> None:
    """curve.*: the stream and the thresholds; per size (curve.size.<i>, smallest pool first) the
    median and range of each share over the kept runs, the simulator's, the gap in points, and
    the latency percentiles; per run (curve.size.<i>.run.<j>) its load, flag and shares. Each
    number names the files its computation read (records.touch)."""
    add = traced_adder(writer)
    base = runs[0].result.run
    groups = sizes(runs)
    add("curve.runs", lambda: len(runs), "count", settings=True)  # the pinned launches (curve.records)
    add("curve.sizes", lambda: len(sizes(runs)), "count")
    add("curve.sizes_with_pool", lambda: sum(1 for g in groups if g[0].result.run.tiered), "count")
    add("curve.repeats_min", lambda: min(len(g) for g in sizes(runs)), "count")
    add("curve.repeats_max", lambda: max(len(g) for g in sizes(runs)), "count")
    add("curve.requests", lambda: len(runs[0].result.run.requests), "requests")
    add("curve.requests_all_equal", lambda: int(len({len(x.result.run.requests) for x in runs}) == 1), "count")
    add("curve.failed", lambda: int(sum(x.bench["failed"] for x in runs)), "requests")
    add("curve.kv_cache_tokens", lambda: base.kv_cache_tokens, "tokens")
    add("curve.block_tokens", lambda: int(base.shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    chunked = [x.result.run for x in runs if x.result.run.tiered]
    if chunked:
        add("curve.chunk_tokens", lambda: int(chunked[0].shape["chunk_blocks"]) * int(chunked[0].shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    add("curve.sessions", lambda: int(base.meta.get("sessions") or len(base.meta.get("session_ids") or [])), "count")
    add("curve.scale", lambda: float(base.meta["scaling"]["scale"]), "x")
    add("curve.in_flight", lambda: int(base.meta["stream"]["in_flight"]), "requests")
    add("curve.prompt_tokens", lambda: float(base.measured["prompt"]), "tokens")
    add("curve.flagged", lambda: sum(1 for x in runs if x.flagged), "count")
    add("curve.kept", lambda: sum(1 for x in runs if not x.flagged), "count")
    add("curve.load1_min", lambda: min(x.load.load1_median for x in runs), "count", note="median 1-minute load over a run, lowest run")
    add("curve.load1_max", lambda: max(x.load.load1_median for x in runs), "count", note="median 1-minute load over a run, highest run")
    add("curve.steal_max", lambda: max(x.load.steal_mean for x in runs), "fraction")
    add("curve.exact", lambda: int(sum(int(x.result.table.agrees.sum()) for x in runs)), "requests")
    add("curve.requests_all", lambda: int(sum(len(x.result.run.requests) for x in runs)), "requests")
    # one request of each size's stream: with one request in flight the launches of a size send and
    # (if the server is deterministic) get the same, so the repeats are copies of these outcomes
    add("curve.requests_distinct", lambda: int(sum(len(g[0].result.run.requests) for g in groups)), "requests",
        note="requests of one launch per size: the distinct outcomes the launches repeat")
    add("curve.max_load_per_cpu", lambda: float(max_load_per_cpu), "x", settings=True,
        note="the load rule: median 1-minute load per CPU above which a run is flagged (docs/LOAD-RULE.md)")
    add("curve.load_threshold", lambda: loadrule.threshold(max_load_per_cpu, max(x.load.cpus or 0 for x in runs)), "count",
        note="the load rule's threshold on this host: max_load_per_cpu x host.yaml's CPUs")
    for i, x in enumerate(x for x in runs if x.flagged):  # each launch kept out, with what put it out
        add(f"curve.flagged_run.{i}.load", lambda: x.load.load1_median, "count")
        add(f"curve.flagged_run.{i}.pool_tokens", lambda: x.result.run.pool_tokens, "tokens")
        add(f"curve.flagged_run.{i}.steal_mean", lambda: x.load.steal_mean, "fraction")
    add("curve.steal_threshold", lambda: float(steal_threshold), "fraction", settings=True,
        note="mean CPU steal above which a run is flagged")
    for name, q in zip(("low", "mid", "high"), benchjson.PERCENTILES):
        add(f"curve.percentile.{name}", lambda: q, "count", settings=True,
            note="a latency percentile the results JSON and Table 8 report")
    for i, group in enumerate(groups):
        p = f"curve.size.{i}."
        r = group[0].result.run
        add(p + "pool_bytes", lambda: r.pool_bytes, "B")
        add(p + "pool_tokens", lambda: r.pool_tokens, "tokens")
        add(p + "pool_chunks", lambda: int(r.shape["cpu_chunks"] or 0), "count")
        add(p + "pool_over_cache", lambda: r.pool_tokens / r.kv_cache_tokens, "x")
        add(p + "runs", lambda: sum(1 for x in runs if x.result.run.pool_tokens == r.pool_tokens), "count")
        add(p + "kept", lambda: sum(1 for x in group if not x.flagged), "count")
        for k in SHARES:
            meas = lambda: [x.shares("measured")[k] for x in _kept(group)]  # noqa: E731
            sim = lambda: [x.shares("simulated")[k] for x in _kept(group)]  # noqa: E731
            if any(math.isnan(v) for v in meas() + sim()):
                continue
            for stat in ("median", "min", "max"):
                add(p + f"measured.{k}.{stat}", lambda: _stats(meas())[stat], "fraction")
            add(p + f"measured.{k}.spread_points", lambda: 100 * (max(meas()) - min(meas())), "count",
                note="largest less smallest over the kept runs, percentage points")
            add(p + f"simulated.{k}.median", lambda: float(np.median(sim())), "fraction")
            add(p + f"simulated.{k}.error_points", lambda: 100 * (float(np.median(sim())) - float(np.median(meas()))), "count",
                note="simulated median less measured median, points")
            add(p + f"simulated.{k}.worst_run_points", lambda: max(abs(a - b) for a, b in zip(sim(), meas())) * 100, "count")
        add(p + "exact", lambda: int(sum(int(x.result.table.agrees.sum()) for x in group)), "requests")
        add(p + "requests", lambda: int(sum(len(x.result.run.requests) for x in group)), "requests")
        for m in ("ttft", "tpot", "itl"):
            for q in benchjson.PERCENTILES:
                for stat in ("median", "min", "max"):
                    add(p + f"p{q}_{m}_ms.{stat}", lambda: _stats([float(x.bench[f"p{q}_{m}_ms"]) for x in _kept(group)])[stat], "ms")
        for j, x in enumerate(group):
            q = p + f"run.{j}."
            add(q + "flagged", lambda: int(x.flagged), "count")
            add(q + "load1_mean", lambda: x.load.load1_mean, "count")
            add(q + "load1_median", lambda: x.load.load1_median, "count")
            add(q + "load1_max", lambda: x.load.load1_max, "count")
            add(q + "steal_mean", lambda: x.load.steal_mean, "fraction")
            for k in ("share_pool", "pool_share_of_misses"):
                if not math.isnan(x.shares("measured")[k]):
                    add(q + f"measured.{k}", lambda: x.shares("measured")[k], "fraction")
            for m in ("ttft", "tpot", "itl"):
                for pq in benchjson.PERCENTILES:
                    add(q + f"p{pq}_{m}_ms", lambda: float(x.bench[f"p{pq}_{m}_ms"]), "ms")
    _register_overall(add, groups)


def _register_overall(add: Any, groups: list[list[CurveRun]]) -> None:
    """The curve's worst spread, worst gap, flagged runs' gap and whether the pool share grows."""
    def diffs() -> list[float]:
        return [100 * abs(x.shares("measured")[k] - float(np.median([y.shares("measured")[k] for y in g if not y.flagged])))
                for g in groups if any(not y.flagged for y in g) for x in g if x.flagged
                for k in ("share_gpu", "share_pool", "share_computed")]

    def worst(kinds: tuple[str, ...], spread: bool) -> float:
        out = 0.0
        for g in groups:
            for k in kinds:
                meas = [x.shares("measured")[k] for x in _kept(g)]
                sim = [x.shares("simulated")[k] for x in _kept(g)]
                if any(math.isnan(v) for v in meas + sim):
                    continue
                out = max(out, 100 * (max(meas) - min(meas)) if spread else max(abs(a - b) for a, b in zip(sim, meas)) * 100)
        return out

    def monotone() -> int:
        meds = [float(np.median([x.shares("measured")["share_pool"] for x in _kept(g)])) for g in groups]
        return int(all(b >= a - 1e-12 for a, b in zip([-1.0] + meds, meds)))

    if diffs():
        add("curve.flagged_max_diff_points", lambda: max(diffs()), "count",
            note="largest gap between a flagged run's share and its size's median over the kept runs, points")
    add("curve.worst_spread_points", lambda: worst(("share_pool", "pool_share_of_misses"), True), "count",
        note="largest same-size spread of the pool's two shares, points")
    add("curve.worst_error_points", lambda: worst(("share_gpu", "share_pool", "share_computed"), False), "count",
        note="largest gap, simulated less measured, any run and source, points")
    add("curve.pool_share_monotone", monotone, "count", note="1: the median pool share never falls as the pool grows")


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
    launches' own times (what the round takes on a machine nobody else uses). Each field touches
    the files it was computed from (`sources`, records.touch)."""

    launch_s: list[float]
    health_s: list[float]
    sweep_s: list[float]
    sweep_alone_s: list[float]
    experiment_s: float
    experiment_alone_s: float
    sources: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name != "sources":
            touch(*object.__getattribute__(self, "sources").get(name, ()))
        return object.__getattribute__(self, name)


def timing(runs: list[CurveRun]) -> Timing:
    """The curve's times (see Timing). A round that does not hold every size once is refused."""
    with scope() as obs_files:
        obs = [x.result.run.observation() for x in runs]  # host.yaml
    with scope() as health_files:
        health = [x.result.run.meta["server"].get("health_wait_s") for x in runs]  # run.yaml
    with scope() as size_files:
        pools = [x.result.run.pool_tokens for x in runs]  # the server's records
    for x, h in zip(runs, health):
        if not isinstance(h, (int, float)):
            raise RawRecordError(x.path / RUN_YAML, f"server.health_wait_s is {h!r}: no start-up time")
    spans = sorted(((start, end, pool, float(h)) for (start, end), pool, h in zip(obs, pools, health)), key=lambda s: s[0])
    n = len({s[2] for s in spans})
    rounds = [spans[i:i + n] for i in range(0, len(spans), n)]
    for r in rounds:
        if sorted(s[2] for s in r) != sorted({s[2] for s in spans}):
            raise RawRecordError(runs[0].path.parent, "the launches in start order are not rounds of every size once: "
                                                      "not an interleaved curve, so no sweep time")
    own = [(e - s).total_seconds() for s, e, _, _ in spans]
    o, rs = frozenset(obs_files), frozenset(obs_files | size_files)
    return Timing(own, [s[3] for s in spans], [(r[-1][1] - r[0][0]).total_seconds() for r in rounds],
                  [sum((e - s).total_seconds() for s, e, _, _ in r) for r in rounds],
                  (spans[-1][1] - spans[0][0]).total_seconds(), float(sum(own)),
                  {"launch_s": o, "health_s": frozenset(health_files), "sweep_s": rs, "sweep_alone_s": rs,
                   "experiment_s": o, "experiment_alone_s": o})


def register_timing(writer: Any, runs: list[CurveRun]) -> None:
    """curve.time.*: each launch, its wait for /health, each sweep (round) and the whole experiment."""
    add = traced_adder(writer)
    t = timing(runs)
    for name in ("launch", "health", "sweep", "sweep_alone"):
        for stat in ("median", "min", "max"):
            add(f"curve.time.{name}.{stat}", lambda: float(_stats(getattr(t, f"{name}_s"))[stat]), "s")
    add("curve.time.sweeps", lambda: len(t.sweep_s), "count")
    add("curve.time.experiment", lambda: t.experiment_s, "s", note="first launch's start to last launch's end")
    add("curve.time.experiment_alone", lambda: t.experiment_alone_s, "s", note="the launches' own times, summed")
