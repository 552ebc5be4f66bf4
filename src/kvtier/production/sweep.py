"""A measured pool-size sweep on vLLM's CPU build, beside the simulator's prediction of it.

Each run is one kvtier replay capture (run.yaml, client.jsonl, metrics_start.prom, metrics.prom,
server.log) of the same public sessions at one pool size. Per run:

- measured: prompt tokens by source from the server's counters (final snapshot less the first),
  the production pipeline's parser and `token_sources`;
- predicted: the same request stream, as the run's own record keeps it (sent_blocks.npz: every
  answered prompt as chained block ids at the server's block size, kvtier.replay.sent; the public
  trace it came from is not committed), in the order the server received the requests
  (client.jsonl `sent_s`), replayed through kvtier.sim at the GPU cache and pool read from the
  run's own records (cache_config_info, the offload worker's startup line; kvtier.lab.live), the pool's
  stores offered per scheduler step at the budget the server log gives (kvtier.step_budget);
- per request: the usage field `cached_tokens` (GPU + pool) against the prediction.

Two replays of the stream: one request at a time (`TieredCache`'s rules, the model of the lab and
the counterfactual, by their compiled loop kvtier.sim.fast), and as the server ran them
(`ResidentCache` + `replay_admitted`: a running request's blocks are held; requests are admitted
first come, first served, when their blocks fit beside those of the running ones; each ends at the
finish time its client line records). The
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
from ..lab.live import shape_from
from ..replay import sent
from ..sim import TieredCache, fast
from ..sim.requests import Request, prompt_request
from ..sim.resident import Admission, ResidentCache, replay_admitted
from ..step_budget import step_tokens_of
from . import runcontract
from .analysis import token_sources
from ..records.clientlog import ANSWERED_FIELDS, CLIENT_FIELDS, FAILED_FIELDS, read_client_log  # noqa: F401 (re-exported)
from ..records.prometheus import Snapshot, read_prometheus
from ..yamlio import load_yaml

GIB = 2**30
SOURCES = ("gpu", "pool", "computed")
MODELS = ("measured", "simulated", "sequential")  # counters; the replay as the server ran it; one at a time
TTFT_PERCENTILES = (50, 90, 99)  # of the client's time to the first streamed chunk (vllm bench serve's TTFT)
NEAR_BLOCKS = 2  # a prediction off by at most this many blocks counts as near (the table's second count)
RUN_FILES = ("run.yaml", "client.jsonl", "metrics_start.prom", "metrics.prom", "server.log", sent.NAME)


@dataclass(frozen=True)
class SweepRun:
    path: Path
    meta: dict[str, Any]          # run.yaml
    requests: pd.DataFrame        # answered requests, in the order the server received them
    shape: dict[str, int | None]  # block_tokens, kv_blocks, chunk_blocks, cpu_chunks, step_tokens (kvtier.step_budget)
    measured: dict[str, float]    # tokens by source over the run (token_sources' keys)
    preemptions: float
    stored_chunks: float | None   # offloaded blocks the server stored: its store-bytes counter / bytes of a block

    @property
    def pool_bytes(self) -> int:
        return int(round(float(self.meta["server"].get("offload_gib") or 0) * GIB)) if self.tiered else 0

    @property
    def tiered(self) -> bool:
        return self.shape["cpu_chunks"] is not None

    @property
    def pool_tokens(self) -> int:
        s = self.shape
        return int(s["cpu_chunks"] * s["chunk_blocks"] * s["block_tokens"]) if self.tiered else 0  # type: ignore[operator]

    @property
    def kv_cache_tokens(self) -> int:
        return int(self.shape["kv_blocks"]) * int(self.shape["block_tokens"])  # type: ignore[arg-type]


def _delta(end: Snapshot, start: Snapshot) -> dict[str, float]:
    """Prompt tokens by source over the run (token_sources' prompt, gpu, pool, computed, missed):
    the final snapshot's counters less the first's."""
    last = token_sources(end)
    out = {k: float(last[k]) for k in ("prompt", "gpu", "pool", "computed")}
    if start.has("vllm:prompt_tokens_by_source_total"):
        first = start.by_label("vllm:prompt_tokens_by_source_total", "source")
        out["gpu"] -= float(first.get("local_cache_hit", 0.0))
        out["pool"] -= float(first.get("external_kv_transfer", 0.0))
        out["computed"] -= float(first.get("local_compute", 0.0))
        out["prompt"] -= float(start.value("vllm:prompt_tokens_total"))
    out["missed"] = out["pool"] + out["computed"]
    return out


def read_run(run_dir: str | Path) -> SweepRun:
    """One sweep run's records, checked against each other: the counters' prompt tokens are those of
    the answered requests, and a run with a pool (run.yaml) has the offload worker's startup line."""
    run_dir = Path(run_dir)
    for name in RUN_FILES:
        if not (run_dir / name).is_file():
            raise RawRecordError(run_dir / name, "missing: a sweep run needs " + ", ".join(RUN_FILES))
    meta = load_yaml((run_dir / "run.yaml").read_text(encoding="utf-8"))
    for key in ("trace", "scaling", "server"):
        if not isinstance(meta, dict) or key not in meta:
            raise RawRecordError(run_dir / "run.yaml", f"no {key!r} entry (not a kvtier replay run record)")
    log = runcontract.check_run_folder(run_dir)  # counters, one server run, one geometry, job lines
    answered = read_client_log(run_dir / "client.jsonl", run_seconds=runcontract.observation_seconds(run_dir / "host.yaml"))
    reqs = answered.sort_values(["sent_s", "line"], kind="stable").reset_index(drop=True)
    reqs.attrs.update(answered.attrs)
    worker = log.worker
    shape = shape_from(run_dir / "metrics_start.prom", worker)
    shape["step_tokens"] = step_tokens_of(run_dir / "server.log")  # the scheduler's budget: when stores are offered
    tier = meta["server"].get("tier")
    if (tier == "none") != (shape["cpu_chunks"] is None):
        raise RawRecordError(run_dir / "server.log", f"run.yaml says tier {tier!r}, but the offload worker's startup line is "
                                                     f"{'present' if shape['cpu_chunks'] is not None else 'missing'}")
    end, start = read_prometheus(run_dir / "metrics.prom"), read_prometheus(run_dir / "metrics_start.prom")
    measured = _delta(end, start)
    sent_tokens = int(reqs.prompt_tokens_sent.sum())
    if measured["prompt"] != sent_tokens:
        raise RawRecordError(run_dir / "metrics.prom", f"the counters grew by {measured['prompt']:.0f} prompt tokens, "
                                                      f"the answered requests of client.jsonl sent {sent_tokens}")
    if abs(measured["gpu"] + measured["pool"] - float(reqs.cached_tokens.sum())) > 0:
        raise RawRecordError(run_dir / "metrics.prom", f"the counters credit {measured['gpu'] + measured['pool']:.0f} tokens to "
                                                      f"the KV cache and the pool, usage in client.jsonl {int(reqs.cached_tokens.sum())}")
    pre = end.value("vllm:num_preemptions_total") - (start.value("vllm:num_preemptions_total") if start.has("vllm:num_preemptions_total") else 0.0)
    stored = None
    if worker is not None:
        name = "vllm:kv_offload_store_bytes_total"
        stored = (end.value(name) - (start.value(name) if start.has(name) else 0.0)) / worker["bytes_per_offloaded_block"]
    return SweepRun(run_dir, meta, reqs, shape, measured, pre, stored)


def stream(run: SweepRun) -> list[Request]:
    """The simulator's view of the requests the run answered, in the order the server received
    them: each prompt's block ids from sent_blocks.npz (checked against the client log, line by
    line), the answer's KV (max_tokens - 1 tokens: the last one sampled is never fed back)."""
    path = run.path / sent.NAME
    B = int(run.shape["block_tokens"])  # type: ignore[arg-type]
    if sent.block_tokens_of(path) != B:
        raise RawRecordError(path, f"blocks of {sent.block_tokens_of(path)} tokens, the server's are {B} (cache_config_info)")
    chains = sent.read(path, run.path / "client.jsonl")
    return [prompt_request(iter(chains[(r.session, r.index)][1].tolist()), r.prompt_tokens_sent, B,
                           generated=r.max_tokens - 1, label=f"{r.session}:{r.index}") for r in run.requests.itertuples()]


def _cache(run: SweepRun, kind: type[TieredCache], null_blocks: int) -> TieredCache:
    s = run.shape
    return kind(int(s["kv_blocks"]) - null_blocks, int(s["block_tokens"]), cpu_chunks=s["cpu_chunks"],  # type: ignore[arg-type]
                chunk_blocks=s["chunk_blocks"] or 1, flavor="vllm", step_tokens=s.get("step_tokens"))


def sequential(run: SweepRun, requests: list[Request], null_blocks: int = 1) -> tuple[dict[str, list[int]], int]:
    """The one-at-a-time replay: per request its GPU, pool and computed tokens, and the chunks the
    pool stored over the run. By the compiled loop (kvtier.sim.fast.replay_flat: TieredCache's rules,
    equal per request and in stored chunks on every pinned sweep run, tests/test_sweep.py); by
    `sequential_reference` (TieredCache itself) for a stream the compiled loop does not model (a
    prompt listing a block twice)."""
    s = run.shape
    try:
        flat = fast.flatten(requests)
    except ValueError:
        return sequential_reference(run, requests, null_blocks)
    cols = fast.replay_flat(flat, int(s["kv_blocks"]) - null_blocks, int(s["block_tokens"]),  # type: ignore[arg-type]
                            cpu_chunks=s["cpu_chunks"], chunk_blocks=s["chunk_blocks"] or 1, flavor="vllm",
                            step_tokens=s.get("step_tokens"))
    return ({"gpu": cols.gpu_tokens.tolist(), "pool": cols.cpu_tokens.tolist(), "computed": cols.computed_tokens.tolist()},
            int(cols.stored_chunks.sum()))


def sequential_reference(run: SweepRun, requests: list[Request], null_blocks: int = 1) -> tuple[dict[str, list[int]], int]:
    """`sequential` by the readable reference, TieredCache."""
    cache = _cache(run, TieredCache, null_blocks)
    seq = cache.replay(requests)
    return ({"gpu": [o.gpu_tokens for o in seq], "pool": [o.cpu_tokens for o in seq],
             "computed": [o.computed_tokens for o in seq]}, cache.stored_chunks)


def predict(run: SweepRun, requests: list[Request], null_blocks: int = 1) -> tuple[pd.DataFrame, Admission]:
    """Per request: measured cached tokens beside both replays' outcomes. `null_blocks`: vLLM keeps
    block 0 as its null block (BlockPool in vllm/v1/core/block_pool.py)."""
    r = run.requests
    resident = _cache(run, ResidentCache, null_blocks)
    outs, admission = replay_admitted(resident, requests, r.sent_s.tolist(), (r.sent_s + r.total_s).tolist())  # type: ignore[arg-type]
    seq, seq_stored = sequential(run, requests, null_blocks)
    table = r.assign(order=range(len(r)), prompt_tokens=r.prompt_tokens_sent,
                     pred_gpu_tokens=[o.gpu_tokens for o in outs], pred_pool_tokens=[o.cpu_tokens for o in outs],
                     pred_computed_tokens=[o.computed_tokens for o in outs],
                     seq_gpu_tokens=seq["gpu"], seq_pool_tokens=seq["pool"], seq_computed_tokens=seq["computed"])
    table["agrees"] = table.cached_tokens == table.pred_gpu_tokens + table.pred_pool_tokens
    table["seq_agrees"] = table.cached_tokens == table.seq_gpu_tokens + table.seq_pool_tokens
    table.attrs["stored_chunks"] = {"simulated": resident.stored_chunks, "sequential": seq_stored}
    return table, admission


def shares(tokens: dict[str, float]) -> dict[str, float]:
    prompt = sum(tokens[s] for s in SOURCES)
    missed = tokens["pool"] + tokens["computed"]
    out = {f"share_{s}": tokens[s] / prompt for s in SOURCES}
    out["pool_share_of_misses"] = tokens["pool"] / missed if missed else math.nan
    return out


@dataclass(frozen=True)
class RunResult:
    run: SweepRun
    table: pd.DataFrame
    admission: Admission

    def tokens(self, model: str) -> dict[str, float]:
        if model == "measured":
            return {s: float(self.run.measured[s]) for s in SOURCES}
        p = {"simulated": "pred", "sequential": "seq"}[model]
        return {s: float(self.table[f"{p}_{s}_tokens"].sum()) for s in SOURCES}


def analyse(run_dirs: Iterable[str | Path]) -> list[RunResult]:
    """Every run, ordered by pool size; all must share the KV cache and the stream's scaling."""
    results = []
    for d in run_dirs:
        run = read_run(d)
        table, admission = predict(run, stream(run))
        results.append(RunResult(run, table, admission))
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


def register_numbers(writer: Any, results: list[RunResult]) -> None:
    """sweepcpu.*: the sweep's fixed settings, then per run (sweepcpu.run.<i>, smallest pool first)
    its pool, the measured and predicted shares, their differences and the per-request agreement."""
    base = results[0].run
    writer.reading(*[x.run.path / f for x in results for f in RUN_FILES])
    writer.add("sweepcpu.runs", len(results), "count")
    writer.add("sweepcpu.kv_cache_tokens", base.kv_cache_tokens, "tokens")
    writer.add("sweepcpu.block_tokens", int(base.shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    budgets = {x.run.shape.get("step_tokens") for x in results}
    if len(budgets) == 1 and None not in budgets:
        writer.add("sweepcpu.step_tokens", int(budgets.pop()), "tokens", note="the scheduler's token budget per step (kvtier.step_budget)")
    chunked = [x.run for x in results if x.run.tiered]
    if chunked:
        writer.add("sweepcpu.chunk_tokens", int(chunked[0].shape["chunk_blocks"]) * int(chunked[0].shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
    sc = base.meta["scaling"]
    writer.add("sweepcpu.sessions", int(base.meta.get("sessions") or 0), "count")
    writer.add("sweepcpu.scale", float(sc["scale"]), "x")
    writer.add("sweepcpu.compress", float(sc["compress"]), "x")
    writer.add("sweepcpu.session_gap", float(sc["session_gap_s"]), "s")
    worst = worst_seq = 0.0
    for i, x in enumerate(results):
        writer.reading(*[x.run.path / f for f in RUN_FILES])
        p = f"sweepcpu.run.{i}."
        r = x.run
        writer.add(p + "pool_bytes", r.pool_bytes, "B")
        writer.add(p + "pool_tokens", r.pool_tokens, "tokens")
        writer.add(p + "pool_chunks", int(r.shape["cpu_chunks"] or 0), "count")
        writer.add(p + "pool_over_cache", r.pool_tokens / r.kv_cache_tokens, "x")
        writer.add(p + "requests", len(x.table), "requests")
        writer.add(p + "prompt_tokens", float(r.measured["prompt"]), "tokens")
        writer.add(p + "preemptions", float(r.preemptions), "count")
        for model in MODELS:
            for k, v in shares(x.tokens(model)).items():
                if not math.isnan(v):
                    writer.add(p + f"{model}.{k}", v, "fraction")
        m = shares(x.tokens("measured"))
        for model in ("simulated", "sequential"):
            sh = shares(x.tokens(model))
            gaps = [sh[f"share_{s}"] - m[f"share_{s}"] for s in SOURCES]
            for s, g in zip(SOURCES, gaps):
                writer.add(p + f"{model}.diff_points_{s}", 100 * g, "count", note="simulated share less measured, percentage points")
            writer.add(p + f"{model}.worst_points", 100 * max(map(abs, gaps)), "count")
            if model == "simulated":
                worst = max(worst, max(map(abs, gaps)))
            else:
                worst_seq = max(worst_seq, max(map(abs, gaps)))
        if r.stored_chunks is not None:
            writer.add(p + "stored_chunks", float(r.stored_chunks), "blocks", note="offloaded blocks stored: store-bytes counter / bytes of a block")
            for model, n in x.table.attrs["stored_chunks"].items():
                writer.add(p + f"{model}.stored_chunks", int(n), "blocks")
        for q in TTFT_PERCENTILES:  # the run's own request set; ITL and TPOT need chunk times these runs did not keep
            writer.add(p + f"p{q}_ttft_ms", 1000 * float(np.percentile(r.requests.first_chunk_s, q)), "ms")
        writer.add(p + "agree", int(x.table.agrees.sum()), "requests")
        writer.add(p + "sequential.agree", int(x.table.seq_agrees.sum()), "requests")
        writer.add(p + "waited", x.admission.waited, "requests")
        writer.add(p + "forced", x.admission.forced, "requests")
        writer.add(p + "max_running", x.admission.max_running, "requests")
    writer.reading(*[x.run.path / f for x in results for f in RUN_FILES])
    writer.add("sweepcpu.worst_points", 100 * worst, "count", note="largest gap of any share, any run, percentage points")
    gaps = [max(abs(a - b) for a, b in zip(*[[shares(x.tokens(k))[f"share_{s}"] for s in SOURCES] for k in ("simulated", "measured")]))
            for x in results]
    writer.add("sweepcpu.worst_run", int(max(range(len(results)), key=gaps.__getitem__)), "count", note="index of the run with the largest gap")
    writer.add("sweepcpu.sequential.worst_points", 100 * worst_seq, "count")
    writer.add("sweepcpu.requests", int(sum(len(x.table) for x in results)), "requests")
    writer.add("sweepcpu.waited", int(sum(x.admission.waited for x in results)), "requests")
    writer.add("sweepcpu.forced", int(sum(x.admission.forced for x in results)), "requests")
    writer.add("sweepcpu.preemptions", float(sum(x.run.preemptions for x in results)), "count")
    writer.add("sweepcpu.max_running", int(max(x.admission.max_running for x in results)), "requests")
    writer.add("sweepcpu.with_pool", sum(1 for x in results if x.run.tiered), "count")
    writer.add("sweepcpu.without_pool", sum(1 for x in results if not x.run.tiered), "count")
    durations = [float(x.run.meta.get("max_duration_s") or 0.0) for x in results]
    writer.add("sweepcpu.max_duration_min", min(durations), "s")
    writer.add("sweepcpu.max_duration_max", max(durations), "s")
    writer.add("sweepcpu.requests_min", int(min(len(x.table) for x in results)), "requests")
    writer.add("sweepcpu.requests_max", int(max(len(x.table) for x in results)), "requests")
    gpu = [shares(x.tokens("measured"))["share_gpu"] for x in results]
    writer.add("sweepcpu.measured.share_gpu_min", min(gpu), "fraction")
    writer.add("sweepcpu.measured.share_gpu_max", max(gpu), "fraction")
    near = sum(int((abs(x.table.cached_tokens - x.table.pred_gpu_tokens - x.table.pred_pool_tokens)
                    <= NEAR_BLOCKS * int(x.run.shape["block_tokens"])).sum()) for x in results)  # type: ignore[arg-type]
    writer.reading()
    writer.add("sweepcpu.near_blocks", NEAR_BLOCKS, "blocks")
    writer.reading(*[x.run.path / f for x in results for f in RUN_FILES])
    writer.add("sweepcpu.within_near_blocks", near, "requests", note="requests whose predicted cached tokens are within near_blocks blocks")
    agree = int(sum(int(x.table.agrees.sum()) for x in results))
    writer.add("sweepcpu.missed", int(sum(len(x.table) for x in results)) - agree, "requests")
    writer.add("sweepcpu.near_not_exact", near - agree, "requests")
    writer.add("sweepcpu.agree", int(sum(int(x.table.agrees.sum()) for x in results)), "requests")
    writer.add("sweepcpu.sequential.agree", int(sum(int(x.table.seq_agrees.sum()) for x in results)), "requests")


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

