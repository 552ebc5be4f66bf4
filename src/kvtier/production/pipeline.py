"""Raw records of one production setup -> checked, parsed records -> its numbers and tidy tables.

`ingest` reads and checks every raw file (the data contract); `analyse` runs the steps of
analysis.py in the note's order and registers each number with its unit, under the setup's
prefix (`prod.*` for setup C, `prodcpu.*` for the CPU capture: settings, not code paths). What
a setup's records do not hold (a host fact, deferred lookups, a cold-read table, headroom
tests) is not registered, and the note's sections for that setup do not use it. The workflow
script only passes paths and settings in and writes what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from ..coldread import model_from_csv
from ..numbers import NumbersWriter
from . import analysis as A
from . import groundtruth as GT
from .capture import capture_facts
from .plausible import check_plausible
from .correction import Correction
from ..records import serverlog_contract as log_contract
from ..records.prometheus_contract import read_checked_snapshot
from ..records import vllm as V
from ..records.host import host_facts, read_host_record
from ..records.prometheus import Snapshot
from ..records.serverlog import LogSummary, read_counted_log
from ..records.touch import Touching, touch

__all__ = ["Records", "analyse", "host_facts", "ingest"]


@dataclass
class Records(Touching):  # each field touches the file it came from (records.touch)
    snap: Snapshot
    log: LogSummary
    host: dict[str, Any]
    start: datetime
    end: datetime
    repairs: list[log_contract.Repair]
    host_path: str
    geometry: A.PoolGeometry  # the pool as the records give it, derived once at ingest
    interval_s: float         # the report interval (host.yaml; vLLM's default otherwise)

    def __getattribute__(self, name: str) -> Any:
        """host, start, end, interval_s: host.yaml; repairs: the server log (snap, log and
        geometry touch their own files when read)."""
        of = _RECORD_FILE.get(name)
        if of is not None:
            touch(object.__getattribute__(self, "host_path") if of == "host" else object.__getattribute__(self, "log").path)
        return object.__getattribute__(self, name)


_RECORD_FILE = {"host": "host", "start": "host", "end": "host", "interval_s": "host", "repairs": "log"}


def ingest(metrics: str | Path, log: str | Path, host: str | Path, settings: dict[str, Any]) -> Records:
    """Parse and check the snapshot, the log and the host metadata against each other.

    The log is streamed (bounded memory) with the data contract on every chunk; its reports
    may not add up to more than the counters, it must come from the counters' single server
    run and engines, and the counters' units must give physically possible rates."""
    host_rec = read_host_record(host)
    meta, start, end, interval = host_rec.data, host_rec.start, host_rec.end, host_rec.interval_s
    snap = read_checked_snapshot(metrics, start)
    server = read_counted_log(log, host_rec, snap)
    geo = A.pool_geometry(snap, server)
    check_plausible(snap, geo, float(settings["min_transfer_bytes_per_s"]), float(settings["link_max_bytes_per_s"]))
    return Records(snap, server, meta, start, end, server.repairs, str(host), geo, interval)


