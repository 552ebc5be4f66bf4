"""The note's production analysis, one function per step (each unit-tested on its own).

Inputs are the parsed records (kvtier.records: the Snapshot, the server log's ServerLog or
LogSummary, host metadata, headroom tests); outputs
are plain dicts of values in base units (tokens, bytes, seconds, fractions) that the script
registers as `prod.*` numbers, plus the per-restore table behind Figure 1b.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pandas as pd

from ..coldread import ColdReadModel
from ..errors import RawRecordError
from ..records import vllm as V
from ..records.geometry import PoolGeometry, pool_geometry  # noqa: F401 (re-exported)
from ..records.headroom import COLUMNS as HEADROOM_COLUMNS, read_headroom  # noqa: F401 (old import path)
from ..records.prometheus import Snapshot
from ..records.serverlog import LogSummary, ServerLog, summary_of

Log = ServerLog | LogSummary  # a log in tables (tests) or streamed to its summary (the pipeline)

GIB = 2.0**30


# ---------------------------------------------------------------- server facts

def server_facts(log: Log) -> dict[str, float | None]:
    """Startup facts: context length, GPU KV pool (tokens, bytes), model memory. The KV memory
    is the 'Available KV cache memory' line or, where the server was given it (the CPU build),
    --kv-cache-memory-bytes; a build that prints no 'Model loading took' line leaves the weights
    unknown (None)."""
    f = log.facts()
    args = f.get("args", {})
    if "kv_cache_tokens" not in f:
        raise RawRecordError(log.path, "no 'KV cache size: N tokens' startup line")
    if "kv_cache_gib" in f:
        kv_bytes = f["kv_cache_gib"] * GIB
    elif args.get("kv_cache_memory_bytes"):
        kv_bytes = float(args["kv_cache_memory_bytes"])
    else:
        raise RawRecordError(log.path, "no 'Available KV cache memory' startup line and no kv_cache_memory_bytes argument")
    max_len = f.get("max_model_len", args.get("max_model_len"))
    if max_len is None:
        raise RawRecordError(log.path, "no max_model_len in the startup lines")
    return {"context_tokens": int(max_len), "gpu_pool_tokens": int(f["kv_cache_tokens"]),
            "gpu_pool_bytes": kv_bytes, "weights_bytes": f["model_gib"] * GIB if "model_gib" in f else None,
            "gpu_pool_context_windows": int(f["kv_cache_tokens"] // int(max_len))}


# ---------------------------------------------------------------- counters

def token_sources(snap: Snapshot) -> dict[str, float]:
    """Where prompt tokens came from, and the pool's share of what the GPU cache missed."""
    by = snap.by_label(V.PROMPT_BY_SOURCE, "source")
    prompt = float(snap.value(V.PROMPT_TOTAL))
    gpu, pool, computed = (float(by[k]) for k in ("local_cache_hit", "external_kv_transfer", "local_compute"))
    missed = pool + computed
    return {"prompt": prompt, "gpu": gpu, "pool": pool, "computed": computed, "missed": missed,
            "share_gpu": gpu / prompt, "share_pool": pool / prompt, "share_computed": computed / prompt,
            "pool_share_of_misses": pool / missed if missed else math.nan}


def request_stats(snap: Snapshot, edges: tuple[float, float]) -> dict[str, float]:
    """Finished requests (all finish reasons), their mean prompt, and the shares above two sizes."""
    requests = float(snap.select(V.REQUEST_SUCCESS)["value"].sum())
    h = snap.histogram(V.REQUEST_PROMPT_TOKENS)
    return {"requests": requests, "mean_prompt": h.sum / h.count,
            "share_above_low": 1 - h.at(edges[0]) / h.count, "share_above_high": 1 - h.at(edges[1]) / h.count}


def ttft_shares(snap: Snapshot, fast_s: float, slow_s: float) -> dict[str, float]:
    h = snap.histogram(V.TTFT_SECONDS)
    return {"share_under_fast": h.at(fast_s) / h.count, "share_over_slow": 1 - h.at(slow_s) / h.count}


def store_totals(snap: Snapshot) -> dict[str, float]:
    """Store operations, bytes and time, from the counters alone."""
    return {"count": snap.value(V.STORE_COUNT), "bytes": snap.value(V.STORE_BYTES),
            "time": snap.value(V.STORE_TIME)}


def expected_store_bytes(geometry: PoolGeometry, computed: float, generated: float) -> float:
    """The KV of every computed prompt token and generated token: what 'copied as produced' stores."""
    return (computed + generated) * geometry.bytes_per_token


def store_stats(snap: Snapshot, period_s: float, geometry: PoolGeometry, computed: float, generated: float) -> dict[str, float]:
    """Store operations, bytes, time and its share of the period; bytes vs the KV of every
    computed prompt token and generated token (what 'copied as produced' predicts)."""
    tot = store_totals(snap)
    b, t = tot["bytes"], tot["time"]
    expected = expected_store_bytes(geometry, computed, generated)
    return {**tot, "share_of_period": t / period_s, "expected_bytes": expected,
            "deviation_from_expected": abs(b / expected - 1)}


