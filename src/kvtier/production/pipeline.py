"""Raw records of setup C -> checked, parsed records -> the `prod.*` numbers and tidy tables.

`ingest` reads and checks every raw file (the data contract); `analyse` runs the steps of
analysis.py in the note's order and registers each number with its unit. The workflow script
only passes paths and settings in and writes what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from ..coldread import model_from_csv
from ..errors import RawRecordError
from ..numbers import NumbersWriter
from ..observation import read_host
from . import analysis as A
from . import contract
from .logsummary import LogSummary, summarize_server_log
from .plausible import check_plausible
from .correction import Correction
from .promtext import Snapshot, read_prometheus


@dataclass
class Records:
    snap: Snapshot
    log: LogSummary
    host: dict[str, Any]
    start: datetime
    end: datetime
    repairs: list[contract.Repair]
    host_path: str = ""


def ingest(metrics: str | Path, log: str | Path, host: str | Path, settings: dict[str, Any]) -> Records:
    """Parse and check the snapshot, the log and the host metadata against each other.

    The log is streamed (bounded memory) with the data contract on every chunk; its reports
    may not add up to more than the counters, it must come from the counters' single server
    run and engines, and the counters' units must give physically possible rates."""
    meta, start, end = read_host(host)
    snap = read_prometheus(metrics)
    contract.check_snapshot(snap)
    contract.check_period(snap, start)
    year = int(meta.get("observation", {}).get("log_year", start.year))
    interval = float(meta.get("server", {}).get("stats_interval_s", 10.0))  # vLLM's default
    server = summarize_server_log(log, year, interval, limits=contract.counter_limits(snap))
    contract.check_runs(server, snap)
    contract.check_engines(server, snap)
    check_plausible(snap, A.pool_geometry(snap, server), float(settings["min_transfer_bytes_per_s"]),
                    float(settings["pcie_gen5_x16_bytes_per_s"]))
    first, last = server.first_time, server.last_time
    if first < pd.Timestamp(start.replace(tzinfo=None)) - pd.Timedelta(minutes=5) or last > pd.Timestamp(end.replace(tzinfo=None)):
        raise RawRecordError(log, f"reports run from {first} to {last}, outside the observation period {start}..{end} "
                                  "(wrong log, or wrong observation.log_year)")
    return Records(snap, server, meta, start, end, server.repairs, str(host))


