"""Replica raw records for setup C (raw/production/C/): metrics.prom, server.log, host.yaml,
headroom.csv, written by a seeded generator in the formats of vLLM 0.33.

The authors' production records are not public. These files stand in for them: they are
built from the figures the note prints (DESIGN.md, "Consistency notes") and are internally
consistent the way the real ones are, so the pipeline recomputes the note from them:

- the /metrics snapshot holds the cumulative counters and histograms at the end of the period;
- the log's ten-second "KV Transfer metrics" lines carry each interval's load/store bytes and
  counts, and add up to the counters except for what the log does not show;
- idle stretches have no stats lines (vLLM logs one 0.0 line and then goes quiet at INFO);
- 8 of the 517 restores are not visible: the shipped log lost a few minutes of lines during
  traffic (a gap the data contract detects and the note's appendix reports);
- a restore of b blocks served moves b + 4 blocks; an interval with k restores reports their
  summed bytes and k, so the analysis can only split it evenly; the generator makes the
  restores that share an interval differ, but keeps the even split equal to their mean.

Everything the note states is a target; what it does not state (the exact minute of each
restore, request sizes inside a histogram bucket, ...) is drawn from the seeded RNG.
Run: `python -m kvtier replica production raw/production/C`, then pin the files with `kvtier manifest add`.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from .. import cliargs as A
from ..records import serverlog_write as W
from ..records.headroom import HeadroomTest, headroom_csv
from ..records.host import host_yaml

SEED = 20261005
VERSION = "0.33.0"
MODEL = "production-moe-int4"
START = datetime(2026, 10, 5, 8, 0, 0, tzinfo=timezone.utc)
END = datetime(2026, 10, 6, 10, 0, 0, tzinfo=timezone.utc)

# The server (Setup, Consistency notes).
BLOCK_TOKENS = 1600
KV_BYTES_PER_TOKEN = 27_456            # offloaded KV of one token (bf16 latent KV of the model)
BYTES_PER_BLOCK = BLOCK_TOKENS * KV_BYTES_PER_TOKEN
POOL_GIB = 110
POOL_BLOCKS = POOL_GIB * 2**30 // BYTES_PER_BLOCK   # 2,688
GPU_KV_TOKENS = 2_113_003
GPU_KV_GIB = 55.9
WEIGHTS_GIB = 76.6
MAX_MODEL_LEN = 1_000_000
EXTRA_BLOCKS = 4                       # moved on top of the blocks a restore serves

# Counters (Abstract, Results, Table 2).
PROMPT_TOKENS = 1_781_400_000
POOL_TOKENS_BLOCKS = 25_763            # external_kv_transfer = 41,220,800 tokens
MISSED_TOKENS = 257_580_000
REQUESTS = 13_965
RUNNING_AT_SNAPSHOT_PROMPTS = (700_000, 600_000, 500_000)   # prefilled, not finished
ABOVE_200K, ABOVE_500K = 2_095, 559
TTFT_UNDER_1S, TTFT_OVER_20S = 10_613, 531
GENERATED_TOKENS = 13_164_100
STORED_BLOCKS = 142_950
STORE_OPS = 70_977
STORE_TIME_S = 122.0
LOOKUPS, LOOKUP_TIME_S = 25_743, 0.5502
DEFERRED_S = (0.012, 0.04, 0.09, 0.11, 0.2, 0.31, 0.45, 0.52, 0.8, 0.95, 1.1, 1.3, 1.6, 1.9, 2.2, 2.4, 2.018,
              6.1, 9.4, 21.0, 34.5)   # 17 under 5 s; 87 s in all
POOL_USAGE = 0.003
RESTORES, RESTORES_VISIBLE = 517, 509
LOAD_TIME_S = 24.0
LARGEST_BLOCKS, LARGEST_TIME_S = 551, 0.48
MAX_RUNNING = 13

# Restore sizes (blocks served), Results and Figure 1b.
BIG = (551, 392, 371, 355, 348, 340, 333, 327, 322, 318, 314)   # the 11 above 500K tokens
N_MID, MID_BLOCKS = 29, 5_282      # 200K..500K tokens
N_100K, BLOCKS_100K = 108, 10_515   # 100K..200K tokens
N_SMALL, SMALL_BLOCKS = 361, 5_918  # under 100K tokens
MEDIAN_BLOCKS = 18
INVISIBLE_BLOCKS = (6, 8, 9, 9, 10, 11, 12, 12)   # the 8 restores inside the lost stretch
SHARED_PAIRS, SHARED_TRIPLES = 55, 4               # 122 of 509 restores share a report
TOP_HOURS_SHARE = 0.53

# Clock hours with traffic (17 of 26), and the two that carry most restored volume.
TRAFFIC_HOURS = ["2026-10-05T%02d" % h for h in (8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21)] + \
                ["2026-10-06T%02d" % h for h in (6, 7, 8, 9)]
TOP_HOURS = ("2026-10-05T14", "2026-10-05T15")
GAP_HOUR = "2026-10-06T07"   # where the shipped log lost lines

# Recommendations: pool sizes tried on the production host and on another one.
HEADROOM = [
    # host, date, pool_gib, free_ram_gib, shm_total_gib, started, note
    ("C", "2026-09-28", 120, 0.5, None, "yes", "left almost no RAM free"),
    ("C", "2026-09-29", 108, 12.0, None, "yes", ""),
    ("C", "2026-09-30", 110, 10.0, None, "yes", "the size used in production"),
    ("B", "2026-09-24", 120, None, 107.0, "no", "pool larger than the shared-memory filesystem"),
    ("C", "2026-09-27", 1, None, None, "yes", "sized from free /dev/shm while the previous server was still exiting"),
]


@dataclass(frozen=True)
class Restore:
    blocks: int          # served
    interval: int        # index into the busy intervals
    visible: bool


def _fit_sum(values: np.ndarray, target: int, lo: int, hi: int, rng: np.random.Generator) -> np.ndarray:
    """Nudge integer values one at a time, within [lo, hi], until they sum to target."""
    v = values.astype(int).copy()
    while (d := target - int(v.sum())) != 0:
        step = 1 if d > 0 else -1
        ok = np.flatnonzero((v + step >= lo) & (v + step <= hi))
        if ok.size == 0:
            raise ValueError("cannot reach the target sum within bounds")
        pick = rng.choice(ok, size=min(abs(d), ok.size), replace=False)
        v[pick] += step
    return v


def _restore_sizes(rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    """Sized restores (blocks served) of the visible 509, and which of them share a report."""
    mid = _fit_sum(np.round(rng.uniform(126, 260, N_MID)), MID_BLOCKS, 126, 312, rng)
    hundred = _fit_sum(np.round(rng.uniform(64, 124, N_100K)), BLOCKS_100K, 64, 124, rng)
    # Small ones: 254 at or below the median size, the rest above it, skewed to the small end.
    n_low = 254
    low = np.clip(np.round(rng.lognormal(np.log(9.5), 0.55, n_low)), 1, MEDIAN_BLOCKS)
    low[-1] = MEDIAN_BLOCKS
    high = np.clip(np.round(MEDIAN_BLOCKS + rng.gamma(1.6, 5.5, N_SMALL - n_low)), MEDIAN_BLOCKS, 62)
    high = _fit_sum(high, SMALL_BLOCKS - int(low.sum()), MEDIAN_BLOCKS, 62, rng)
    small = np.concatenate([low, high]).astype(int)
    # Restores sharing a report are small bursts: each group gets one sized value (its mean;
    # the members themselves differ, see generate()). Groups come from below the median so the
    # median stays put; the sum is restored on the larger small restores.
    small[n_low:][0] = MEDIAN_BLOCKS
    order = rng.permutation(np.flatnonzero(small < MEDIAN_BLOCKS))
    groups: list[np.ndarray] = []
    pos = 0
    for size in [2] * SHARED_PAIRS + [3] * SHARED_TRIPLES:
        members = order[pos:pos + size]
        pos += size
        small[members] = max(1, int(round(small[members].mean())))
        groups.append(members)
    grouped = np.zeros(len(small), bool)
    grouped[np.concatenate(groups)] = True
    small[np.flatnonzero(~grouped)[0]] = 1  # the smallest restore serves one block, moving five
    free = np.flatnonzero(~grouped & (small > MEDIAN_BLOCKS))
    small[free] = _fit_sum(small[free], SMALL_BLOCKS - int(small[~np.isin(np.arange(len(small)), free)].sum()),
                           MEDIAN_BLOCKS + 1, 62, rng)
    sizes = np.concatenate([np.array(BIG), mid, hundred, small])
    offset = len(BIG) + N_MID + N_100K
    return sizes, [g + offset for g in groups]


def _busy_intervals(rng: np.random.Generator) -> tuple[list[list[datetime]], list[datetime]]:
    """Runs of ten-second reports inside the traffic hours, and the idle line after each run.

    vLLM's stats loop ticks every ten seconds (plus a few ms of drift) whether or not anything
    happens; idle ticks log at DEBUG, so only busy ticks and the first idle one are visible.
    """
    grid = [START + timedelta(seconds=7 + 10.004 * k) for k in range(int((END - START).total_seconds() // 10.004))]
    grid = [t for t in grid if t < END]
    spans: dict[str, list[tuple[float, float]]] = {}
    for hour in TRAFFIC_HOURS:
        if hour in TOP_HOURS:
            spans[hour] = [(0, 3600)]
        else:
            a, b = sorted(rng.uniform(300, 3300, 2))
            spans[hour] = [(rng.uniform(0, 200), a), (b, rng.uniform(3400, 3600))] if b - a > 120 else [(0, 3600)]
    spans[TRAFFIC_HOURS[-1]] = [(0, 3600)]  # busy up to the snapshot
    active = []
    for t in grid:
        h = t.strftime("%Y-%m-%dT%H")
        sec = t.minute * 60 + t.second
        active.append(any(a <= sec < b for a, b in spans.get(h, [])))
    runs: list[list[datetime]] = []
    idle: list[datetime] = []
    for k, t in enumerate(grid):
        if active[k]:
            if k == 0 or not active[k - 1]:
                runs.append([])
            runs[-1].append(t)
        elif k > 0 and active[k - 1]:
            idle.append(t)
    return runs, idle


@dataclass
class Replica:
    metrics: str
    log: str
    host: str
    headroom: str


def generate(seed: int = SEED) -> Replica:
    """All four files as text. Order matters for byte-identity: every draw comes from one RNG."""
    rng = np.random.default_rng(seed)
    stretches, idle_lines = _busy_intervals(rng)
    times = [t for st in stretches for t in st]
    n = len(times)
    hour_of = np.array([t.strftime("%Y-%m-%dT%H") for t in times])

    # The lost stretch: six minutes of reports in the middle of one busy run in GAP_HOUR.
    run_id = np.concatenate([[k] * len(st) for k, st in enumerate(stretches)])
    in_gap_hour = np.flatnonzero(hour_of == GAP_HOUR)
    longest = np.bincount(run_id[in_gap_hour]).argmax()
    ticks = in_gap_hour[run_id[in_gap_hour] == longest]
    gap = ticks[len(ticks) // 2 - 18: len(ticks) // 2 + 18]
    gap_set = set(gap.tolist())

    # Restores: sized values for the visible ones, the lost ones inside the gap.
    sizes, groups = _restore_sizes(rng)
    visible_slots = np.array([i for i in range(n) if i not in gap_set])
    top = np.isin(hour_of[visible_slots], TOP_HOURS)
    # Volume into the two top hours: the largest restores first, until TOP_HOURS_SHARE is reached.
    grouped = {int(m) for g in groups for m in g}
    # stable: equal sizes in index order, so the placement is the same on every CPU (numpy's default
    # quicksort orders ties by whichever SIMD sort the machine has)
    singles = [i for i in np.argsort(-sizes, kind="stable") if i not in grouped]
    budget = TOP_HOURS_SHARE * sizes.sum()
    to_top, acc = set(), 0
    for i in singles:  # largest first, then smaller ones fill up to the budget
        if acc + sizes[i] <= budget:
            to_top.add(int(i))
            acc += int(sizes[i])
    top_slots = list(rng.permutation(visible_slots[top]))
    other_slots = list(rng.permutation(visible_slots[~top]))
    interval_of = np.full(len(sizes), -1)
    for i in sorted(to_top):
        interval_of[i] = top_slots.pop()
    for g in groups:
        slot = other_slots.pop()
        interval_of[g] = slot
    for i in range(len(sizes)):
        if interval_of[i] < 0:
            interval_of[i] = other_slots.pop()

    # True sizes inside a shared report differ; their mean is the sized value.
    true_sizes = sizes.astype(int).copy()
    for g in groups:
        s = int(sizes[g[0]])
        spread = min(s - 1, int(rng.integers(1, max(2, s // 2 + 1))))
        if len(g) == 2:
            true_sizes[g] = [s + spread, s - spread]
        else:
            true_sizes[g] = [s + spread, s, s - spread]
    lost = rng.choice(gap, size=len(INVISIBLE_BLOCKS), replace=False)
    restores = [Restore(int(b), int(i), True) for b, i in zip(true_sizes, interval_of)] + \
               [Restore(b, int(i), False) for b, i in zip(INVISIBLE_BLOCKS, lost)]
    assert len(restores) == RESTORES and sum(r.blocks for r in restores) == POOL_TOKENS_BLOCKS

    # Load times: ~51 GB/s with some spread, scaled to the counter; the largest is pinned.
    moved = np.array([r.blocks + EXTRA_BLOCKS for r in restores])
    raw_t = moved * BYTES_PER_BLOCK / rng.normal(50.9e9, 1.2e9, len(restores))
    largest = int(np.argmax([r.blocks for r in restores]))
    rest = np.arange(len(restores)) != largest
    raw_t[rest] *= (LOAD_TIME_S - LARGEST_TIME_S) / raw_t[rest].sum()
    raw_t[largest] = LARGEST_TIME_S

    per = {k: np.zeros(n) for k in ("load_bytes", "load_time", "load_count", "computed", "generated",
                                     "store_blocks", "store_ops", "lookups", "lookup_time", "deferred_count",
                                     "deferred_time", "running", "external")}
    for r, t in zip(restores, raw_t):
        per["load_bytes"][r.interval] += (r.blocks + EXTRA_BLOCKS) * BYTES_PER_BLOCK
        per["load_time"][r.interval] += t
        per["load_count"][r.interval] += 1
        per["external"][r.interval] += r.blocks * BLOCK_TOKENS

    # Work per interval: random, heavier in the two top hours.
    weight = rng.gamma(2.0, 1.0, n) * np.where(np.isin(hour_of, TOP_HOURS), 1.6, 1.0)
    computed = MISSED_TOKENS - POOL_TOKENS_BLOCKS * BLOCK_TOKENS
    per["computed"] = _split_int(computed, weight)
    per["generated"] = _split_int(GENERATED_TOKENS, weight * rng.uniform(0.6, 1.4, n))
    per["store_blocks"] = _split_int(STORED_BLOCKS, per["computed"] + per["generated"] + 1)
    store_ops = _split_int(STORE_OPS, per["store_blocks"] + 1e-9)
    per["store_ops"] = np.minimum(store_ops, per["store_blocks"])
    per["store_ops"] = _fix_ops(per["store_ops"], per["store_blocks"], STORE_OPS)
    per["lookups"] = _split_int(LOOKUPS, weight)
    lt = per["lookups"] * rng.uniform(0.8, 1.2, n)
    per["lookup_time"] = lt / lt.sum() * LOOKUP_TIME_S
    defer_at = rng.choice(np.array(sorted(set(range(n)) - gap_set)), size=len(DEFERRED_S), replace=False)
    for i, d in zip(defer_at, DEFERRED_S):
        per["deferred_count"][i] += 1
        per["deferred_time"][i] += d
    store_t = per["store_blocks"] * rng.uniform(0.9, 1.1, n)
    per["store_time"] = store_t / store_t.sum() * STORE_TIME_S
    running = np.clip(np.round(rng.gamma(2.2, 1.6, n)), 1, MAX_RUNNING - 1)
    running[rng.choice(np.flatnonzero(np.isin(hour_of, TOP_HOURS)), 2, replace=False)] = MAX_RUNNING
    running[-1] = len(RUNNING_AT_SNAPSHOT_PROMPTS)
    per["running"] = running

    log = _write_log(times, idle_lines, per, gap_set, rng)
    ops_sizes = _store_op_sizes(rng)
    metrics = _write_metrics(per, restores, raw_t, ops_sizes, rng)
    return Replica(metrics, log, _host_yaml(), _headroom_csv())


def _split_int(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to weights that sum exactly to total."""
    w = np.asarray(weights, float)
    share = w / w.sum() * total
    out = np.floor(share)
    rem = int(total - out.sum())
    if rem:
        frac = share - out
        out[np.argsort(-frac, kind="stable")[:rem]] += 1
    return out


