"""The lab's numbers: measured table, ratios, pass times, token splits, the load example,
the KV-size arithmetic, the simulator's experiments and its prediction beside the measurement.

`analyse(paths, writer)` registers every number under `lab.` and returns the tidy tables the
figure and the page use. Setup names in the records: 'vllm' (vLLM alone), 'lmcache'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..numbers import NumbersWriter
from . import experiments as ex
from ..sim import frees_unhashed_first
from .model import read_model
from .predict import calibrate, predict
from .records import PASSES, block_tokens, gpu_cache_tokens, metrics_by_pass, read_lmcache_log, read_requests, read_run

GiB = 2**30
SETUPS = ("vllm", "lmcache")


@dataclass(frozen=True)
class LabInputs:
    run: str
    requests: str
    model: str
    logs: dict[str, str]
    metrics: dict[str, str]  # setup -> folder of snapshots

    @classmethod
    def under(cls, root: str | Path, model: str) -> "LabInputs":
        root = Path(root)
        return cls(str(root / "run.yaml"), str(root / "requests.csv"), model,
                   {s: str(root / s / "server.log") for s in SETUPS}, {s: str(root / s / "metrics") for s in SETUPS})


@dataclass
class LabTables:
    requests: pd.DataFrame
    passes: pd.DataFrame
    cpu_sweep: pd.DataFrame
    extra: dict = field(default_factory=dict)


def _only(values: pd.Series | list, what: str, path: str) -> int:
    u = sorted(set(int(v) for v in values))
    if len(u) != 1:
        raise RawRecordError(path, f"{what} differs between records: {u}")
    return u[0]


def analyse(inp: LabInputs, w: NumbersWriter) -> LabTables:
    run = read_run(inp.run)
    req = read_requests(inp.requests)
    model = read_model(inp.model)
    docs_req = req[req["phase"].eq("doc")].copy()

    # Each group below names the raw files it reads (w.reading), for per-number provenance.
    R, Q, MO = inp.run, inp.requests, inp.model
    LOGS = sorted(inp.logs.values())
    SNAPS = sorted(p.as_posix() for s in SETUPS for p in Path(inp.metrics[s]).glob("*.prom"))
    SHAPE = [R, Q, *LOGS, *SNAPS]  # the simulator's shape: documents, cache size, block size, answer length

    # ---- setup
    cache_tokens = _only([gpu_cache_tokens(inp.logs[s]) for s in SETUPS], "GPU KV cache size", inp.logs["vllm"])
    B = _only([block_tokens(inp.metrics[s]) for s in SETUPS], "block size", inp.metrics["vllm"])
    doc_tokens = int(run["documents"]["tokens"])
    n_docs = int(run["documents"]["count"])
    if not docs_req["prompt_tokens"].eq(doc_tokens).all():
        raise RawRecordError(inp.requests, f"document prompts are not all {doc_tokens} tokens as run.yaml says")
    check = req.loc[req["phase"].eq("check"), "prompt_tokens"]
    check_tokens = _only(check, "check prompt length", inp.requests) if len(check) else 0
    total = n_docs * doc_tokens
    lm_env = run["setups"]["lmcache"].get("env", {})
    chunk = int(lm_env.get("LMCACHE_CHUNK_SIZE", 256))
    cpu_limit = float(lm_env.get("LMCACHE_MAX_LOCAL_CPU_SIZE", 5.0)) * GiB  # LMCache sizes its pool in GiB
    w.reading(*LOGS)
    w.add("lab.setup.gpu_cache_tokens", cache_tokens, "tokens")
    w.reading(*SNAPS)
    w.add("lab.setup.block_tokens", B, "tokens")
    w.reading(R, Q)
    w.add("lab.setup.doc_tokens", doc_tokens, "tokens")
    w.add("lab.setup.docs", n_docs, "count")
    w.add("lab.setup.total_tokens", total, "tokens")
    w.reading(R, Q, *LOGS)
    w.add("lab.setup.docs_that_fit", cache_tokens / doc_tokens, "x")
    w.add("lab.setup.overflow_ratio", total / cache_tokens, "x")
    w.reading(R)
    w.add("lab.setup.concurrency", int(run["concurrency"]), "count")
    w.reading(MO)
    w.add("lab.setup.model_params", model.parameters, "count")
    w.reading(Q)
    w.add("lab.setup.check_tokens", check_tokens, "tokens")
    w.reading(R)
    w.add("lab.setup.max_tokens", int(run.get("max_tokens", 1)), "tokens")
    w.add("lab.load.chunk_tokens", chunk, "tokens")
    w.add("lab.cpu.limit", cpu_limit, "B")
    w.reading(MO)
    w.add("lab.cpu.kv_bytes_per_token", model.kv_bytes_per_token, "B")
    w.reading(R, Q, MO)
    w.add("lab.cpu.kv_bytes_all_docs", total * model.kv_bytes_per_token, "B")
    w.reading(R, Q)  # the measured times: requests.csv, checked against run.yaml

    # ---- measured TTFT table, ratios, pass times
    for (setup, p), g in docs_req.groupby(["setup", "pass"]):
        if len(g) != n_docs or sorted(g["doc"]) != list(range(n_docs)):
            raise RawRecordError(inp.requests, f"{setup}/{p}: expected each of {n_docs} documents once")
        w.add(f"lab.ttft.{setup}.{p}.p50", float(g["ttft_ms"].median()), "ms")
        w.add(f"lab.ttft.{setup}.{p}.mean", float(g["ttft_ms"].mean()), "ms")
        end = (g["start_s"] + g["e2e_ms"] / 1000).max()
        w.add(f"lab.pass_time.{setup}.{p}", float(end - g["start_s"].min()), "s")
    cell = docs_req.groupby(["setup", "pass"])["ttft_ms"]
    p50, mean = cell.median(), cell.mean()
    w.add("lab.ratio.second.p50", p50["vllm", "second"] / p50["lmcache", "second"], "x")
    w.add("lab.ratio.second.mean", mean["vllm", "second"] / mean["lmcache", "second"], "x")
    w.add("lab.first_read_slowdown", p50["lmcache", "first"] / p50["vllm", "first"] - 1, "fraction")

    # ---- metrics per pass
    w.reading(*SNAPS)
    passes = pd.DataFrame([m.__dict__ for s in SETUPS for m in metrics_by_pass(inp.metrics[s], s)]).rename(columns={"pass_": "pass"})
    for r in passes.itertuples(index=False):
        w.add(f"lab.measured.{r.setup}.{getattr(r, '_1')}.prefix_cache_hits", int(r.prefix_hits), "tokens")
    rev = passes.set_index(["setup", "pass"]).loc[("lmcache", "reverse")]
    w.add("lab.reverse.gpu_resolved_tokens", int(rev["prefix_hits"]), "tokens")
    w.add("lab.reverse.lmcache_queried_tokens", int(rev["external_queries"]), "tokens")
    w.add("lab.reverse.total_tokens", int(rev["prefix_queries"]), "tokens")
    w.add("lab.reverse.lmcache_loaded_tokens", int(rev["external_hits"]), "tokens")

    # ---- the reverse pass per request: which documents hit where
    full_hit = (doc_tokens - 1) // B * B
    lm = read_lmcache_log(inp.logs["lmcache"])
    lookups = lm[lm["kind"].eq("lookup")].reset_index(drop=True)
    lm_req = req[req["setup"].eq("lmcache")].reset_index(drop=True)
    if len(lookups) != len(lm_req) or not (lookups["total"].astype(int).values == lm_req["prompt_tokens"].values).all():
        raise RawRecordError(inp.logs["lmcache"], f"{len(lookups)} LMCache lookups do not pair one to one with the "
                             f"{len(lm_req)} LMCache requests of {inp.requests} (concurrency 1 is assumed)")
    lm_req["gpu_tokens"] = lookups["computed"].astype(int).values
    vr = docs_req[docs_req["setup"].eq("vllm") & docs_req["pass"].eq("reverse")]
    hits = vr[vr["cached_tokens"].ge(full_hit)]
    partial = vr[vr["cached_tokens"].between(1, full_hit - 1)]
    misses = vr[vr["cached_tokens"].eq(0)]
    w.add("lab.reverse.hit_docs", [int(d) for d in hits["doc"]], "count")
    w.add("lab.reverse.hit_doc_count", len(hits), "count")
    if len(partial) != 1:
        raise RawRecordError(inp.requests, f"expected one partial GPU hit in vllm/reverse, found {len(partial)}")
    w.add("lab.reverse.partial_doc", int(partial["doc"].iloc[0]), "count")
    w.add("lab.reverse.partial_time", float(partial["ttft_ms"].iloc[0]), "ms")
    w.add("lab.reverse.partial_tokens", int(partial["cached_tokens"].iloc[0]), "tokens")
    w.add("lab.reverse.vllm.hit_time", float(hits["ttft_ms"].mean()), "ms")
    w.add("lab.reverse.vllm.miss_time", float(misses["ttft_ms"].mean()), "ms")
    lr = lm_req[lm_req["phase"].eq("doc") & lm_req["pass"].eq("reverse")]
    lm_hits, lm_loads = lr[lr["gpu_tokens"].ge(full_hit)], lr[lr["gpu_tokens"].lt(full_hit) & lr["cached_tokens"].gt(lr["gpu_tokens"])]
    w.reading(R, Q, *SNAPS, inp.logs["lmcache"])
    w.add("lab.reverse.lmcache.hit_time", float(lm_hits["ttft_ms"].mean()), "ms")
    w.add("lab.reverse.lmcache.loaded_docs", len(lm_loads), "count")
    w.add("lab.reverse.lmcache.load_time_min", float(lm_loads["ttft_ms"].min()), "ms")
    w.add("lab.reverse.lmcache.load_time_max", float(lm_loads["ttft_ms"].max()), "ms")

    # ---- the load example: LMCache's retrieve lines of the second pass
    lines = lm.reset_index(drop=True)
    owner = np.cumsum(lines["kind"].eq("lookup").values) - 1  # each line belongs to the latest lookup
    lines["pass"] = lm_req["pass"].values[owner]
    second = lines[lines["kind"].eq("retrieve") & lines["pass"].eq("second")]
    if second.empty:
        raise RawRecordError(inp.logs["lmcache"], "no LMCache retrieve line in the second pass")
    ex1 = second.iloc[0]
    tokens, required = int(ex1["tokens"]), int(ex1["required"])
    if tokens % chunk:
        raise RawRecordError(inp.logs["lmcache"], f"retrieved {tokens} tokens is not whole {chunk}-token chunks", line=int(ex1["line"]))
    compute_ms = float(p50["vllm", "second"]) * tokens / doc_tokens
    w.reading(R, inp.logs["lmcache"])
    w.add("lab.load.tokens", tokens, "tokens")
    w.add("lab.load.required_tokens", required, "tokens")
    w.add("lab.load.chunks", tokens // chunk, "count")
    w.add("lab.load.computed_tokens", required - tokens, "tokens")
    w.add("lab.load.time_min", float(second["ms"].min()), "ms")
    w.add("lab.load.time_max", float(second["ms"].max()), "ms")
    w.reading(R, Q, inp.logs["lmcache"])
    w.add("lab.load.compute_time", compute_ms, "ms", note="second-pass p50 without LMCache, scaled to the loaded tokens")
    w.add("lab.load.speedup", compute_ms / float(second["ms"].max()), "x", note="against the slowest load")
    stored = lines[lines["kind"].eq("store")]
    w.reading(R, Q, inp.logs["lmcache"], MO)
    w.add("lab.cpu.kv_bytes_stored", int(stored["tokens"].sum()) * model.kv_bytes_per_token, "B")

    # ---- the simulator at the lab's sizes
    w.reading(*SHAPE)
    vllm_version = str((run.get("versions") or {}).get("vllm", ""))
    if not vllm_version:
        raise RawRecordError(inp.run, "versions.vllm is missing: the simulator needs it for vLLM's free order")
    shape = ex.LabShape(n_docs, doc_tokens, cache_tokens, B, generated=max(int(run.get("max_tokens", 1)) - 1, 0),
                        unhashed_first=frees_unhashed_first(vllm_version))
    single = ex.replay(shape)
    s2 = single[single["pass"].eq("second") & single["doc"].ge(0)]
    w.add("lab.sim.second_pass_hit_tokens", int(s2["gpu_tokens"].sum()), "tokens")
    surv = ex.survivors_after_first_pass(shape)
    w.add("lab.sim.first_pass_survivors.first", surv[0], "count")
    w.add("lab.sim.first_pass_survivors.last", surv[-1], "count")
    w.add("lab.sim.first_pass_survivors.count", len(surv), "count")
    s3 = single[single["pass"].eq("reverse") & single["doc"].ge(0)]
    sim_hits = s3[s3["gpu_tokens"].ge(full_hit)]
    sim_part = s3[s3["gpu_tokens"].between(1, full_hit - 1)]
    w.add("lab.sim.reverse.hit_docs", [int(d) for d in sim_hits["doc"]], "count")
    w.add("lab.sim.reverse.partial_doc", int(sim_part["doc"].iloc[0]) if len(sim_part) else -1, "count")
    w.add("lab.sim.reverse.partial_tokens", int(sim_part["gpu_tokens"].sum()), "tokens")
    w.add("lab.sim.reverse.gpu_tokens", int(s3["gpu_tokens"].sum()), "tokens")
    other = ex.replay(ex.LabShape(**{**shape.__dict__, "unhashed_first": not shape.unhashed_first}))
    o3 = other[other["pass"].eq("reverse") & other["doc"].ge(0)]
    w.add("lab.sim.reverse.gpu_tokens_other_order", int(o3["gpu_tokens"].sum()), "tokens",
          note="the same pass under the other free order (vLLM 0.17-0.23 append unhashed blocks, 0.24+ prepend)")
    whole = ex.replay_whole_documents(shape)
    wr = whole[whole["pass"].eq("reverse")]
    w.add("lab.sim.whole_doc.reverse.partial_docs", int(((wr["gpu_tokens"] > 0) & (wr["computed_tokens"] > 0)).sum()), "count",
          note="documents moved whole: a document is on the GPU or not")
    w.add("lab.sim.whole_doc.reverse.hit_docs", [int(d) for d in wr.loc[wr["gpu_tokens"].gt(0), "doc"]], "count")
    any_hit, full = ex.second_pass_capacity_thresholds(shape)
    w.add("lab.sim.min_capacity_any_hit", any_hit, "tokens")
    w.add("lab.sim.min_capacity_full_hit", full, "tokens")
    w.add("lab.sim.min_capacity_any_hit_docs", any_hit / doc_tokens, "x")
    w.add("lab.sim.min_capacity_full_hit_docs", full / doc_tokens, "x")
    cpu_chunks = int(cpu_limit // (chunk * model.kv_bytes_per_token))
    w.reading(*SHAPE, MO)
    two = ex.replay(shape, cpu_chunks=cpu_chunks, chunk_tokens=chunk)
    t2 = two[two["pass"].eq("second") & two["doc"].ge(0)]
    lm_full = doc_tokens // chunk * chunk
    w.add("lab.sim.cpu_chunks", cpu_chunks, "count")
    w.add("lab.sim.twotier.second.gpu_tokens", int(t2["gpu_tokens"].sum()), "tokens")
    w.add("lab.sim.twotier.second.cpu_tokens", int(t2["cpu_tokens"].sum()), "tokens")
    w.add("lab.sim.twotier.second.computed_tokens", int(t2["computed_tokens"].sum()), "tokens")
    w.add("lab.sim.twotier.second.docs_loaded_whole", int(t2["cpu_tokens"].ge(lm_full).sum()), "count")
    soe = ex.replay(shape, cpu_chunks=cpu_chunks, chunk_tokens=chunk, policy="store_on_evict")
    e2 = soe[soe["pass"].eq("second") & soe["doc"].ge(0)]
    w.add("lab.sim.store_on_evict.second.cpu_tokens", int(e2["cpu_tokens"].sum()), "tokens")
    per_doc_chunks = doc_tokens // chunk
    sweep = ex.cpu_sweep(shape, chunk, model.kv_bytes_per_token,
                         sorted({per_doc_chunks * k for k in range(1, n_docs + 2)} | {per_doc_chunks * n_docs - 1}))
    enough = sweep[sweep["cpu_tokens"].eq(sweep["cpu_tokens"].max())]
    need = int(enough["cpu_chunks"].min())
    below = sweep[sweep["cpu_chunks"].lt(need)]
    w.add("lab.sim.cpu.min_chunks_full", need, "count")
    w.add("lab.sim.cpu.min_bytes_full", need * chunk * model.kv_bytes_per_token, "B")
    w.add("lab.sim.cpu.below_full.cpu_tokens", int(below["cpu_tokens"].max()) if len(below) else 0, "tokens",
          note="largest second-pass CPU supply at any capacity below the threshold")
    best = below.loc[below["cpu_tokens"].idxmax()] if len(below) else None
    w.add("lab.sim.cpu.below_full.at_chunks", int(best["cpu_chunks"]) if best is not None else 0, "count")
    zero = below[below["cpu_tokens"].eq(0)]
    w.add("lab.sim.cpu.defeated_up_to_chunks", int(zero["cpu_chunks"].max()) if len(zero) else 0, "count",
          note="largest capacity tried at which the second pass gets nothing from the CPU tier")

    # ---- prediction beside the measurement
    w.reading(*SHAPE, MO)
    hit_cell = vr[vr["cached_tokens"].ge(full_hit)]
    costs = calibrate(hit_ms=float(hit_cell["ttft_ms"].mean()), hit_computed=doc_tokens - full_hit,
                      miss_ms=float(p50["vllm", "second"]), miss_computed=doc_tokens,
                      load_ms=float(p50["lmcache", "second"]), load_computed=doc_tokens - lm_full, load_tokens=lm_full)
    w.add("lab.predict.base", costs.base_ms, "ms")
    w.add("lab.predict.compute_per_ktok", costs.compute_ms_per_token * 1000, "ms")
    w.add("lab.predict.load_per_ktok", costs.load_ms_per_token * 1000, "ms")
    sim = pd.concat([single.assign(setup="vllm"), two.assign(setup="lmcache")])
    sim = sim[sim["doc"].ge(0)].rename(columns={"gpu_tokens": "sim_gpu_tokens", "cpu_tokens": "sim_cpu_tokens",
                                                 "computed_tokens": "sim_computed_tokens"})
    sim["predicted_ms"] = predict(sim.rename(columns={"sim_computed_tokens": "computed_tokens", "sim_cpu_tokens": "cpu_tokens"}), costs)
    table = docs_req.merge(sim.drop(columns=["tokens"]), on=["setup", "pass", "doc"], how="left", validate="one_to_one")
    table["error_ms"] = table["predicted_ms"] - table["ttft_ms"]
    w.add("lab.predict.mae", float(table["error_ms"].abs().mean()), "ms")
    for setup in SETUPS:
        for p in PASSES:
            g = table[table["setup"].eq(setup) & table["pass"].eq(p)]
            w.add(f"lab.predict.{setup}.{p}.p50", float(g["predicted_ms"].median()), "ms")
    part = table[table["setup"].eq("vllm") & table["pass"].eq("reverse") & table["doc"].eq(int(partial["doc"].iloc[0]))]
    w.add("lab.predict.partial_time", float(part["predicted_ms"].iloc[0]), "ms")
    w.add("lab.predict.partial_tokens", int(part["sim_gpu_tokens"].iloc[0]), "tokens")
    return LabTables(table, passes, sweep)
