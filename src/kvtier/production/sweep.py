"""A measured pool-size sweep on vLLM's CPU build, beside the simulator's prediction of it.

Each run is one kvtier replay run record (kvtier.records.replayrun: read and checked there; this
module opens no file) of the same public sessions at one pool size. Per run:

- measured: prompt tokens by source from the server's counters (final snapshot less the first);
- predicted: the same request stream, as the run's own record keeps it (sent_blocks.npz: every
  answered prompt as chained block ids at the server's block size, kvtier.replay.sent; the public
  trace it came from is not committed), in the order the server received the requests
  (client.jsonl `sent_s`), replayed through kvtier.sim at the GPU cache and pool read from the
  run's own records (cache_config_info, the offload worker's startup line; records.geometry), the pool's
  stores offered per scheduler step at the budget the server log gives (kvtier.step_budget);
- per request: the usage field `cached_tokens` (GPU + pool) against the prediction.

Two replays of the stream: one request at a time (`TieredCache`'s rules, the model of the lab and
the counterfactual, by their compiled loop kvtier.sim.fast), and as the server ran them
(`ResidentCache` + `replay_admitted`: a running request's blocks are held; requests are admitted
first come, first served, when their blocks fit beside those of the running ones; each ends at the
finish time its client line records; by its compiled loop, kvtier.sim.fast.replay_admitted_flat). The
second is the prediction: the client keeps up to 16 requests in flight, and the server's KV cache
holds only a few prompts, so most requests wait, and while they run nothing else can evict them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..numbers import traced_adder
from ..records import replayrun
from ..records.clientlog import ANSWERED_FIELDS, CLIENT_FIELDS, FAILED_FIELDS, read_client_log  # noqa: F401 (re-exported)
from ..records.touch import scope, touch
from ..sim import TieredCache, fast
from ..sim.requests import Request, prompt_request
from ..sim.resident import Admission, ResidentCache, replay_admitted

GIB = 2**30
SOURCES = ("gpu", "pool", "computed")
MODELS = ("measured", "simulated", "sequential")  # counters; the replay as the server ran it; one at a time
TTFT_PERCENTILES = (50, 90, 99)  # of the client's time to the first streamed chunk (vllm bench serve's TTFT)
NEAR_BLOCKS = 2  # a prediction off by at most this many blocks counts as near (the table's second count)
RUN_FILES = replayrun.REQUIRED

# A sweep run is a kvtier replay run record (kvtier.records.replayrun), by its old names here.
SweepRun = replayrun.ReplayRun
read_run = replayrun.read


def stream(run: SweepRun) -> list[Request]:
    """The simulator's view of the requests the run answered, in the order the server received
    them: each prompt's block ids from sent_blocks.npz (checked against the client log, line by
    line), the answer's KV (max_tokens - 1 tokens: the last one sampled is never fed back)."""
    B = int(run.shape["block_tokens"])  # type: ignore[arg-type]
    if run.sent_block_tokens() != B:
        raise RawRecordError(run.file(replayrun.SENT), f"blocks of {run.sent_block_tokens()} tokens, the server's are {B} "
                                                       "(cache_config_info)")
    chains = run.sent()
    return [prompt_request(iter(chains[(r.session, r.index)][1].tolist()), r.prompt_tokens_sent, B,
                           generated=r.max_tokens - 1, label=f"{r.session}:{r.index}") for r in run.requests.itertuples()]


def _cache(run: SweepRun, kind: type[TieredCache], null_blocks: int) -> TieredCache:
    s = run.shape
    return kind(int(s["kv_blocks"]) - null_blocks, int(s["block_tokens"]), cpu_chunks=s["cpu_chunks"],  # type: ignore[arg-type]
                chunk_blocks=s["chunk_blocks"] or 1, flavor="vllm", step_tokens=s.get("step_tokens"))


