"""The data contract for raw production records, checked at ingest.

A violation that would move a number is an error naming the file and the line. What can be
repaired without guessing (reports lost from the log during traffic) is repaired the one
documented way and listed, so the note's appendix can report it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from .promtext import Snapshot
from .vllmlog import ServerLog

BY_SOURCE = "vllm:prompt_tokens_by_source_total"
PROMPT_TOTAL = "vllm:prompt_tokens_total"
REQUIRED = [PROMPT_TOTAL, BY_SOURCE, "vllm:request_success_total", "vllm:generation_tokens_total",
            "vllm:request_prompt_tokens_bucket", "vllm:time_to_first_token_seconds_bucket",
            "vllm:kv_offload_load_bytes_total", "vllm:kv_offload_load_time_total", "vllm:kv_offload_load_size_count",
            "vllm:kv_offload_store_bytes_total", "vllm:kv_offload_store_time_total", "vllm:kv_offload_store_size_count",
            "vllm:kv_offload_lookup_sync_delay_seconds_count", "vllm:kv_offload_lookup_async_delay_seconds_count",
            "vllm:kv_offload_cpu_cache_usage_perc", "vllm:kv_offload_config_info"]
SOURCES = {"local_compute", "local_cache_hit", "external_kv_transfer"}


@dataclass(frozen=True)
class Repair:
    """One documented repair: which file, which lines, what was wrong and what the analysis does."""

    path: str
    first_line: int
    last_line: int
    kind: str
    seconds: float
    detail: str


def check_snapshot(snap: Snapshot) -> None:
    """Values finite and of the right sign/unit, no duplicates, required series present,
    by-source counters adding up, histograms monotone and ending at their count."""
    s = snap.samples
    bad = s[~np.isfinite(s["value"].to_numpy(float))]
    if len(bad):
        r = bad.iloc[0]
        raise RawRecordError(snap.path, f"{r['name']} is {r['value']}: a counter or gauge must be a finite number", line=int(r["line"]))
    dup = s[s.duplicated(["name", "labels"], keep=False)]
    if len(dup):
        first = dup.sort_values("line").iloc[:2]
        raise RawRecordError(snap.path, f"{first.iloc[0]['name']} with the same labels appears twice "
                                        f"(lines {int(first.iloc[0]['line'])} and {int(first.iloc[1]['line'])})",
                             line=int(first.iloc[1]["line"]))
    for name in REQUIRED:
        if not snap.has(name):
            raise RawRecordError(snap.path, f"missing metric {name} (vLLM 0.29+ with the OffloadingConnector exports it)")
    monotone = s[s["name"].str.endswith(("_total", "_count", "_sum", "_bucket")) & ~s["name"].str.contains("_created")]
    neg = monotone[monotone["value"] < 0]
    if len(neg):
        r = neg.iloc[0]
        raise RawRecordError(snap.path, f"{r['name']} is negative ({r['value']}); counters only grow", line=int(r["line"]))
    check_units(snap)
    check_sources(snap)
    for fam in sorted(set(s.loc[s["name"].str.endswith("_bucket"), "name"].str[: -len("_bucket")])):
        check_histogram(snap, fam)


def check_units(snap: Snapshot) -> None:
    """Units as the names say: *_perc gauges are fractions; bytes, tokens and event counts whole."""
    s = snap.samples
    perc = s[s["name"].str.endswith("_perc")]
    out = perc[(perc["value"] < 0) | (perc["value"] > 1)]
    if len(out):
        r = out.iloc[0]
        raise RawRecordError(snap.path, f"{r['name']} = {r['value']} but a *_perc gauge is a fraction in [0, 1]", line=int(r["line"]))
    counts = s[s["name"].str.endswith(("_bytes_total", "_bucket", "_count", "_tokens_total", "_success_total"))]
    frac = counts[np.abs(counts["value"] - np.round(counts["value"])) > 1e-6]
    if len(frac):
        r = frac.iloc[0]
        raise RawRecordError(snap.path, f"{r['name']} = {r['value']} is not a whole number of bytes/tokens/events", line=int(r["line"]))


def check_sources(snap: Snapshot) -> None:
    """All three sources present, and they add up to vllm:prompt_tokens_total (vLLM's invariant)."""
    by = snap.by_label(BY_SOURCE, "source")
    missing = SOURCES - set(by.index)
    if missing:
        raise RawRecordError(snap.path, f"{BY_SOURCE} lacks source(s) {sorted(missing)}", line=snap.first_line(BY_SOURCE))
    total = snap.value(PROMPT_TOTAL)
    if not math.isclose(float(by[list(SOURCES)].sum()), total, rel_tol=1e-9, abs_tol=0.5):
        raise RawRecordError(snap.path, f"prompt tokens by source sum to {by[list(SOURCES)].sum():.0f}, "
                                        f"but {PROMPT_TOTAL} is {total:.0f}", line=snap.first_line(PROMPT_TOTAL))


def check_histogram(snap: Snapshot, family: str) -> None:
    """Per engine: cumulative buckets never decrease, +Inf exists and equals _count, and _sum
    lies within what the bucket edges allow (for histograms of non-negative values)."""
    rows = snap.select(family + "_bucket")
    engines = rows["labels"].map(lambda ls: tuple(kv for kv in ls if kv[0] != "le"))
    for key, grp in rows.groupby(engines.to_numpy(), sort=False):
        le = grp["labels"].map(lambda ls: dict(ls)["le"])
        edges = le.map(lambda v: math.inf if v == "+Inf" else float(v)).to_numpy()
        order = np.argsort(edges, kind="stable")
        edges, cum, lines = edges[order], grp["value"].to_numpy()[order], grp["line"].to_numpy()[order]
        drops = np.flatnonzero(np.diff(cum) < 0)
        if drops.size:
            i = drops[0] + 1
            raise RawRecordError(snap.path, f"{family}: bucket le={edges[i]:g} holds {cum[i]:g}, fewer than "
                                            f"le={edges[i - 1]:g} ({cum[i - 1]:g}); cumulative buckets must not decrease",
                                 line=int(lines[i]))
        if not np.isinf(edges[-1]):
            raise RawRecordError(snap.path, f"{family}: no le=\"+Inf\" bucket", line=int(lines[-1]))
        labels = dict(key)
        count_rows = snap.select(family + "_count", **labels)
        sum_rows = snap.select(family + "_sum", **labels)
        if count_rows.empty or sum_rows.empty:
            raise RawRecordError(snap.path, f"{family}: _count or _sum missing", line=int(lines[-1]))
        count = float(count_rows["value"].iloc[0])
        if cum[-1] != count:
            raise RawRecordError(snap.path, f"{family}: +Inf bucket {cum[-1]:g} differs from _count {count:g}",
                                 line=int(count_rows["line"].iloc[0]))
        total = float(sum_rows["value"].iloc[0])
        per = np.diff(np.concatenate([[0.0], cum]))
        lower = np.concatenate([[0.0], edges[:-1]])
        if edges[0] > 0 and total < float((per * lower).sum()) * (1 - 1e-9) - 1e-9:
            raise RawRecordError(snap.path, f"{family}: _sum {total:g} is below what its buckets allow",
                                 line=int(sum_rows["line"].iloc[0]))
        if per[-1] == 0 and total > float((per[:-1] * edges[:-1]).sum()) * (1 + 1e-9) + 1e-9:
            raise RawRecordError(snap.path, f"{family}: _sum {total:g} is above what its buckets allow",
                                 line=int(sum_rows["line"].iloc[0]))


def check_period(snap: Snapshot, start: datetime, tolerance_s: float = 300.0) -> None:
    """The counters must start at the observation start: a later start means a restart (counter reset)."""
    created = snap.created()
    gap = created - start.timestamp()
    if abs(gap) > tolerance_s:
        when = datetime.fromtimestamp(created, tz=start.tzinfo).isoformat()
        raise RawRecordError(snap.path, f"counters were created at {when}, {gap / 3600:+.2f} h from observation.start "
                                        f"{start.isoformat()}: the server restarted (counters reset) inside the period; "
                                        "give one snapshot per run and stitch them (stitch_counters)")


def stitch_counters(snaps: list[Snapshot], name: str, **labels: str) -> float:
    """Total of a counter over snapshots taken in time order across restarts: where the value
    goes back, the server restarted and the previous run's last value is carried over."""
    total, prev = 0.0, 0.0
    for snap in snaps:
        v = snap.value(name, **labels)
        if v < prev:  # reset: the earlier run ended at (at least) prev
            total += prev
        prev = v
    return total + prev


def check_log(log: ServerLog, interval_s: float = 10.0, slack_s: float = 1.0) -> list[Repair]:
    """Reports ten seconds apart, time never going back, no line twice; a longer silence is fine
    after an idle report (vLLM stops logging when idle), and otherwise a gap of lost reports,
    returned as a documented repair: the restores in it are counted only by the counters."""
    st = log.stats
    if st.empty:
        raise RawRecordError(log.path, "no ten-second stats lines: was the server started with --disable-log-stats?")
    repairs: list[Repair] = []
    t = st["time"].to_numpy("datetime64[s]").astype("int64")
    seg = st["segment"].to_numpy()
    lines = st["line"].to_numpy()
    busy = (st["prompt_tps"].to_numpy() > 0) | (st["gen_tps"].to_numpy() > 0)
    same = seg[1:] == seg[:-1]
    dt = np.diff(t)
    back = np.flatnonzero(same & (dt < 0))
    if back.size:
        i = back[0] + 1
        raise RawRecordError(log.path, f"clock goes back {-dt[i - 1]} s from line {lines[i - 1]}", line=int(lines[i]))
    dup = np.flatnonzero(same & (dt == 0))
    if dup.size:
        i = dup[0] + 1
        raise RawRecordError(log.path, f"report repeated at the same second as line {lines[i - 1]} (duplicated line?)",
                             line=int(lines[i]))
    short = np.flatnonzero(same & (dt < interval_s - slack_s))
    if short.size:
        i = short[0] + 1
        raise RawRecordError(log.path, f"reports {dt[i - 1]} s apart (line {lines[i - 1]}): the stats interval is "
                                       f"{interval_s:g} s", line=int(lines[i]))
    long_ = np.flatnonzero(same & (dt > interval_s + slack_s) & busy[:-1])
    for j in long_:
        repairs.append(Repair(log.path, int(lines[j]), int(lines[j + 1]), "missing_reports", float(dt[j] - interval_s),
                              f"{int(round(dt[j] / interval_s)) - 1} ten-second reports missing during traffic"))
    check_transfers(log)
    return repairs


def check_transfers(log: ServerLog) -> None:
    """Transfer reports: no negative amounts, loads with their count, each after a stats line."""
    x = log.transfers
    if x.empty:
        return
    if log.key_generation == "legacy":
        return
    for col in ("load_bytes", "load_time", "load_count", "store_bytes", "store_time", "store_count"):
        v = x[col].to_numpy(float)
        neg = np.flatnonzero(v < 0)
        if neg.size:
            raise RawRecordError(log.path, f"negative {col} in a KV Transfer report", line=int(x["line"].iloc[neg[0]]))
    loads = x["load_bytes"].notna().to_numpy() != x["load_count"].notna().to_numpy()
    if loads.any():
        i = int(np.flatnonzero(loads)[0])
        raise RawRecordError(log.path, "KV Transfer report has load bytes without a load count (or the reverse)",
                             line=int(x["line"].iloc[i]))
    orphan = x["stats_line"].to_numpy() < 0
    if orphan.any():
        raise RawRecordError(log.path, "KV Transfer report before any stats line", line=int(x["line"].iloc[int(np.flatnonzero(orphan)[0])]))


def repairs_frame(repairs: list[Repair]) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in repairs],
                        columns=["path", "first_line", "last_line", "kind", "seconds", "detail"])
