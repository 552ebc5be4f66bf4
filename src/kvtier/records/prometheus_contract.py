"""The data contract of a /metrics snapshot of the production analysis, checked at ingest.

Values finite and of the right sign and unit, no sample twice, the series the analysis needs
present (by the names of kvtier.records.vllm), the by-source counters adding up, histograms
monotone and ending at their count, the counters starting at the observation's start. Each
violation is a RawRecordError naming the snapshot and its line.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import numpy as np

from ..errors import RawRecordError
from . import vllm as V
from .prometheus import Snapshot, read_prometheus

BY_SOURCE = V.PROMPT_BY_SOURCE
PROMPT_TOTAL = V.PROMPT_TOTAL
REQUIRED = [PROMPT_TOTAL, BY_SOURCE, V.REQUEST_SUCCESS, V.GENERATION_TOTAL,
            V.REQUEST_PROMPT_TOKENS + "_bucket", V.TTFT_SECONDS + "_bucket",
            V.LOAD_BYTES, V.LOAD_TIME, V.LOAD_COUNT, V.STORE_BYTES, V.STORE_TIME, V.STORE_COUNT,
            V.LOOKUP_SYNC + "_count", V.CPU_CACHE_USAGE]
# Not required: vllm:kv_offload_lookup_async_delay_seconds (deferred lookups, 0.33+) and
# vllm:kv_offload_config_info (the pool geometry, 0.33+; 0.32's pool geometry comes from the
# offload worker's startup line instead, records.geometry.pool_geometry).
SOURCES = set(V.SOURCES)


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
        twice = np.flatnonzero(np.diff(edges) == 0)
        if twice.size:  # '200000.0' and '2e+05' are one edge: summed, the share above it went negative
            i = twice[0] + 1
            raise RawRecordError(snap.path, f"{family}: bucket edge le={edges[i]:g} appears twice for the same series "
                                            f"(lines {int(min(lines[i - 1], lines[i]))} and {int(max(lines[i - 1], lines[i]))}, "
                                            "spelt differently?)", line=int(max(lines[i - 1], lines[i])))
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


def read_checked_snapshot(path: str | Path, observation_start: datetime) -> Snapshot:
    """The production analysis's snapshot, read with its data contract: check_snapshot, and
    counters that started at the observation's start (check_period: no restart inside it)."""
    snap = read_prometheus(path)
    check_snapshot(snap)
    check_period(snap, observation_start)
    return snap