def _flat(requests: list[Request]) -> fast.Flat | None:
    """The stream as the compiled loops read it, or None for one they do not model (a prompt
    listing a block twice: the readable references replay it)."""
    try:
        return fast.flatten(requests)
    except ValueError:
        return None


def _sources(cols: fast.Columns) -> dict[str, list[int]]:
    return {"gpu": cols.gpu_tokens.tolist(), "pool": cols.cpu_tokens.tolist(), "computed": cols.computed_tokens.tolist()}


def sequential(run: SweepRun, requests: list[Request], null_blocks: int = 1,
               flat: fast.Flat | None = None) -> tuple[dict[str, list[int]], int]:
    """The one-at-a-time replay: per request its GPU, pool and computed tokens, and the chunks the
    pool stored over the run. By the compiled loop (kvtier.sim.fast.replay_flat: TieredCache's rules,
    equal per request and in stored chunks on every pinned sweep run, tests/test_sweep.py); by
    `sequential_reference` (TieredCache itself) for a stream the compiled loop does not model (a
    prompt listing a block twice). `flat`: the requests already flattened."""
    s = run.shape
    flat = flat if flat is not None else _flat(requests)
    if flat is None:
        return sequential_reference(run, requests, null_blocks)
    cols = fast.replay_flat(flat, int(s["kv_blocks"]) - null_blocks, int(s["block_tokens"]),  # type: ignore[arg-type]
                            cpu_chunks=s["cpu_chunks"], chunk_blocks=s["chunk_blocks"] or 1, flavor="vllm",
                            step_tokens=s.get("step_tokens"))
    return _sources(cols), int(cols.stored_chunks.sum())


def sequential_reference(run: SweepRun, requests: list[Request], null_blocks: int = 1) -> tuple[dict[str, list[int]], int]:
    """`sequential` by the readable reference, TieredCache."""
    cache = _cache(run, TieredCache, null_blocks)
    seq = cache.replay(requests)
    return ({"gpu": [o.gpu_tokens for o in seq], "pool": [o.cpu_tokens for o in seq],
             "computed": [o.computed_tokens for o in seq]}, cache.stored_chunks)


def admitted(run: SweepRun, requests: list[Request], null_blocks: int = 1,
             flat: fast.Flat | None = None) -> tuple[dict[str, list[int]], int, Admission]:
    """The replay as the server ran the requests: per request its GPU, pool and computed tokens, the
    chunks the pool stored over the run, and how admission went. By the compiled loop
    (kvtier.sim.fast.replay_admitted_flat: replay_admitted's rules, equal per request on every
    committed sweep run, tests/test_sim_admitted.py); by `admitted_reference` for a stream it does
    not model. `flat`: the requests already flattened."""
    s, r = run.shape, run.requests
    flat = flat if flat is not None else _flat(requests)
    if flat is None:
        return admitted_reference(run, requests, null_blocks)
    cols, admission = fast.replay_admitted_flat(
        flat, r.sent_s.to_numpy(), (r.sent_s + r.total_s).to_numpy(), int(s["kv_blocks"]) - null_blocks,  # type: ignore[arg-type]
        int(s["block_tokens"]), cpu_chunks=s["cpu_chunks"], chunk_blocks=s["chunk_blocks"] or 1,  # type: ignore[arg-type]
        flavor="vllm", step_tokens=s.get("step_tokens"))
    return _sources(cols), int(cols.stored_chunks.sum()), admission


def admitted_reference(run: SweepRun, requests: list[Request],
                       null_blocks: int = 1) -> tuple[dict[str, list[int]], int, Admission]:
    """`admitted` by the readable reference, ResidentCache + replay_admitted."""
    r = run.requests
    resident = _cache(run, ResidentCache, null_blocks)
    outs, admission = replay_admitted(resident, requests, r.sent_s.tolist(), (r.sent_s + r.total_s).tolist())  # type: ignore[arg-type]
    return ({"gpu": [o.gpu_tokens for o in outs], "pool": [o.cpu_tokens for o in outs],
             "computed": [o.computed_tokens for o in outs]}, resident.stored_chunks, admission)


