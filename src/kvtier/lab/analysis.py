"""The lab's numbers: measured table, ratios, pass times, token splits, the load example,
the KV-size arithmetic, the simulator's experiments and its prediction beside the measurement.

`analyse(paths, writer)` registers every number under `lab.` and returns the tidy tables the
figure and the page use. Setup names in the records: 'vllm' (vLLM alone), 'lmcache'. The run is
read by kvtier.records.labrun; every value is computed through `T = writer.compute`, so a number
names the files its computation read (kvtier.records.touch), with no list written beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..numbers import NumbersWriter
from ..records.labrun import PASSES, LabRun, read_lab_run
from ..records.touch import sources_of, wrap
from ..sim import frees_unhashed_first
from . import experiments as ex
from .model import read_model
from .predict import calibrate, predict

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

    @property
    def root(self) -> Path:
        """The run's folder; the other paths must be where the layout puts them (records.labwriter)."""
        root = Path(self.run).parent
        if self != LabInputs.under(root, self.model) and _posix(self) != _posix(LabInputs.under(root, self.model)):
            raise ValueError(f"the lab's inputs are not one run folder's ({root}): {self}")
        return root


def _posix(inp: LabInputs) -> tuple:
    p = lambda x: Path(x).as_posix()  # noqa: E731
    return (p(inp.run), p(inp.requests), {k: p(v) for k, v in inp.logs.items()}, {k: p(v) for k, v in inp.metrics.items()})


@dataclass
class LabTables:
    requests: pd.DataFrame
    passes: pd.DataFrame
    cpu_sweep: pd.DataFrame
    extra: dict = field(default_factory=dict)


def _int(x: Any) -> Any:
    """int(x), carrying the files x carries."""
    return wrap(int(x), sources_of(x))


def _only(values: pd.Series | list, what: str, path: str) -> int:
    u = sorted(set(int(v) for v in values))
    if len(u) != 1:
        raise RawRecordError(path, f"{what} differs between records: {u}")
    return u[0]


# ---------------------------------------------------------------- computations (each read through T)

def _ttft_cells(run: LabRun) -> dict[str, float]:
    """Per setup and pass of the document requests: median and mean TTFT, and the pass's span."""
    docs = run.requests
    docs = docs[docs["phase"].eq("doc")]
    out = {}
    for (setup, p), g in docs.groupby(["setup", "pass"]):
        out[f"{setup}.{p}.p50"] = float(g["ttft_ms"].median())
        out[f"{setup}.{p}.mean"] = float(g["ttft_ms"].mean())
        out[f"{setup}.{p}.span"] = float((g["start_s"] + g["e2e_ms"] / 1000).max() - g["start_s"].min())
    cell = docs.groupby(["setup", "pass"])["ttft_ms"]  # the ratios and the costs from the grouped statistics
    for (setup, p), v in cell.median().items():
        out[f"{setup}.{p}.cell_p50"] = float(v)
    for (setup, p), v in cell.mean().items():
        out[f"{setup}.{p}.cell_mean"] = float(v)
    return out


def _check_tokens(run: LabRun) -> int:
    req = run.requests
    check = req.loc[req["phase"].eq("check"), "prompt_tokens"]
    return _only(check, "check prompt length", run.requests_path) if len(check) else 0


def _lmcache_requests(run: LabRun) -> pd.DataFrame:
    """LMCache's requests, each with the tokens the GPU held (its lookup line, paired in order)."""
    lm = run.setup("lmcache").lmcache_lines
    lookups = lm[lm["kind"].eq("lookup")].reset_index(drop=True)
    req = run.requests
    lm_req = req[req["setup"].eq("lmcache")].reset_index(drop=True)
    if len(lookups) != len(lm_req) or not (lookups["total"].astype(int).values == lm_req["prompt_tokens"].values).all():
        raise RawRecordError(run.setup("lmcache").log, f"{len(lookups)} LMCache lookups do not pair one to one with the "
                             f"{len(lm_req)} LMCache requests of {run.requests_path} (concurrency 1 is assumed)")
    lm_req["gpu_tokens"] = lookups["computed"].astype(int).values
    return lm_req