def lookup_stats(snap: Snapshot, threshold_s: float) -> dict[str, float | None]:
    """Pool lookups (sync delay histogram) and deferred lookups (async delay histogram; a server
    without deferred lookups, such as 0.32, exports none: those are None)."""
    sync = snap.histogram(V.LOOKUP_SYNC)
    out: dict[str, float | None] = {"count": sync.count, "time": sync.sum,
                                    "mean_time": sync.sum / sync.count if sync.count else math.nan,
                                    "deferred_count": None, "deferred_time": None, "deferred_under": None}
    if snap.has(V.LOOKUP_ASYNC + "_count"):
        deferred = snap.histogram(V.LOOKUP_ASYNC)
        out.update(deferred_count=deferred.count, deferred_time=deferred.sum, deferred_under=deferred.at(threshold_s))
    return out


def load_stats(snap: Snapshot, pcie_bytes_per_s: float) -> dict[str, float]:
    """Restores by the counters: operations, bytes, time, bandwidth against the PCIe limit."""
    b = snap.value(V.LOAD_BYTES)
    t = snap.value(V.LOAD_TIME)
    bw = b / t if t else math.nan
    return {"count": snap.value(V.LOAD_COUNT), "bytes": b, "time": t, "bandwidth": bw,
            "share_of_pcie": bw / pcie_bytes_per_s}


def pool_stats(geometry: PoolGeometry, gpu_pool_tokens: int, stored_bytes: float, snap: Snapshot) -> dict[str, float]:
    return {"bytes": geometry.bytes, "blocks": geometry.blocks, "tokens": geometry.tokens,
            "block_tokens": geometry.block_tokens, "ratio_to_gpu_pool": geometry.tokens / gpu_pool_tokens,
            "turnover": stored_bytes / geometry.bytes, "usage_gauge": snap.value(V.CPU_CACHE_USAGE)}


# ---------------------------------------------------------------- restores from the ten-second reports

def size_restores(log: Log, geometry: PoolGeometry, extra_blocks: float) -> pd.DataFrame:
    """One row per visible restore. An interval's blocks moved = load bytes / bytes per block;
    k loads in one report share it evenly; a restore serves what it moved minus extra_blocks.
    A restore copies whole server blocks, not whole pool blocks: one that begins inside a pool
    block (the GPU still holds its first part) moves a fraction of it."""
    log = summary_of(log)
    x = log.loads
    if log.key_generation == "legacy":
        raise RawRecordError(log.path, "KV Transfer lines of vLLM <=0.21 carry no load count: restores cannot be sized "
                                       "(this needs vllm:kv_offload_load_size_count, vLLM 0.25+)")
    x = x[x["load_count"].fillna(0) > 0]
    blocks = x["load_bytes"].to_numpy(float) / geometry.bytes_per_block
    pages = x["load_bytes"].to_numpy(float) / geometry.bytes_per_server_block
    off = np.abs(pages - np.round(pages)) > 1e-6
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise RawRecordError(log.path, f"load bytes {x['load_bytes'].iloc[i]:.0f} are not a whole number of "
                                       f"{geometry.bytes_per_server_block:.0f}-byte server blocks", line=int(x["line"].iloc[i]))
    k = x["load_count"].to_numpy(int)
    rows = pd.DataFrame({
        "line": np.repeat(x["line"].to_numpy(), k),
        "time": np.repeat(x["time"].to_numpy(), k),
        "shared_by": np.repeat(k, k),
        "moved_blocks": np.repeat(blocks / k, k),
        "seconds": np.repeat(x["load_time"].to_numpy(float) / k, k),
    })
    rows["served_blocks"] = rows["moved_blocks"] - extra_blocks
    small = rows["served_blocks"] <= 0
    if small.any():
        raise RawRecordError(log.path, f"a restore moved {rows.loc[small, 'moved_blocks'].iloc[0]:g} blocks, not more than the "
                                       f"{extra_blocks:g} moved on top of what it serves", line=int(rows.loc[small, "line"].iloc[0]))
    if rows.empty:
        raise RawRecordError(log.path, "no report shows a load from the pool: there are no restores to size "
                                       "(the note's restore numbers and Figure 1b need at least one)")
    rows["tokens"] = rows["served_blocks"] * geometry.block_tokens
    rows["bytes"] = rows["moved_blocks"] * geometry.bytes_per_block
    return rows