def predict(run: SweepRun, requests: list[Request], null_blocks: int = 1) -> tuple[pd.DataFrame, Admission]:
    """Per request: measured cached tokens beside both replays' outcomes. `null_blocks`: vLLM keeps
    block 0 as its null block (BlockPool in vllm/v1/core/block_pool.py)."""
    r = run.requests
    flat = _flat(requests)  # once, for both replays; None: a stream only the readable references model
    if flat is None:
        pred, pred_stored, admission = admitted_reference(run, requests, null_blocks)
        seq, seq_stored = sequential_reference(run, requests, null_blocks)
    else:
        pred, pred_stored, admission = admitted(run, requests, null_blocks, flat)
        seq, seq_stored = sequential(run, requests, null_blocks, flat)
    table = r.assign(order=range(len(r)), prompt_tokens=r.prompt_tokens_sent,
                     pred_gpu_tokens=pred["gpu"], pred_pool_tokens=pred["pool"], pred_computed_tokens=pred["computed"],
                     seq_gpu_tokens=seq["gpu"], seq_pool_tokens=seq["pool"], seq_computed_tokens=seq["computed"])
    table["agrees"] = table.cached_tokens == table.pred_gpu_tokens + table.pred_pool_tokens
    table["seq_agrees"] = table.cached_tokens == table.seq_gpu_tokens + table.seq_pool_tokens
    table.attrs["stored_chunks"] = {"simulated": pred_stored, "sequential": seq_stored}
    return table, admission


def shares(tokens: dict[str, float]) -> dict[str, float]:
    prompt = sum(tokens[s] for s in SOURCES)
    missed = tokens["pool"] + tokens["computed"]
    out = {f"share_{s}": tokens[s] / prompt for s in SOURCES}
    out["pool_share_of_misses"] = tokens["pool"] / missed if missed else math.nan
    return out


@dataclass(frozen=True)
class RunResult:
    """A run and both replays of its stream; `table` and `admission` touch the files the
    replays read (`sources`, records.touch), so a number computed from them names those."""

    run: SweepRun
    table: pd.DataFrame
    admission: Admission
    sources: frozenset[str] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        if name in ("table", "admission"):
            touch(*object.__getattribute__(self, "sources"))
        return object.__getattribute__(self, name)

    def tokens(self, model: str) -> dict[str, float]:
        if model == "measured":
            return {s: float(self.run.measured[s]) for s in SOURCES}
        p = {"simulated": "pred", "sequential": "seq"}[model]
        return {s: float(self.table[f"{p}_{s}_tokens"].sum()) for s in SOURCES}


def replayed(run: SweepRun) -> RunResult:
    """Both replays of the run's stream, with the files they read (records.touch)."""
    with scope() as seen:
        table, admission = predict(run, stream(run))
    return RunResult(run, table, admission, frozenset(seen))


def analyse(run_dirs: Iterable[str | Path]) -> list[RunResult]:
    """Every run, ordered by pool size; all must share the KV cache and the stream's scaling."""
    results = [replayed(read_run(d)) for d in run_dirs]
    results.sort(key=lambda x: (x.run.pool_tokens, str(x.run.path)))
    base = results[0].run
    for x in results[1:]:
        if x.run.kv_cache_tokens != base.kv_cache_tokens or x.run.meta["scaling"] != base.meta["scaling"] \
                or x.run.meta["trace"] != base.meta["trace"]:
            raise RawRecordError(x.run.path / "run.yaml", f"not the same sweep as {base.path}: KV cache, trace or scaling differ")
    return results