def _fix_ops(ops: np.ndarray, blocks: np.ndarray, total: int) -> np.ndarray:
    ops = ops.copy()
    ops[(blocks > 0) & (ops == 0)] = 1
    d = total - int(ops.sum())
    room = np.flatnonzero(ops < blocks) if d > 0 else np.flatnonzero(ops > 1)
    ops[room[: abs(d)]] += np.sign(d)
    assert int(ops.sum()) == total
    return ops


def _store_op_sizes(rng: np.random.Generator) -> np.ndarray:
    """Blocks per store operation, summing to STORED_BLOCKS over STORE_OPS operations."""
    sizes = rng.choice([1, 2, 3, 4, 5, 6], size=STORE_OPS, p=[0.42, 0.29, 0.16, 0.08, 0.03, 0.02])
    return _fit_sum(sizes, STORED_BLOCKS, 1, 8, rng)


# ---------------------------------------------------------------- the server log

def _write_log(times: list[datetime], idle_lines: list[datetime], per: dict, gap: set[int],
               rng: np.random.Generator) -> str:
    """The log through its writer (kvtier.records.serverlog_write), in vLLM 0.33's formats."""
    api, core, worker = 2417, 2588, 2601
    t0 = START - timedelta(seconds=118)
    out = io.StringIO()
    args = {"model_tag": f"/models/{MODEL}", "host": "0.0.0.0", "port": 8000, "model": f"/models/{MODEL}",
            "max_model_len": MAX_MODEL_LEN, "served_model_name": [MODEL], "enable_prefix_caching": True,
            "kv_offloading_size": float(POOL_GIB), "kv_offloading_backend": "native",
            "kv_transfer_config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                                   "kv_connector_extra_config": {"block_size": BLOCK_TOKENS,
                                                                 "cpu_bytes_to_use": POOL_GIB * 2**30}},
            "max_num_seqs": 16, "enable_prompt_tokens_details": True}
    mmap = f"/dev/shm/vllm_offload_{MODEL}-0.mmap"
    startup = [
        (api, "APIServer", t0, "api_utils.py:347", W.startup_message("version", version=VERSION)),
        (api, "APIServer", t0, "api_utils.py:286", W.args_message(args)),
        (api, "APIServer", t0 + timedelta(seconds=9), "model.py:2152", W.startup_message("max_model_len", max_model_len=MAX_MODEL_LEN)),
        (worker, "Worker", t0 + timedelta(seconds=71), "gpu_model_runner.py:5150",
         W.startup_message("model_loading", model_gib=WEIGHTS_GIB, seconds=52.318427)),
        (worker, "Worker", t0 + timedelta(seconds=88), "gpu_worker.py:760", W.startup_message("kv_memory", kv_cache_gib=GPU_KV_GIB)),
        (core, "EngineCore", t0 + timedelta(seconds=88), "kv_cache_utils.py:2328",
         W.startup_message("kv_size", kv_device="GPU", kv_cache_tokens=GPU_KV_TOKENS, max_model_len=MAX_MODEL_LEN,
                           concurrency=GPU_KV_TOKENS / MAX_MODEL_LEN)),
        (worker, "Worker", t0 + timedelta(seconds=96), "shared_offload_region.py:143",
         W.startup_message("mmap", mmap_path=mmap, mmap_gb=POOL_BLOCKS * BYTES_PER_BLOCK / 1e9)),
        (worker, "Worker", t0 + timedelta(seconds=97), "shared_offload_region.py:202", f"Unlinked mmap file {mmap}"),
        (api, "APIServer", t0 + timedelta(seconds=117), "launcher.py:46", "Route: /metrics, Methods: GET"),
        (api, "APIServer", t0 + timedelta(seconds=118), "api_server.py:1020", "Starting vLLM server on http://0.0.0.0:8000"),
    ]
    for pid, proc, t, src, msg in startup:
        out.write(W.record_line(proc, pid, "INFO", t, src, msg))
    idle = {t: True for t in idle_lines}
    events = [(t, i) for i, t in enumerate(times)] + [(t, -1) for t in idle]
    events.sort()
    reqs_done = 0
    finished = _split_int(REQUESTS, per["computed"] + per["external"] + 1)
    idle_report = W.StatsReport(0.0, 0.0, 0, 0, 0.0, prefix_hit_pct=85.4, external_hit_pct=15.8)
    for t, i in events:
        if i < 0:
            out.write(W.record_line("APIServer", api, "INFO", t, "loggers.py:335", W.stats_message(idle_report)))
            continue
        if i in gap:
            continue
        for _ in range(int(finished[i])):
            reqs_done += 1
            out.write(W.access_line("APIServer", api, f"10.20.0.{11 + reqs_done % 5}", 40000 + (reqs_done * 7919) % 20000))
        waiting = int(rng.random() < 0.08)
        deferred = int(per["deferred_count"][i]) or None
        usage, prefix_hit, external_hit = rng.uniform(18, 96), rng.uniform(82, 89), rng.uniform(10, 22)
        report = W.StatsReport(per["computed"][i] / 10, per["generated"][i] / 10, int(per["running"][i]), waiting, usage,
                               prefix_hit_pct=prefix_hit, external_hit_pct=external_hit, deferred=deferred)
        out.write(W.record_line("APIServer", api, "INFO", t, "loggers.py:335", W.stats_message(report)))
        out.write(W.record_line("APIServer", api, "INFO", t, "metrics.py:108", W.transfer_message(_transfer(per, i, rng))))
    return out.getvalue()