def restore_stats(restores: pd.DataFrame, counter_count: float, counter_tokens: float, requests: float,
                  large_tokens: float, huge_tokens: float) -> dict[str, float]:
    """Visible vs counted restores, how the sized ones add up, their size distribution."""
    tok = restores["tokens"].to_numpy(float)
    big = tok >= large_tokens
    largest = restores.loc[restores["tokens"].idxmax()]
    return {
        "count": counter_count, "visible": float(len(restores)),
        "sized_share_of_counter": tok.sum() / counter_tokens,
        "share_sharing_interval": float((restores["shared_by"] > 1).mean()),
        "share_of_requests": counter_count / requests,
        "mean_tokens": counter_tokens / counter_count,
        "median_tokens": float(np.median(tok)),
        "n_at_least_large": float(big.sum()), "token_share_at_least_large": tok[big].sum() / tok.sum(),
        "n_above_huge": float((tok > huge_tokens).sum()),
        "min_blocks_moved": float(restores["moved_blocks"].min()),
        "largest_tokens": float(largest["tokens"]), "largest_bytes": float(largest["bytes"]),
        "largest_time": float(largest["seconds"]), "largest_shared_by": float(largest["shared_by"]),
    }


def coldread_stats(restores: pd.DataFrame, model: ColdReadModel) -> tuple[dict[str, float], pd.DataFrame]:
    """Modelled cold-read seconds per visible restore; total, share extrapolated, median."""
    tok = restores["tokens"].to_numpy(float)
    secs = np.asarray(model.predict(tok), float)
    extra = np.asarray(model.extrapolated(tok), bool)
    out = restores.assign(cold_read_s=secs, extrapolated=extra)
    return {"total": float(secs.sum()), "share_extrapolated": float(secs[extra].sum() / secs.sum()),
            "median_restore": float(np.median(secs)),
            "largest": float(model.predict(float(tok.max())))}, out


def hour_stats(log: Log, restores: pd.DataFrame, counter_count: float, top: int) -> dict[str, float]:
    """Clock hours with traffic (a busy report in them), restores per such hour, the share of
    restored tokens in the `top` busiest hours, most requests running at once."""
    log = summary_of(log)
    hours = len(log.busy_hours)
    by_hour = restores.groupby(restores["time"].dt.floor("h"))["tokens"].sum().sort_values(ascending=False)
    return {"with_traffic": float(hours), "restores_per_traffic_hour": counter_count / hours,
            "top_count": float(top), "top_restore_share": float(by_hour.iloc[:top].sum() / by_hour.sum()),
            "max_running": log.max_running}


def hourly_traffic(log: Log, start: datetime, end: datetime, interval_s: float) -> pd.DataFrame:
    """Tokens processed (computed prompt + generated) in each clock hour of the period, from the
    ten-second reports: the hourly shape of the traffic, which the counterfactual's synthetic
    sessions follow."""
    log = summary_of(log, interval_s)
    origin = pd.Timestamp(start.replace(tzinfo=None)).floor("h")
    n = int(np.ceil((pd.Timestamp(end.replace(tzinfo=None)) - origin) / pd.Timedelta(hours=1)))
    first = int(origin.value // 10**9 // 3600)
    per_hour = np.zeros(n)
    for hour, tokens in log.tokens_by_hour.items():
        if 0 <= hour - first < n:
            per_hour[hour - first] += tokens
    starts = [(origin + pd.Timedelta(hours=h)).isoformat() for h in range(n)]
    return pd.DataFrame({"hour": np.arange(n), "start": starts, "tokens": per_hour})


def log_coverage(log: Log, snap: Snapshot) -> dict[str, float]:
    """How much of each counter the ten-second reports show (the rest fell in lost reports)."""
    x = summary_of(log).totals
    return {"load_bytes": x["load_bytes"] / snap.value(V.LOAD_BYTES),
            "store_bytes": x["store_bytes"] / snap.value(V.STORE_BYTES),
            "loads": x["load_count"] / snap.value(V.LOAD_COUNT)}


# ---------------------------------------------------------------- headroom (Recommendations)

def headroom_stats(df: pd.DataFrame, host: str) -> dict[str, float]:
    """Pool size vs RAM left free on the production host; the pool that failed on a smaller
    /dev/shm; the pool sized too early (the smallest that started)."""
    free = df[(df["host"] == host) & df["free_ram_gib"].notna()].sort_values("free_ram_gib")
    if len(free) < 3:
        raise RawRecordError("headroom.csv", f"need three free-RAM observations on host {host}, found {len(free)}")
    tight, ok = free.iloc[0], free.iloc[1:].sort_values("pool_gib")
    failed = df[df["started"] == "no"]
    if failed.empty:
        raise RawRecordError("headroom.csv", "no failed start recorded")
    early = df[(df["started"] == "yes")].sort_values("pool_gib").iloc[0]
    out = {"tight.pool": tight["pool_gib"] * GIB, "tight.free": tight["free_ram_gib"] * GIB,
           "failed_pool": failed.iloc[0]["pool_gib"] * GIB, "shm_capacity": failed.iloc[0]["shm_total_gib"] * GIB,
           "early_pool": early["pool_gib"] * GIB}
    for i, (_, r) in enumerate(ok.iloc[:2].iterrows(), start=1):
        out[f"ok{i}.pool"] = r["pool_gib"] * GIB
        out[f"ok{i}.free"] = r["free_ram_gib"] * GIB
    return out