def analyse(rec: Records, coldreads: str | Path | None, settings: dict[str, Any], headroom: str | Path | None,
            w: NumbersWriter, correction: Correction | None = None,
            capture: tuple[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """Every production number of the note, registered under settings["numbers_prefix"]
    (default prod); returns the tidy tables. `correction` (blocks a restore moves beyond those
    it serves) comes from the eviction test on the same server; without it,
    settings["restore_extra_blocks"] must give it. No cold-read table: no modelled cold-read
    times; no headroom table: no headroom numbers. `capture` (run.yaml, client log) of a
    kvtier replay capture: its settings, and its client log checked against the counters."""
    snap, log = rec.snap, rec.log
    P = str(settings.get("numbers_prefix", "prod"))
    if correction is None:
        correction = Correction(float(settings["restore_extra_blocks"]), None, True, 0, ())
    # Provenance is read off the records (kvtier.records.touch): each value is computed through
    # T = w.compute, which notes the raw files the call read (and those its traced arguments
    # carry); a number names the files its value carries. A value from settings alone reads no
    # file: S registers it so (inputs=()).
    T = w.compute

    def S(key: str, value: object, unit: str, note: str = "") -> None:
        w.add(key, value, unit, inputs=(), note=note)
    period = T(lambda: rec.end.timestamp() - snap.created())
    w.add(f"{P}.period", period, "s", note="from the counters' _created time to the snapshot (observation.end)")

    if capture is not None:
        for k, v in T(capture_facts, capture[0], capture[1], snap).items():
            w.add(f"{P}.capture.{k}", v, {"scale": "x", "compress": "x", "max_duration": "s", "cached_tokens": "tokens"}.get(k, "count"))
    facts = T(A.server_facts, log)
    geo = rec.geometry
    w.add(f"{P}.context_tokens", facts["context_tokens"], "tokens")
    w.add(f"{P}.gpu_pool.tokens", facts["gpu_pool_tokens"], "tokens")
    w.add(f"{P}.gpu_pool.bytes", facts["gpu_pool_bytes"], "B")
    w.add(f"{P}.gpu_pool.context_windows", facts["gpu_pool_context_windows"], "count")
    if facts["weights_bytes"] is not None:
        w.add(f"{P}.host.weights", facts["weights_bytes"], "B")
    for key, value, unit in T(lambda: host_facts(rec.host, rec.host_path)):
        w.add(f"{P}.host.{key}", value, unit)

    src = T(A.token_sources, snap)
    for k in ("prompt", "gpu", "pool", "computed", "missed"):
        w.add(f"{P}.tokens.{k}", src[k], "tokens")
    for k in ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses"):
        w.add(f"{P}.tokens.{k}", src[k], "fraction")

    low, high = settings["prompt_edges"]
    req = T(A.request_stats, snap, (low, high))
    w.add(f"{P}.requests", req["requests"], "requests")
    w.add(f"{P}.prompt.mean_tokens", req["mean_prompt"], "tokens")
    w.add(f"{P}.prompt.share_above_200k", req["share_above_low"], "fraction", note=f"above {low:g} tokens")
    w.add(f"{P}.prompt.share_above_500k", req["share_above_high"], "fraction", note=f"above {high:g} tokens")
    S(f"{P}.prompt.low_edge", low, "tokens")
    S(f"{P}.prompt.high_edge", high, "tokens")

    tt = T(A.ttft_shares, snap, settings["ttft_fast_s"], settings["ttft_slow_s"])
    w.add(f"{P}.ttft.share_under_1s", tt["share_under_fast"], "fraction")
    w.add(f"{P}.ttft.share_over_20s", tt["share_over_slow"], "fraction")
    S(f"{P}.ttft.fast_edge", settings["ttft_fast_s"], "s")
    S(f"{P}.ttft.slow_edge", settings["ttft_slow_s"], "s")

    generated = T(snap.value, V.GENERATION_TOTAL)
    st = T(A.store_totals, snap)
    expected = T(A.expected_store_bytes, geo, src["computed"], generated)
    w.add(f"{P}.tokens.generated", generated, "tokens")
    w.add(f"{P}.stores.count", st["count"], "count")
    w.add(f"{P}.stores.bytes", st["bytes"], "B")
    w.add(f"{P}.stores.time", st["time"], "s")
    w.add(f"{P}.stores.share_of_period", st["time"] / period, "fraction")
    w.add(f"{P}.stores.expected_bytes", expected, "B")
    w.add(f"{P}.stores.deviation_from_expected", abs(st["bytes"] / expected - 1), "fraction")
    w.add(f"{P}.stores.share_of_expected", st["bytes"] / expected, "fraction")

    lk = T(A.lookup_stats, snap, settings["deferred_threshold_s"])
    w.add(f"{P}.lookups.count", lk["count"], "count")
    w.add(f"{P}.lookups.time", lk["time"], "s")
    w.add(f"{P}.lookups.mean_time", lk["mean_time"], "s")
    if lk["deferred_count"] is not None:  # a server with deferred lookups (0.33+)
        w.add(f"{P}.deferred.count", lk["deferred_count"], "count")
        w.add(f"{P}.deferred.time", lk["deferred_time"], "s")
        w.add(f"{P}.deferred.under_threshold", lk["deferred_under"], "count")
        S(f"{P}.deferred.threshold", settings["deferred_threshold_s"], "s")

    ld = T(A.load_stats, snap, settings["link_max_bytes_per_s"])
    w.add(f"{P}.restores.count", ld["count"], "count")
    w.add(f"{P}.restores.bytes", ld["bytes"], "B")
    w.add(f"{P}.restores.transfer_time", ld["time"], "s")
    w.add(f"{P}.restores.bandwidth", ld["bandwidth"], "B/s")
    w.add(f"{P}.restores.share_of_pcie", ld["share_of_pcie"], "fraction")
    S(f"{P}.restores.pcie_limit", settings["link_max_bytes_per_s"], "B/s",
          note=f"{settings.get('link_name', 'the host link')} (config: production.link_max_bytes_per_s)")

    pool = T(A.pool_stats, geo, facts["gpu_pool_tokens"], st["bytes"], snap)
    w.add(f"{P}.pool.bytes", pool["bytes"], "B")
    w.add(f"{P}.pool.blocks", pool["blocks"], "blocks")
    w.add(f"{P}.pool.tokens", pool["tokens"], "tokens")
    w.add(f"{P}.pool.block_tokens", pool["block_tokens"], "tokens")
    w.add(f"{P}.pool.block_bytes", T(lambda: geo.bytes_per_block), "B")
    w.add(f"{P}.pool.ratio_to_gpu_pool", pool["ratio_to_gpu_pool"], "x")
    w.add(f"{P}.pool.turnover", pool["turnover"], "x")
    w.add(f"{P}.pool.usage_gauge", pool["usage_gauge"], "fraction")

    extra = T(lambda: correction.blocks)
    restores = T(A.size_restores, log, geo, extra)
    rs = T(A.restore_stats, restores, ld["count"], src["pool"], req["requests"], settings["large_restore_tokens"],
           settings["huge_restore_tokens"])
    w.add(f"{P}.restores.extra_blocks", extra, "blocks", inputs=None if correction.files else (),  # no files: set in config
          note="set in config" if correction.overridden else
          f"derived from {correction.restores} restore(s) of the eviction test on this setup")
    w.add(f"{P}.restores.extra_blocks_overridden", int(correction.overridden), "count",
          inputs=[] if correction.overridden else list(correction.files))
    if correction.derived is not None:
        w.add(f"{P}.restores.extra_blocks_derived", correction.derived, "blocks", inputs=list(correction.files))
    w.add(f"{P}.restores.visible", rs["visible"], "count")
    w.add(f"{P}.restores.unseen", rs["count"] - rs["visible"], "count")
    w.add(f"{P}.restores.sized_share_of_counter", rs["sized_share_of_counter"], "fraction")
    w.add(f"{P}.restores.share_sharing_interval", rs["share_sharing_interval"], "fraction")
    w.add(f"{P}.restores.share_of_requests", rs["share_of_requests"], "fraction")
    w.add(f"{P}.restores.mean_tokens", rs["mean_tokens"], "tokens")
    w.add(f"{P}.restores.median_tokens", rs["median_tokens"], "tokens")
    S(f"{P}.restores.large_edge", settings["large_restore_tokens"], "tokens")
    S(f"{P}.restores.huge_edge", settings["huge_restore_tokens"], "tokens")
    w.add(f"{P}.restores.n_at_least_100k", rs["n_at_least_large"], "count")
    w.add(f"{P}.restores.token_share_at_least_100k", rs["token_share_at_least_large"], "fraction")
    w.add(f"{P}.restores.n_above_500k", rs["n_above_huge"], "count")
    w.add(f"{P}.restores.min_blocks_moved", rs["min_blocks_moved"], "blocks")
    w.add(f"{P}.restores.largest.tokens", rs["largest_tokens"], "tokens")
    w.add(f"{P}.restores.largest.bytes", rs["largest_bytes"], "B")
    w.add(f"{P}.restores.largest.time", rs["largest_time"], "s")
    w.add(f"{P}.restores.largest.bandwidth", rs["largest_bytes"] / rs["largest_time"], "B/s")

    tables: dict[str, pd.DataFrame] = {}
    if settings.get("load_jobs_logged"):  # the worker printed every load job: the method against the truth
        jobs = T(GT.load_jobs, log.path)
        matched = T(GT.match, jobs, restores, geo, log.path)
        gt = {**T(GT.compare_matched, matched, ld["count"], settings["large_restore_tokens"]),
              **T(GT.compare_jobs, jobs, geo, src["pool"], ld["count"])}
        for k, unit in (("jobs", "count"), ("share_partial_blocks", "fraction"), ("jobs_minus_counter", "count"), ("correction_measured", "blocks"),
                        ("visible_share", "fraction"), ("median_abs_error", "fraction"),
                        ("median_abs_error_shared", "fraction"), ("share_within_10pct", "fraction"),
                        ("max_abs_error", "fraction"), ("min_abs_error", "fraction"), ("median_tokens_method", "tokens"),
                        ("min_tokens_method", "tokens"), ("max_tokens_method", "tokens"),
                        ("median_tokens_true", "tokens"), ("min_tokens_true", "tokens"), ("max_tokens_true", "tokens"),
                        ("n_at_least_large_method", "count"),
                        ("n_at_least_large_true", "count"), ("largest_method", "tokens"), ("largest_true", "tokens")):
            w.add(f"{P}.method.{k}", gt[k], unit)
        tables["method"] = matched
    sized = restores  # before the cold reads join it: the hours read only what the reports give
    if coldreads:
        model = T(model_from_csv, coldreads)
        cr, restores = T(A.coldread_stats, restores, model)
        w.add(f"{P}.coldread.total", cr["total"], "s")
        w.add(f"{P}.coldread.share_extrapolated", cr["share_extrapolated"], "fraction")
        w.add(f"{P}.coldread.median_restore", cr["median_restore"], "s")
        w.add(f"{P}.restores.largest.cold_read", cr["largest"], "s")

    hours = T(lambda: len(A.summary_of(log).busy_hours))
    w.add(f"{P}.hours.with_traffic", T(lambda: float(len(A.summary_of(log).busy_hours))), "count")
    w.add(f"{P}.hours.in_period", period / 3600, "count")
    w.add(f"{P}.restores.per_traffic_hour", ld["count"] / hours, "count")
    S(f"{P}.hours.top_count", float(int(settings["top_hours"])), "count")
    w.add(f"{P}.hours.top_restore_share", T(A.hour_stats, log, sized, ld["count"], int(settings["top_hours"]))["top_restore_share"],
          "fraction")
    w.add(f"{P}.max_running", T(lambda: A.summary_of(log).max_running), "requests")

    cov = T(A.log_coverage, log, snap)
    w.add(f"{P}.contract.log_load_share", cov["load_bytes"], "fraction")
    w.add(f"{P}.contract.log_store_share", cov["store_bytes"], "fraction")
    w.add(f"{P}.contract.repairs", T(lambda: len(rec.repairs)), "count")
    w.add(f"{P}.contract.missing_seconds", T(lambda: sum(r.seconds for r in rec.repairs)), "s")
    w.add(f"{P}.contract.segments", T(lambda: len(log.segments)), "count")

    if headroom:
        hd = T(lambda: A.headroom_stats(A.read_headroom(str(headroom)), str(rec.host.get("setup", "C"))))
        for k in ("tight.pool", "tight.free", "ok1.pool", "ok1.free", "ok2.pool", "ok2.free"):
            w.add(f"{P}.headroom.{k}", hd[k], "B")
        w.add(f"{P}.shm.failed_pool", hd["failed_pool"], "B")
        w.add(f"{P}.shm.capacity", hd["shm_capacity"], "B")
        w.add(f"{P}.shm.early_pool", hd["early_pool"], "B")

    return {"restores": restores, "repairs": log_contract.repairs_frame(rec.repairs),
            "hours": A.hourly_traffic(log, rec.start, rec.end, rec.interval_s), **tables}