def _vllm_reverse(run: LabRun, full_hit: int) -> dict[str, Any]:
    """vLLM alone, reverse pass: which documents hit whole, the one partial hit, their times."""
    req = run.requests
    vr = req[req["phase"].eq("doc") & req["setup"].eq("vllm") & req["pass"].eq("reverse")]
    hits = vr[vr["cached_tokens"].ge(full_hit)]
    partial = vr[vr["cached_tokens"].between(1, full_hit - 1)]
    misses = vr[vr["cached_tokens"].eq(0)]
    if len(partial) != 1:
        raise RawRecordError(run.requests_path, f"expected one partial GPU hit in vllm/reverse, found {len(partial)}")
    return {"hit_docs": [int(d) for d in hits["doc"]], "hit_doc_count": len(hits), "partial_doc": int(partial["doc"].iloc[0]),
            "partial_time": float(partial["ttft_ms"].iloc[0]), "partial_tokens": int(partial["cached_tokens"].iloc[0]),
            "hit_time": float(hits["ttft_ms"].mean()), "miss_time": float(misses["ttft_ms"].mean())}


def _lmcache_reverse(run: LabRun, full_hit: int) -> dict[str, Any]:
    """With LMCache, reverse pass: GPU hits (by its lookup lines) and the documents it loaded."""
    lm_req = _lmcache_requests(run)
    lr = lm_req[lm_req["phase"].eq("doc") & lm_req["pass"].eq("reverse")]
    hits, loads = lr[lr["gpu_tokens"].ge(full_hit)], lr[lr["gpu_tokens"].lt(full_hit) & lr["cached_tokens"].gt(lr["gpu_tokens"])]
    return {"hit_time": float(hits["ttft_ms"].mean()), "loaded_docs": len(loads),
            "load_time_min": float(loads["ttft_ms"].min()), "load_time_max": float(loads["ttft_ms"].max())}


def _load_example(run: LabRun, chunk: int) -> dict[str, Any]:
    """LMCache's retrieve lines of the second pass (each line belongs to the latest lookup,
    whose request gives its pass): the first one's split, and the range of their times."""
    setup = run.setup("lmcache")
    lines = setup.lmcache_lines.reset_index(drop=True)
    owner = np.cumsum(lines["kind"].eq("lookup").values) - 1
    lines["pass"] = _lmcache_requests(run)["pass"].values[owner]
    second = lines[lines["kind"].eq("retrieve") & lines["pass"].eq("second")]
    if second.empty:
        raise RawRecordError(setup.log, "no LMCache retrieve line in the second pass")
    ex1 = second.iloc[0]
    tokens, required = int(ex1["tokens"]), int(ex1["required"])
    if tokens % chunk:
        raise RawRecordError(setup.log, f"retrieved {tokens} tokens is not whole {chunk}-token chunks", line=int(ex1["line"]))
    return {"tokens": tokens, "required_tokens": required, "chunks": tokens // chunk, "computed_tokens": required - tokens,
            "time_min": float(second["ms"].min()), "time_max": float(second["ms"].max())}


def _stored_tokens(run: LabRun) -> int:
    lines = run.setup("lmcache").lmcache_lines
    return int(lines.loc[lines["kind"].eq("store"), "tokens"].sum())


def _pass_sum(df: pd.DataFrame, p: str, col: str) -> int:
    return int(df.loc[df["pass"].eq(p) & df["doc"].ge(0), col].sum())


def _single_tier(shape: ex.LabShape, full_hit: int) -> tuple[dict[str, Any], pd.DataFrame]:
    """The block simulator without a CPU tier: the second pass's hits, the reverse pass's split."""
    single = ex.replay(shape)
    surv = ex.survivors_after_first_pass(shape)
    s3 = single[single["pass"].eq("reverse") & single["doc"].ge(0)]
    sim_hits, sim_part = s3[s3["gpu_tokens"].ge(full_hit)], s3[s3["gpu_tokens"].between(1, full_hit - 1)]
    other = ex.replay(replace(shape, unhashed_first=not shape.unhashed_first))
    return {"second_pass_hit_tokens": _pass_sum(single, "second", "gpu_tokens"),
            "first_pass_survivors.first": surv[0], "first_pass_survivors.last": surv[-1],
            "first_pass_survivors.count": len(surv),
            "reverse.hit_docs": [int(d) for d in sim_hits["doc"]],
            "reverse.partial_doc": int(sim_part["doc"].iloc[0]) if len(sim_part) else -1,
            "reverse.partial_tokens": int(sim_part["gpu_tokens"].sum()), "reverse.gpu_tokens": int(s3["gpu_tokens"].sum()),
            "reverse.gpu_tokens_other_order": _pass_sum(other, "reverse", "gpu_tokens")}, single