def _transfer(per: dict, i: int, rng: np.random.Generator) -> list[tuple[str, int | float]]:
    """One interval's report items (the readers' vocabulary), in first-insertion order as
    OffloadingConnectorStats.reduce() gives them."""
    items: list[tuple[str, int | float]] = []
    if per["lookups"][i]:
        items += [("lookup_count", int(per["lookups"][i])), ("lookup_time", float(per["lookup_time"][i]))]
    if per["load_count"][i]:
        lb = int(per["load_bytes"][i])
        items += [("load_bytes", lb), ("load_time", float(per["load_time"][i])), ("load_count", int(per["load_count"][i])),
                  ("load_size_sum", lb)]
    if per["store_blocks"][i]:
        sb = int(per["store_blocks"][i]) * BYTES_PER_BLOCK
        items += [("store_bytes", sb), ("store_time", float(per["store_time"][i])), ("store_count", int(per["store_ops"][i])),
                  ("store_size_sum", sb)]
    if per["deferred_count"][i]:
        items += [("deferred_count", int(per["deferred_count"][i])), ("deferred_time", float(per["deferred_time"][i]))]
    items.append(("pool_usage", round(float(rng.uniform(0, 0.02)), 6)))
    return items


# ---------------------------------------------------------------- the /metrics snapshot