def tidy(results: list[RunResult]) -> pd.DataFrame:
    """One row per run, model and source: tokens and share of prompt tokens."""
    rows = []
    for x in results:
        for model in MODELS:
            t = x.tokens(model)
            sh = shares(t)
            for s in SOURCES:
                rows.append({"run": x.run.path.as_posix(), "pool_bytes": x.run.pool_bytes, "pool_tokens": x.run.pool_tokens,
                             "kv_cache_tokens": x.run.kv_cache_tokens, "model": model, "source": s, "tokens": t[s],
                             "share": sh[f"share_{s}"], "pool_share_of_misses": sh["pool_share_of_misses"]})
    return pd.DataFrame(rows)


def requests_table(results: list[RunResult]) -> pd.DataFrame:
    return pd.concat([x.table.assign(run=x.run.path.as_posix(), pool_tokens=x.run.pool_tokens) for x in results], ignore_index=True)


def _gap(x: RunResult, model: str) -> float:
    """The largest gap of any share between `model` and the counters (a fraction)."""
    m, sh = shares(x.tokens("measured")), shares(x.tokens(model))
    return max(abs(sh[f"share_{s}"] - m[f"share_{s}"]) for s in SOURCES)


def _near(x: RunResult) -> int:
    return int((abs(x.table.cached_tokens - x.table.pred_gpu_tokens - x.table.pred_pool_tokens)
                <= NEAR_BLOCKS * int(x.run.shape["block_tokens"])).sum())  # type: ignore[arg-type]