def _whole_documents(shape: ex.LabShape) -> dict[str, Any]:
    """The lab's own simulator (a document on the GPU whole or not)."""
    wr = ex.replay_whole_documents(shape)
    wr = wr[wr["pass"].eq("reverse")]
    return {"partial_docs": int(((wr["gpu_tokens"] > 0) & (wr["computed_tokens"] > 0)).sum()),
            "hit_docs": [int(d) for d in wr.loc[wr["gpu_tokens"].gt(0), "doc"]]}


def _two_tier(shape: ex.LabShape, cpu_chunks: int, chunk: int) -> tuple[dict[str, Any], pd.DataFrame]:
    """The simulator with LMCache's CPU tier at its configured size: the second pass's sources."""
    two = ex.replay(shape, cpu_chunks=int(cpu_chunks), chunk_tokens=int(chunk))
    t2 = two[two["pass"].eq("second") & two["doc"].ge(0)]
    soe = ex.replay(shape, cpu_chunks=int(cpu_chunks), chunk_tokens=int(chunk), policy="store_on_evict")
    return {"gpu_tokens": int(t2["gpu_tokens"].sum()), "cpu_tokens": int(t2["cpu_tokens"].sum()),
            "computed_tokens": int(t2["computed_tokens"].sum()),
            "docs_loaded_whole": int(t2["cpu_tokens"].ge(shape.doc_tokens // chunk * chunk).sum()),
            "store_on_evict_cpu_tokens": _pass_sum(soe, "second", "cpu_tokens")}, two


def _cpu_sweep(shape: ex.LabShape, chunk: int, kv_bytes_per_token: int) -> tuple[dict[str, int], pd.DataFrame]:
    """Second-pass CPU supply as the tier shrinks: the smallest that serves it whole, what below it gives."""
    per_doc = shape.doc_tokens // int(chunk)
    sweep = ex.cpu_sweep(shape, int(chunk), int(kv_bytes_per_token),
                         sorted({per_doc * k for k in range(1, shape.docs + 2)} | {per_doc * shape.docs - 1}))
    enough = sweep[sweep["cpu_tokens"].eq(sweep["cpu_tokens"].max())]
    need = int(enough["cpu_chunks"].min())
    below = sweep[sweep["cpu_chunks"].lt(need)]
    best = below.loc[below["cpu_tokens"].idxmax()] if len(below) else None
    zero = below[below["cpu_tokens"].eq(0)]
    return {"min_chunks_full": need, "below_full.cpu_tokens": int(below["cpu_tokens"].max()) if len(below) else 0,
            "below_full.at_chunks": int(best["cpu_chunks"]) if best is not None else 0,
            "defeated_up_to_chunks": int(zero["cpu_chunks"].max()) if len(zero) else 0}, sweep


def _predicted(run: LabRun, sim: pd.DataFrame, costs: Any, setup: str) -> tuple[dict[str, float], pd.DataFrame]:
    """One setup's document requests, each TTFT priced from the simulator's outcome beside the measured one."""
    req = run.requests
    docs_req = req[req["phase"].eq("doc") & req["setup"].eq(setup)]
    docs_req = docs_req.assign(_order=docs_req.index)  # its row in requests.csv
    sim = sim[sim["doc"].ge(0)].assign(setup=setup).rename(columns={"gpu_tokens": "sim_gpu_tokens", "cpu_tokens": "sim_cpu_tokens",
                                                                    "computed_tokens": "sim_computed_tokens"})
    sim["predicted_ms"] = predict(sim.rename(columns={"sim_computed_tokens": "computed_tokens", "sim_cpu_tokens": "cpu_tokens"}), costs)
    table = docs_req.merge(sim.drop(columns=["tokens"]), on=["setup", "pass", "doc"], how="left", validate="one_to_one")
    table["error_ms"] = table["predicted_ms"] - table["ttft_ms"]
    return {p: float(table.loc[table["pass"].eq(p), "predicted_ms"].median()) for p in PASSES}, table


def _partial(table: pd.DataFrame, doc: int) -> dict[str, Any]:
    """The prediction of the reverse pass's partial GPU hit."""
    part = table[table["pass"].eq("reverse") & table["doc"].eq(int(doc))]
    return {"time": float(part["predicted_ms"].iloc[0]), "tokens": int(part["sim_gpu_tokens"].iloc[0])}


def _requests_table(*tables: pd.DataFrame) -> pd.DataFrame:
    """The setups' predicted requests in the order requests.csv lists them."""
    return pd.concat(tables, ignore_index=True).sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)


# ---------------------------------------------------------------- the numbers

def analyse(inp: LabInputs, w: NumbersWriter) -> LabTables:
    run = read_lab_run(inp.root)
    model = read_model(inp.model)
    T = w.compute  # a value computed through T names the files the call read, and those its traced arguments carry

    # ---- setup
    cache_tokens = T(lambda: _only([run.setup(s).kv_cache_tokens for s in SETUPS], "GPU KV cache size", run.setup("vllm").log))
    B = T(lambda: _only([run.setup(s).block_tokens for s in SETUPS], "block size", run.setup("vllm").folder / "metrics"))
    doc_tokens, n_docs = T(lambda: run.doc_tokens), T(lambda: run.documents)
    total = n_docs * doc_tokens
    chunk = T(lambda: int(run.setup_env("lmcache").get("LMCACHE_CHUNK_SIZE", 256)))
    cpu_limit = T(lambda: float(run.setup_env("lmcache").get("LMCACHE_MAX_LOCAL_CPU_SIZE", 5.0)) * GiB)  # LMCache sizes its pool in GiB
    kv = T(lambda: model.kv_bytes_per_token)
    w.add("lab.setup.gpu_cache_tokens", cache_tokens, "tokens")
    w.add("lab.setup.block_tokens", B, "tokens")
    w.add("lab.setup.doc_tokens", doc_tokens, "tokens")
    w.add("lab.setup.docs", n_docs, "count")
    w.add("lab.setup.total_tokens", total, "tokens")
    w.add("lab.setup.docs_that_fit", cache_tokens / doc_tokens, "x")
    w.add("lab.setup.overflow_ratio", total / cache_tokens, "x")
    w.add("lab.setup.concurrency", T(lambda: run.concurrency), "count")
    w.add("lab.setup.model_params", T(lambda: model.parameters), "count")
    w.add("lab.setup.check_tokens", T(_check_tokens, run), "tokens")
    max_tokens = T(lambda: run.max_tokens)
    w.add("lab.setup.max_tokens", max_tokens, "tokens")
    w.add("lab.load.chunk_tokens", chunk, "tokens")
    w.add("lab.cpu.limit", cpu_limit, "B")
    w.add("lab.cpu.kv_bytes_per_token", kv, "B")
    w.add("lab.cpu.kv_bytes_all_docs", total * kv, "B")

    # ---- measured TTFT table, ratios, pass times (requests.csv)
    cells = T(_ttft_cells, run)
    for setup in SETUPS:
        for p in PASSES:
            w.add(f"lab.ttft.{setup}.{p}.p50", cells[f"{setup}.{p}.p50"], "ms")
            w.add(f"lab.ttft.{setup}.{p}.mean", cells[f"{setup}.{p}.mean"], "ms")
            w.add(f"lab.pass_time.{setup}.{p}", cells[f"{setup}.{p}.span"], "s")
    w.add("lab.ratio.second.p50", cells["vllm.second.cell_p50"] / cells["lmcache.second.cell_p50"], "x")
    w.add("lab.ratio.second.mean", cells["vllm.second.cell_mean"] / cells["lmcache.second.cell_mean"], "x")
    w.add("lab.first_read_slowdown", cells["lmcache.first.cell_p50"] / cells["vllm.first.cell_p50"] - 1, "fraction")

    # ---- metrics per pass (the two snapshots around each pass)
    for s in SETUPS:
        for p in PASSES:
            w.add(f"lab.measured.{s}.{p}.prefix_cache_hits", T(lambda: int(run.setup(s).pass_counters(p)["prefix_hits"])), "tokens")
    rev = T(lambda: {k: int(v) for k, v in run.setup("lmcache").pass_counters("reverse").items()})
    w.add("lab.reverse.gpu_resolved_tokens", rev["prefix_hits"], "tokens")
    w.add("lab.reverse.lmcache_queried_tokens", rev["external_queries"], "tokens")
    w.add("lab.reverse.total_tokens", rev["prefix_queries"], "tokens")
    w.add("lab.reverse.lmcache_loaded_tokens", rev["external_hits"], "tokens")
    passes = pd.DataFrame([m.__dict__ for s in SETUPS for m in run.setup(s).pass_metrics()]).rename(columns={"pass_": "pass"})

    # ---- the reverse pass per request: which documents hit where
    full_hit = (doc_tokens - 1) // B * B
    vr = T(_vllm_reverse, run, full_hit)
    for k in ("hit_docs", "hit_doc_count", "partial_doc"):
        w.add(f"lab.reverse.{k}", vr[k], "count")
    w.add("lab.reverse.partial_time", vr["partial_time"], "ms")
    w.add("lab.reverse.partial_tokens", vr["partial_tokens"], "tokens")
    w.add("lab.reverse.vllm.hit_time", vr["hit_time"], "ms")
    w.add("lab.reverse.vllm.miss_time", vr["miss_time"], "ms")
    lr = T(_lmcache_reverse, run, full_hit)
    w.add("lab.reverse.lmcache.hit_time", lr["hit_time"], "ms")
    w.add("lab.reverse.lmcache.loaded_docs", lr["loaded_docs"], "count")
    w.add("lab.reverse.lmcache.load_time_min", lr["load_time_min"], "ms")
    w.add("lab.reverse.lmcache.load_time_max", lr["load_time_max"], "ms")

    # ---- the load example: LMCache's retrieve lines of the second pass
    ld = T(_load_example, run, chunk)
    for k, unit in (("tokens", "tokens"), ("required_tokens", "tokens"), ("chunks", "count"), ("computed_tokens", "tokens"),
                    ("time_min", "ms"), ("time_max", "ms")):
        w.add(f"lab.load.{k}", ld[k], unit)
    compute_ms = cells["vllm.second.cell_p50"] * ld["tokens"] / doc_tokens
    w.add("lab.load.compute_time", compute_ms, "ms", note="second-pass p50 without LMCache, scaled to the loaded tokens")
    w.add("lab.load.speedup", compute_ms / ld["time_max"], "x", note="against the slowest load")
    w.add("lab.cpu.kv_bytes_stored", T(_stored_tokens, run) * kv, "B")

    # ---- the simulator at the lab's sizes: each shape carries the files its sizes came from
    def shape_of(docs: int, tokens: int, cache: int, block: int, answer: int) -> ex.LabShape:
        return ex.LabShape(int(docs), int(tokens), int(cache), int(block), generated=max(int(answer) - 1, 0),
                           unhashed_first=frees_unhashed_first(run.vllm_version))

    shape = T(shape_of, n_docs, doc_tokens, cache_tokens, B, max_tokens)
    sim, single = T(_single_tier, shape, full_hit)
    for k in sim:
        unit = "tokens" if k.endswith("tokens") or k.endswith("tokens_other_order") else "count"
        note = "the same pass under the other free order (vLLM 0.17-0.23 append unhashed blocks, 0.24+ prepend)" \
            if k == "reverse.gpu_tokens_other_order" else ""
        w.add(f"lab.sim.{k}", sim[k], unit, note=note)
    # the whole-document simulator counts documents, not blocks, with no answer or free order
    whole = T(_whole_documents, T(lambda d, t, c: ex.LabShape(int(d), int(t), int(c), int(t)), n_docs, doc_tokens, cache_tokens))
    w.add("lab.sim.whole_doc.reverse.partial_docs", whole["partial_docs"], "count",
          note="documents moved whole: a document is on the GPU or not")
    w.add("lab.sim.whole_doc.reverse.hit_docs", whole["hit_docs"], "count")
    # the capacity thresholds search over the KV cache's size: the logged one is not theirs
    searched = T(shape_of, n_docs, doc_tokens, 0, B, max_tokens)
    any_hit, full = T(ex.second_pass_capacity_thresholds, searched)
    w.add("lab.sim.min_capacity_any_hit", any_hit, "tokens")
    w.add("lab.sim.min_capacity_full_hit", full, "tokens")
    w.add("lab.sim.min_capacity_any_hit_docs", any_hit / doc_tokens, "x")
    w.add("lab.sim.min_capacity_full_hit_docs", full / doc_tokens, "x")
    cpu_chunks = _int(cpu_limit // (chunk * kv))
    tt, two = T(_two_tier, shape, cpu_chunks, chunk)
    w.add("lab.sim.cpu_chunks", cpu_chunks, "count")
    for k in ("gpu_tokens", "cpu_tokens", "computed_tokens"):
        w.add(f"lab.sim.twotier.second.{k}", tt[k], "tokens")
    w.add("lab.sim.twotier.second.docs_loaded_whole", tt["docs_loaded_whole"], "count")
    w.add("lab.sim.store_on_evict.second.cpu_tokens", tt["store_on_evict_cpu_tokens"], "tokens")
    sw, sweep = T(lambda s, c: _cpu_sweep(s, c, int(kv)), shape, chunk)  # bytes only in the table: the counts read no model
    w.add("lab.sim.cpu.min_chunks_full", sw["min_chunks_full"], "count")
    w.add("lab.sim.cpu.min_bytes_full", sw["min_chunks_full"] * chunk * kv, "B")
    w.add("lab.sim.cpu.below_full.cpu_tokens", sw["below_full.cpu_tokens"], "tokens",
          note="largest second-pass CPU supply at any capacity below the threshold")
    w.add("lab.sim.cpu.below_full.at_chunks", sw["below_full.at_chunks"], "count")
    w.add("lab.sim.cpu.defeated_up_to_chunks", sw["defeated_up_to_chunks"], "count",
          note="largest capacity tried at which the second pass gets nothing from the CPU tier")

    # ---- prediction beside the measurement
    lm_full = doc_tokens // chunk * chunk
    costs = T(calibrate, hit_ms=vr["hit_time"], hit_computed=doc_tokens - full_hit, miss_ms=cells["vllm.second.cell_p50"],
              miss_computed=doc_tokens, load_ms=cells["lmcache.second.cell_p50"], load_computed=doc_tokens - lm_full, load_tokens=lm_full)
    c = wrap(asdict(costs), sources_of(costs))
    w.add("lab.predict.base", c["base_ms"], "ms")
    w.add("lab.predict.compute_per_ktok", c["compute_ms_per_token"] * 1000, "ms")
    w.add("lab.predict.load_per_ktok", c["load_ms_per_token"] * 1000, "ms")
    # each setup's prediction from its own simulation: vLLM alone's reads no CPU pool (no model)
    (pv, tv), (pl, tl) = T(_predicted, run, single, costs, "vllm"), T(_predicted, run, two, costs, "lmcache")
    table = T(_requests_table, tv, tl)
    w.add("lab.predict.mae", T(lambda t: float(t["error_ms"].abs().mean()), table), "ms")
    for setup, pr in (("vllm", pv), ("lmcache", pl)):
        for p in PASSES:
            w.add(f"lab.predict.{setup}.{p}.p50", pr[p], "ms")
    part = T(_partial, tv, vr["partial_doc"])
    w.add("lab.predict.partial_time", part["time"], "ms")
    w.add("lab.predict.partial_tokens", part["tokens"], "tokens")
    return LabTables(table, passes, sweep)