class _Snapshot(Collector):
    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return iter(self.families)


def _labels(extra: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    d = {"engine": "0", "model_name": MODEL, **(extra or {})}
    return list(d), list(d.values())


def _counter(name: str, doc: str, values: dict[tuple, float] | float, label: str | None = None,
             created: float = 0.0) -> CounterMetricFamily:
    extra = [label] if label else []
    fam = CounterMetricFamily(name, doc, labels=["engine", "model_name", *extra])
    items = values.items() if isinstance(values, dict) else [((), values)]
    for lv, v in items:
        fam.add_metric(["0", MODEL, *lv], float(v), created=created)
    return fam


def _hist(name: str, doc: str, edges: list[float], observed: np.ndarray, created: float,
          total: float | None = None) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=["engine", "model_name"])
    counts = [int(np.sum(observed <= e)) for e in edges] + [len(observed)]
    names = [_le(e) for e in edges] + ["+Inf"]
    fam.add_metric(["0", MODEL], list(zip(names, map(float, counts))), float(observed.sum() if total is None else total))
    fam.samples.append(Sample(name + "_created", {"engine": "0", "model_name": MODEL}, created))
    return fam


def _le(e: float) -> str:
    from prometheus_client.utils import floatToGoString
    return floatToGoString(e)


def _write_metrics(per: dict, restores: list[Restore], load_t: np.ndarray, op_sizes: np.ndarray,
                   rng: np.random.Generator) -> str:
    c = START.timestamp() + 0.113
    ext = POOL_TOKENS_BLOCKS * BLOCK_TOKENS
    computed = MISSED_TOKENS - ext
    gpu = PROMPT_TOKENS - MISSED_TOKENS
    prompts = _request_prompts(rng)
    ttft = _request_ttfts(rng)
    gen = _split_int(GENERATED_TOKENS, rng.gamma(1.5, 1.0, REQUESTS))
    load_bytes = np.array([(r.blocks + EXTRA_BLOCKS) * BYTES_PER_BLOCK for r in restores], float)
    store_bytes = op_sizes.astype(float) * BYTES_PER_BLOCK
    lookups = rng.gamma(4.0, 1.0, LOOKUPS)
    lookups = lookups / lookups.sum() * LOOKUP_TIME_S
    size_edges = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6]
    fams: list = [
        _gauge("vllm:num_requests_running", "Number of requests in model execution batches.", len(RUNNING_AT_SNAPSHOT_PROMPTS)),
        _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0),
        _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.4417),
        _counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", PROMPT_TOKENS, created=c),
        _counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", gpu, created=c),
        _counter("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.", MISSED_TOKENS, created=c),
        _counter("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.", ext, created=c),
        _counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0, created=c),
        _counter("vllm:prompt_tokens", "Number of prefill tokens processed.", PROMPT_TOKENS, created=c),
        _counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                 {("local_compute",): computed, ("local_cache_hit",): gpu, ("external_kv_transfer",): ext}, "source", c),
        _counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", gpu + ext, created=c),
        _counter("vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier that supplied them.",
                 {("device",): gpu, ("host",): ext, ("p2p",): 0, ("disk",): 0, ("external_unspecified",): 0}, "source", c),
        _counter("vllm:generation_tokens", "Number of generation tokens processed.", GENERATED_TOKENS, created=c),
        _counter("vllm:request_success", "Count of successfully processed requests.",
                 {("stop",): REQUESTS - 212 - 37, ("length",): 212, ("abort",): 37}, "finished_reason", c),
        _hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _one_two_five(MAX_MODEL_LEN), prompts, c),
        _hist("vllm:request_generation_tokens", "Number of generation tokens processed.", _one_two_five(MAX_MODEL_LEN), gen.astype(float), c),
        _hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0, 160.0, 640.0, 2560.0], ttft, c),
        _counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                 {("CPU_to_GPU",): load_bytes.sum(), ("GPU_to_CPU",): store_bytes.sum()}, "transfer_type", c),
        _counter("vllm:kv_offload_total_time", "Total time measured by all KV offloading operations",
                 {("CPU_to_GPU",): LOAD_TIME_S, ("GPU_to_CPU",): STORE_TIME_S}, "transfer_type", c),
        _counter("vllm:kv_offload_load_bytes", "Total bytes loaded from offload storage to GPU.", load_bytes.sum(), created=c),
        _counter("vllm:kv_offload_load_time", "Total load time from offload storage to GPU, in seconds.", float(load_t.sum()), created=c),
        _hist("vllm:kv_offload_load_size", "Histogram of KV offload load operation size, in bytes.", size_edges, load_bytes, c),
        _counter("vllm:kv_offload_store_bytes", "Total bytes stored from GPU to offload storage.", store_bytes.sum(), created=c),
        _counter("vllm:kv_offload_store_time", "Total store time from GPU to offload storage, in seconds.", STORE_TIME_S, created=c),
        _hist("vllm:kv_offload_store_size", "Histogram of KV offload store operation size, in bytes.", size_edges, store_bytes, c),
        _hist("vllm:kv_offload_lookup_sync_delay_seconds", "Histogram of the time spent in a single offload lookup call, in seconds.",
              [0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0], lookups, c, LOOKUP_TIME_S),
        _hist("vllm:kv_offload_lookup_async_delay_seconds",
              "Histogram of time between a request's offload lookup first deferring and the following lookup resolving, or request finish, in seconds.",
              [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0], np.array(DEFERRED_S), c),
        _counter("vllm:kv_offload_allocation_failure", "Number of KV offload store allocation attempts that failed.", 0, created=c),
        _gauge("vllm:kv_offload_cpu_cache_usage_perc", "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated).", POOL_USAGE),
        _info("vllm:kv_offload_config_info", "Information of the KV offload configuration.",
              {"cpu_num_chunks": str(POOL_BLOCKS), "cpu_blocks_per_chunk": "1",
               "cpu_kv_cache_size_bytes": str(POOL_BLOCKS * BYTES_PER_BLOCK),
               "cpu_kv_cache_size_tokens": str(POOL_BLOCKS * BLOCK_TOKENS)}),
        _info("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
              {"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True",
               "kv_offloading_backend": "native", "kv_offloading_size": str(float(POOL_GIB)),
               "num_gpu_blocks": str(-(-GPU_KV_TOKENS // 16)), "prefix_caching_hash_algo": "sha256"}),
    ]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Snapshot(fams))
    return generate_latest(reg).decode()


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=["engine", "model_name"])
    fam.add_metric(["0", MODEL], float(value))
    return fam


def _info(name: str, doc: str, labels: dict[str, str]) -> GaugeMetricFamily:
    names, values = _labels(labels)
    fam = GaugeMetricFamily(name, doc, labels=names)
    fam.add_metric(values, 1.0)
    return fam


def _one_two_five(cap: int) -> list[float]:
    out, m = [], 1
    while True:
        for f in (1, 2, 5):
            if f * m > cap:
                return [float(x) for x in out]
            out.append(f * m)
        m *= 10


def _request_prompts(rng: np.random.Generator) -> np.ndarray:
    """Prompt sizes of the finished requests: shares above 200K/500K and the sum as targeted."""
    target = PROMPT_TOKENS - sum(RUNNING_AT_SNAPSHOT_PROMPTS)
    n_low = REQUESTS - ABOVE_200K
    top = rng.uniform(500_001, 990_000, ABOVE_500K)
    mid = rng.uniform(200_001, 500_000, ABOVE_200K - ABOVE_500K)
    low = rng.gamma(2.2, 30_000, n_low).clip(300, 200_000)
    need = target - np.round(top).sum() - np.round(mid).sum()
    for _ in range(50):  # rescale, clip, repeat: the sum converges inside the bucket bounds
        low = (low * need / low.sum()).clip(300, 199_000)
    out = np.round(np.concatenate([top, mid, low]))
    d = int(target - out.sum())
    out[-n_low:][: abs(d)] += np.sign(d)
    assert out.sum() == target and (out[-n_low:] <= 200_000).all() and out.min() > 0
    return out


def _request_ttfts(rng: np.random.Generator) -> np.ndarray:
    fast = rng.uniform(0.05, 0.99, TTFT_UNDER_1S)
    slow = rng.uniform(20.5, 95.0, TTFT_OVER_20S)
    mid = rng.uniform(1.01, 19.9, REQUESTS - TTFT_UNDER_1S - TTFT_OVER_20S)
    return np.round(np.concatenate([fast, mid, slow]), 3)


# ---------------------------------------------------------------- host metadata and headroom

HOST_HEADER = """Setup C: the production host and the observation period (facts the server does not print).
Replica record: the values are the note's (Setup); the dates stand in for the real ones."""


def _host_yaml() -> str:
    data = {"setup": "C",
            "observation": {"start": START, "end": END, "log_year": START.year},
            "host": {"gpu": "NVIDIA H200", "vcpus": 16, "ram_gib": 197},
            "model": {"expert_weight_bits": 4, "pinned_embedding_gib": 47},
            "server": {"vllm_version": VERSION, "stats_interval_s": 10}}
    return host_yaml(data, HOST_HEADER, {"observation": "from the start of the server's counters to the /metrics snapshot"})


def _headroom_csv() -> str:
    return headroom_csv([HeadroomTest(host, day, pool, free, shm, started == "yes", note)
                         for host, day, pool, free, shm, started, note in HEADROOM])


FILES = {"metrics.prom": "metrics", "server.log": "log", "host.yaml": "host", "headroom.csv": "headroom"}


def write(out_dir: str | Path, seed: int = SEED) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rep = generate(seed)
    paths = []
    for name, attr in FILES.items():
        p = out / name
        p.write_text(getattr(rep, attr), encoding="utf-8")
        paths.append(p)
    return paths


def build_parser(prog: str = "kvtier replica production") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="raw/production/C", type=A.folder_to_write, help="folder to write the records into")
    return ap


def main(argv: list[str] | None = None) -> int:
    for p in write(build_parser().parse_args(argv).out):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