def register_numbers(writer: Any, results: list[RunResult]) -> None:
    """sweepcpu.*: the sweep's fixed settings, then per run (sweepcpu.run.<i>, smallest pool first)
    its pool, the measured and predicted shares, their differences and the per-request agreement.
    Each number names the files its computation read (records.touch: a run's fields and its
    replays touch their own files), not a list written beside it."""
    add = traced_adder(writer)
    base = results[0].run
    add("sweepcpu.runs", lambda: len(results), "count", settings=True)  # the configured runs (sweep.runs)
    add("sweepcpu.kv_cache_tokens", lambda: base.kv_cache_tokens, "tokens")
    add("sweepcpu.block_tokens", lambda: int(base.shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    budgets = lambda: {x.run.shape.get("step_tokens") for x in results}  # noqa: E731 (every run's, they must agree)
    if len(budgets()) == 1 and None not in budgets():
        add("sweepcpu.step_tokens", lambda: int(next(iter(budgets()))), "tokens",
            note="the scheduler's token budget per step (kvtier.step_budget)")
    chunked = [x.run for x in results if x.run.tiered]
    if chunked:
        add("sweepcpu.chunk_tokens", lambda: int(chunked[0].shape["chunk_blocks"]) * int(chunked[0].shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    add("sweepcpu.sessions", lambda: int(base.meta.get("sessions") or 0), "count")
    add("sweepcpu.scale", lambda: float(base.meta["scaling"]["scale"]), "x")
    add("sweepcpu.compress", lambda: float(base.meta["scaling"]["compress"]), "x")
    add("sweepcpu.session_gap", lambda: float(base.meta["scaling"]["session_gap_s"]), "s")
    for i, x in enumerate(results):
        p = f"sweepcpu.run.{i}."
        r = x.run
        add(p + "pool_bytes", lambda: r.pool_bytes, "B")
        add(p + "pool_tokens", lambda: r.pool_tokens, "tokens")
        add(p + "pool_chunks", lambda: int(r.shape["cpu_chunks"] or 0), "count")
        add(p + "pool_over_cache", lambda: r.pool_tokens / r.kv_cache_tokens, "x")
        add(p + "requests", lambda: len(r.requests), "requests")
        add(p + "prompt_tokens", lambda: float(r.measured["prompt"]), "tokens")
        add(p + "preemptions", lambda: float(r.preemptions), "count")
        for model in MODELS:
            for k, v in shares(x.tokens(model)).items():
                if not math.isnan(v):
                    add(p + f"{model}.{k}", lambda: shares(x.tokens(model))[k], "fraction")
        for model in ("simulated", "sequential"):
            for s in SOURCES:
                add(p + f"{model}.diff_points_{s}",
                    lambda: 100 * (shares(x.tokens(model))[f"share_{s}"] - shares(x.tokens("measured"))[f"share_{s}"]),
                    "count", note="simulated share less measured, percentage points")
            add(p + f"{model}.worst_points", lambda: 100 * _gap(x, model), "count")
        if r.stored_chunks is not None:
            add(p + "stored_chunks", lambda: float(r.stored_chunks), "blocks",  # type: ignore[arg-type]
                note="offloaded blocks stored: store-bytes counter / bytes of a block")
            for model in x.table.attrs["stored_chunks"]:
                add(p + f"{model}.stored_chunks", lambda: int(x.table.attrs["stored_chunks"][model]), "blocks")
        for q in TTFT_PERCENTILES:  # the run's own request set; ITL and TPOT need chunk times these runs did not keep
            add(p + f"p{q}_ttft_ms", lambda: 1000 * float(np.percentile(r.requests.first_chunk_s, q)), "ms")
        add(p + "agree", lambda: int(x.table.agrees.sum()), "requests")
        add(p + "sequential.agree", lambda: int(x.table.seq_agrees.sum()), "requests")
        add(p + "waited", lambda: x.admission.waited, "requests")
        add(p + "forced", lambda: x.admission.forced, "requests")
        add(p + "max_running", lambda: x.admission.max_running, "requests")
    add("sweepcpu.worst_points", lambda: 100 * max(_gap(x, "simulated") for x in results), "count",
        note="largest gap of any share, any run, percentage points")
    add("sweepcpu.worst_run", lambda: int(max(range(len(results)), key=[_gap(x, "simulated") for x in results].__getitem__)),
        "count", note="index of the run with the largest gap")
    add("sweepcpu.sequential.worst_points", lambda: 100 * max(_gap(x, "sequential") for x in results), "count")
    add("sweepcpu.requests", lambda: int(sum(len(x.run.requests) for x in results)), "requests")
    add("sweepcpu.waited", lambda: int(sum(x.admission.waited for x in results)), "requests")
    add("sweepcpu.forced", lambda: int(sum(x.admission.forced for x in results)), "requests")
    add("sweepcpu.preemptions", lambda: float(sum(x.run.preemptions for x in results)), "count")
    add("sweepcpu.max_running", lambda: int(max(x.admission.max_running for x in results)), "requests")
    add("sweepcpu.with_pool", lambda: sum(1 for x in results if x.run.tiered), "count")
    add("sweepcpu.without_pool", lambda: sum(1 for x in results if not x.run.tiered), "count")
    durations = lambda: [float(x.run.meta.get("max_duration_s") or 0.0) for x in results]  # noqa: E731
    add("sweepcpu.max_duration_min", lambda: min(durations()), "s")
    add("sweepcpu.max_duration_max", lambda: max(durations()), "s")
    add("sweepcpu.requests_min", lambda: int(min(len(x.run.requests) for x in results)), "requests")
    add("sweepcpu.requests_max", lambda: int(max(len(x.run.requests) for x in results)), "requests")
    gpu = lambda: [shares(x.tokens("measured"))["share_gpu"] for x in results]  # noqa: E731
    add("sweepcpu.measured.share_gpu_min", lambda: min(gpu()), "fraction")
    add("sweepcpu.measured.share_gpu_max", lambda: max(gpu()), "fraction")
    add("sweepcpu.near_blocks", lambda: NEAR_BLOCKS, "blocks", settings=True)
    add("sweepcpu.within_near_blocks", lambda: sum(_near(x) for x in results), "requests",
        note="requests whose predicted cached tokens are within near_blocks blocks")
    agree = lambda: int(sum(int(x.table.agrees.sum()) for x in results))  # noqa: E731
    add("sweepcpu.missed", lambda: int(sum(len(x.run.requests) for x in results)) - agree(), "requests")
    add("sweepcpu.near_not_exact", lambda: sum(_near(x) for x in results) - agree(), "requests")
    add("sweepcpu.agree", agree, "requests")
    add("sweepcpu.sequential.agree", lambda: int(sum(int(x.table.seq_agrees.sum()) for x in results)), "requests")


# Each run is one point: the runs do not lie on one curve (each sends its own stream), so no
# series is joined by lines. Okabe-Ito colours, and a distinct marker for every series.
STYLE = {"measured": dict(color="#000000", marker="o", markersize=6, label="measured (server counters)"),
         "simulated": dict(color="#0072B2", marker="x", markersize=7, markeredgewidth=1.6,
                           label="simulator, as the server ran the requests"),
         "sequential": dict(color="#D55E00", marker="+", markersize=8, markeredgewidth=1.6,
                            label="simulator, one request at a time"),
         "calibrated": dict(color="#009E73", marker="s", markersize=5, markerfacecolor="none", markeredgewidth=1.4,
                            label="workload calibrated to the capture")}
OFFSETS = {"measured": -0.21, "simulated": -0.07, "sequential": 0.07, "calibrated": 0.21}


def figure(tidy_table: pd.DataFrame, out: str | Path, calibrated: pd.DataFrame | None = None) -> None:
    """Figure 2's quantities, measured: (a) the share of prompt tokens from the KV cache, (b) from
    the pool, (c) the share of the KV cache's misses served by the pool, one column per run (its
    pool over the KV cache), each series a marker beside the others, stacked panels.
    `calibrated` (kvtier.counterfactual.sweepcheck.predict's table): the calibrated synthetic
    workload's shares at each run's pool size, as a fourth series."""
    from ..render.svg import WIDTH, panels, save_svg

    t = tidy_table.assign(ratio=tidy_table.pool_tokens / tidy_table.kv_cache_tokens)
    ratios = sorted(t.ratio.unique())
    col = {r: i for i, r in enumerate(ratios)}
    fig, (a, b, c) = panels(3, 1.75, sharex=True)
    fig.set_size_inches(WIDTH, 1.75 * 3 + 1.3)

    def put(ax, model: str, ratio: pd.Series, share: pd.Series) -> None:
        st = dict(STYLE[model])
        ax.plot([col[r] + OFFSETS[model] for r in ratio], 100 * share, linestyle="none", **st)

    for model in MODELS:
        g = t[t.model == model]
        put(a, model, g[g.source == "gpu"].ratio, g[g.source == "gpu"].share)
        put(b, model, g[g.source == "pool"].ratio, g[g.source == "pool"].share)
        q = g[g.source == "pool"]
        put(c, model, q.ratio, q.pool_share_of_misses)
    if calibrated is not None:
        kv = t.groupby("run").kv_cache_tokens.first()
        cal = calibrated.assign(ratio=calibrated.pool_tokens / calibrated.run.map(kv))
        cal = cal.assign(ratio=[min(ratios, key=lambda r, x=x: abs(r - x)) for x in cal.ratio])
        for ax, source in ((a, "gpu"), (b, "pool")):
            q = cal[cal.source == source]
            put(ax, "calibrated", q.ratio, q.model)
        wide = cal.pivot_table(index="ratio", columns="source", values="model")
        missed = wide["pool"] + wide["computed"]
        put(c, "calibrated", pd.Series(wide.index), (wide["pool"] / missed).where(missed > 0, 0.0))
    for ax, title in ((a, "(a) from the KV cache (%)"), (b, "(b) from the pool (%)"),
                      (c, "(c) KV-cache misses the pool served (%)")):
        ax.set_title(title, loc="left")
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(0, 100)
        ax.set_yticks([0, 50, 100])
    c.set_xticks(range(len(ratios)), [f"{r:.2g}" for r in ratios])
    c.set_xlabel("pool size / KV cache size, one column per run")
    handles, names = a.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower left", ncol=1, handletextpad=0.4, borderaxespad=0.2)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    save_svg(fig, out, "sweep_cpu")