def analyse(rec: Records, coldreads: str | Path, settings: dict[str, Any], headroom: str | Path,
            w: NumbersWriter, correction: Correction | None = None) -> dict[str, pd.DataFrame]:
    """Every production number of the note, registered under prod.*; returns the tidy tables.
    `correction` (blocks a restore moves beyond those it serves) comes from the eviction test
    on the same server; without it, settings["restore_extra_blocks"] must give it."""
    snap, log = rec.snap, rec.log
    if correction is None:
        correction = Correction(int(settings["restore_extra_blocks"]), None, True, 0, ())
    # each group of numbers names the raw files it reads (w.reading), for per-number provenance
    M, L, H, E = snap.path, log.path, rec.host_path or snap.path, correction.files
    w.reading(M, H)
    period = rec.end.timestamp() - snap.created()
    w.add("prod.period", period, "s", note="from the counters' _created time to the snapshot (observation.end)")

    facts = A.server_facts(log)
    geo = A.pool_geometry(snap, log)
    w.reading(L)
    w.add("prod.context_tokens", facts["context_tokens"], "tokens")
    w.add("prod.gpu_pool.tokens", facts["gpu_pool_tokens"], "tokens")
    w.add("prod.gpu_pool.bytes", facts["gpu_pool_bytes"], "B")
    w.add("prod.gpu_pool.context_windows", facts["gpu_pool_context_windows"], "count")
    w.add("prod.host.weights", facts["weights_bytes"], "B")
    w.reading(H)
    host = rec.host.get("host", {})
    model = rec.host.get("model", {})
    try:
        w.add("prod.host.vcpus", int(host["vcpus"]), "count")
        w.add("prod.host.ram", float(host["ram_gib"]) * A.GIB, "B")
        w.add("prod.host.expert_weight_bits", int(model["expert_weight_bits"]), "count")
        w.add("prod.host.pinned_embedding", float(model["pinned_embedding_gib"]) * A.GIB, "B")
    except KeyError as e:
        raise RawRecordError("host.yaml", f"missing host fact {e}") from None

    w.reading(M)
    src = A.token_sources(snap)
    for k in ("prompt", "gpu", "pool", "computed", "missed"):
        w.add(f"prod.tokens.{k}", src[k], "tokens")
    for k in ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses"):
        w.add(f"prod.tokens.{k}", src[k], "fraction")

    low, high = settings["prompt_edges"]
    req = A.request_stats(snap, (low, high))
    w.add("prod.requests", req["requests"], "requests")
    w.add("prod.prompt.mean_tokens", req["mean_prompt"], "tokens")
    w.add("prod.prompt.share_above_200k", req["share_above_low"], "fraction", note=f"above {low:g} tokens")
    w.add("prod.prompt.share_above_500k", req["share_above_high"], "fraction", note=f"above {high:g} tokens")
    w.reading()
    w.add("prod.prompt.low_edge", low, "tokens")
    w.add("prod.prompt.high_edge", high, "tokens")

    w.reading(M)
    tt = A.ttft_shares(snap, settings["ttft_fast_s"], settings["ttft_slow_s"])
    w.add("prod.ttft.share_under_1s", tt["share_under_fast"], "fraction")
    w.add("prod.ttft.share_over_20s", tt["share_over_slow"], "fraction")
    w.reading()
    w.add("prod.ttft.fast_edge", settings["ttft_fast_s"], "s")
    w.add("prod.ttft.slow_edge", settings["ttft_slow_s"], "s")

    generated = snap.value("vllm:generation_tokens_total")
    st = A.store_stats(snap, period, geo, src["computed"], generated)
    w.reading(M)
    w.add("prod.tokens.generated", generated, "tokens")
    w.add("prod.stores.count", st["count"], "count")
    w.add("prod.stores.bytes", st["bytes"], "B")
    w.add("prod.stores.time", st["time"], "s")
    w.reading(M, H)
    w.add("prod.stores.share_of_period", st["share_of_period"], "fraction")
    w.reading(M, L)
    w.add("prod.stores.expected_bytes", st["expected_bytes"], "B")
    w.add("prod.stores.deviation_from_expected", st["deviation_from_expected"], "fraction")

    w.reading(M)
    lk = A.lookup_stats(snap, settings["deferred_threshold_s"])
    w.add("prod.lookups.count", lk["count"], "count")
    w.add("prod.lookups.time", lk["time"], "s")
    w.add("prod.lookups.mean_time", lk["mean_time"], "s")
    w.add("prod.deferred.count", lk["deferred_count"], "count")
    w.add("prod.deferred.time", lk["deferred_time"], "s")
    w.add("prod.deferred.under_threshold", lk["deferred_under"], "count")
    w.reading()
    w.add("prod.deferred.threshold", settings["deferred_threshold_s"], "s")
    w.reading(M)

    ld = A.load_stats(snap, settings["pcie_gen5_x16_bytes_per_s"])
    w.add("prod.restores.count", ld["count"], "count")
    w.add("prod.restores.bytes", ld["bytes"], "B")
    w.add("prod.restores.transfer_time", ld["time"], "s")
    w.add("prod.restores.bandwidth", ld["bandwidth"], "B/s")
    w.add("prod.restores.share_of_pcie", ld["share_of_pcie"], "fraction")
    w.reading()
    w.add("prod.restores.pcie_limit", settings["pcie_gen5_x16_bytes_per_s"], "B/s",
          note="PCIe 5.0 x16, one direction (config: production.pcie_gen5_x16_bytes_per_s)")

    pool = A.pool_stats(geo, facts["gpu_pool_tokens"], st["bytes"], snap)
    w.reading(M, L)
    w.add("prod.pool.bytes", pool["bytes"], "B")
    w.add("prod.pool.blocks", pool["blocks"], "blocks")
    w.add("prod.pool.tokens", pool["tokens"], "tokens")
    w.add("prod.pool.block_tokens", pool["block_tokens"], "tokens")
    w.add("prod.pool.block_bytes", geo.bytes_per_block, "B")
    w.add("prod.pool.ratio_to_gpu_pool", pool["ratio_to_gpu_pool"], "x")
    w.add("prod.pool.turnover", pool["turnover"], "x")
    w.add("prod.pool.usage_gauge", pool["usage_gauge"], "fraction")

    extra = correction.blocks
    restores = A.size_restores(log, geo, extra)
    rs = A.restore_stats(restores, ld["count"], src["pool"], req["requests"], settings["large_restore_tokens"],
                         settings["huge_restore_tokens"])
    w.reading(*E)
    w.add("prod.restores.extra_blocks", extra, "blocks", note="set in config" if correction.overridden else
          f"derived from {correction.restores} restore(s) of the eviction test on this setup")
    w.add("prod.restores.extra_blocks_overridden", int(correction.overridden), "count",
          inputs=[] if correction.overridden else list(correction.files))
    if correction.derived is not None:
        w.add("prod.restores.extra_blocks_derived", correction.derived, "blocks", inputs=list(correction.files))
    w.reading(M, L, *E)
    w.add("prod.restores.visible", rs["visible"], "count")
    w.add("prod.restores.unseen", rs["count"] - rs["visible"], "count")
    w.add("prod.restores.sized_share_of_counter", rs["sized_share_of_counter"], "fraction")
    w.add("prod.restores.share_sharing_interval", rs["share_sharing_interval"], "fraction")
    w.add("prod.restores.share_of_requests", rs["share_of_requests"], "fraction")
    w.add("prod.restores.mean_tokens", rs["mean_tokens"], "tokens")
    w.add("prod.restores.median_tokens", rs["median_tokens"], "tokens")
    w.reading()
    w.add("prod.restores.large_edge", settings["large_restore_tokens"], "tokens")
    w.add("prod.restores.huge_edge", settings["huge_restore_tokens"], "tokens")
    w.reading(M, L, *E)
    w.add("prod.restores.n_at_least_100k", rs["n_at_least_large"], "count")
    w.add("prod.restores.token_share_at_least_100k", rs["token_share_at_least_large"], "fraction")
    w.add("prod.restores.n_above_500k", rs["n_above_huge"], "count")
    w.add("prod.restores.min_blocks_moved", rs["min_blocks_moved"], "blocks")
    w.add("prod.restores.largest.tokens", rs["largest_tokens"], "tokens")
    w.add("prod.restores.largest.bytes", rs["largest_bytes"], "B")
    w.add("prod.restores.largest.time", rs["largest_time"], "s")
    w.add("prod.restores.largest.bandwidth", rs["largest_bytes"] / rs["largest_time"], "B/s")

    model = model_from_csv(coldreads)
    cr, restores = A.coldread_stats(restores, model)
    w.reading(M, L, str(coldreads), *E)
    w.add("prod.coldread.total", cr["total"], "s")
    w.add("prod.coldread.share_extrapolated", cr["share_extrapolated"], "fraction")
    w.add("prod.coldread.median_restore", cr["median_restore"], "s")
    w.add("prod.restores.largest.cold_read", cr["largest"], "s")

    hr = A.hour_stats(log, restores, ld["count"], int(settings["top_hours"]))
    w.reading(L)
    w.add("prod.hours.with_traffic", hr["with_traffic"], "count")
    w.add("prod.hours.in_period", period / 3600, "count")
    w.reading(L, M)
    w.add("prod.restores.per_traffic_hour", hr["restores_per_traffic_hour"], "count")
    w.reading()
    w.add("prod.hours.top_count", hr["top_count"], "count")
    w.reading(M, L, *E)
    w.add("prod.hours.top_restore_share", hr["top_restore_share"], "fraction")
    w.reading(L)
    w.add("prod.max_running", hr["max_running"], "requests")

    cov = A.log_coverage(log, snap)
    w.reading(L, M)
    w.add("prod.contract.log_load_share", cov["load_bytes"], "fraction")
    w.add("prod.contract.log_store_share", cov["store_bytes"], "fraction")
    w.reading(L)
    w.add("prod.contract.repairs", len(rec.repairs), "count")
    w.add("prod.contract.missing_seconds", sum(r.seconds for r in rec.repairs), "s")
    w.add("prod.contract.segments", len(log.segments), "count")

    hd = A.headroom_stats(A.read_headroom(str(headroom)), str(rec.host.get("setup", "C")))
    w.reading(str(headroom), H)
    for k in ("tight.pool", "tight.free", "ok1.pool", "ok1.free", "ok2.pool", "ok2.free"):
        w.add(f"prod.headroom.{k}", hd[k], "B")
    w.add("prod.shm.failed_pool", hd["failed_pool"], "B")
    w.add("prod.shm.capacity", hd["shm_capacity"], "B")
    w.add("prod.shm.early_pool", hd["early_pool"], "B")

    interval = float(rec.host.get("server", {}).get("stats_interval_s", 10.0))  # vLLM's default
    return {"restores": restores, "repairs": contract.repairs_frame(rec.repairs),
            "hours": A.hourly_traffic(log, rec.start, rec.end, interval)}
