"""Eviction-test records -> tidy table, Table 1, Figure 1a and the `evict.*` numbers.

Nothing is taken on trust from run.yaml's own verdicts: codes are found again in the raw
answers, eviction and bytes restored are derived again from the raw /metrics snapshots.
A run enters Table 1 only if it completed, its cold read returned every code (else it is
excluded, as the note excludes one) and its restore found the prefix outside GPU memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..production.runcontract.logfacts import read_log_facts
from ..records import geometry
from ..records.prometheus import Snapshot
from .checks import restore_checks
from .conversation import find_codes
from . import logprobs as lp_mod
from ..serving.server import offload_block_bytes_from_log
from .checks import exact_blocks, request_delta
from .cpuset import CI_LEVEL, CI_MIN_N, flag_load, latest_set, load_interval_s, record_set, spread
from .records import MEASURED_PHASES, Run, read_run
from ..render.svg import save_svg

MiB = 2**20
GiB = 2**30


def ttft(rec: dict[str, Any]) -> tuple[float, str]:
    """Client TTFT: first visible text; the first streamed chunk if the model emitted no text."""
    if rec.get("ttft_s") is not None:
        return float(rec["ttft_s"]), "text"
    if rec.get("first_chunk_s") is not None:
        return float(rec["first_chunk_s"]), "first_chunk"
    raise RawRecordError(f"requests.jsonl (seq {rec['seq']})", "request has neither ttft_s nor first_chunk_s")


def offload_block_bytes(run: Run) -> int | None:
    """Bytes of one offloaded block without kv_offload_config_info (vLLM 0.32): the raw server log's
    kvtier worker line first, else what run.yaml recorded from the model's geometry."""
    log = run.dir / "server.log"
    from_log = offload_block_bytes_from_log(log) if log.exists() else None
    return geometry.offload_block_bytes(from_log, run.meta["server"].get("offload_block_bytes") or {}, log)


def _logprob_check(run: Run, rec: dict[str, Any], cycle: int, computed: float,
                   read: Callable[[Path], Snapshot] = Snapshot.read) -> dict[str, Any]:
    """The restored request's logprobs against its cycle's hit, recomputed from the raw records."""
    hit = [r for r in run.final("hit", 0, cycle) if r["status"] == "ok"]
    if not hit or rec.get("logprobs") is None or hit[-1].get("logprobs") is None:
        return {}
    h = hit[-1]
    hit_delta = request_delta(read(run.dir / h["metrics_before"]), read(run.dir / h["metrics_after"]))
    tol = float(run.meta["plan"].get("logprob_tolerance", 0.05))
    return lp_mod.verdict(lp_mod.compare(rec["logprobs"], h["logprobs"]), hit_delta["computed_tokens"] == computed, tol)


def check_run_geometry(run: Run, snaps: list[Snapshot]) -> None:
    """run.yaml's pool and blocks against the server log's (startup args, the offload worker's
    line) and the snapshots' cache_config_info, as the run contract checks a capture's."""
    log = run.dir / "server.log"
    if log.is_file():
        geometry.check_geometry(run.dir / "run.yaml", dict(run.meta.get("server") or {}), read_log_facts(log), snaps)


def measured_rows(run: Run) -> list[dict[str, Any]]:
    """One row per measured request of the run's final attempts (every cycle), with its metric deltas."""
    rows: list[dict[str, Any]] = []
    if run.meta.get("plan") is None:  # died before its first request (at server start)
        return rows
    block = run.meta["server"].get("offload_block_tokens")
    per_block = offload_block_bytes(run)
    tol = float(run.meta["plan"].get("gpu_hit_tolerance", 0.1))
    rounds = int(run.meta["plan"]["rounds"])
    parsed: dict[Path, Snapshot] = {}

    def read(path: Path) -> Snapshot:  # each snapshot parsed once (a cycle's hit is read again by its restores)
        if path not in parsed:
            parsed[path] = Snapshot.read(path)
        return parsed[path]

    for cycle in range(1, run.cycles + 1):
        conv = run.conversation(cycle)
        codes, prompt = conv["codes"], int(conv["prompt_tokens"])
        for phase in MEASURED_PHASES:
            for round_ in ([0] if phase != "restore" else range(1, rounds + 1)):
                for rec in run.final(phase, round_, cycle):
                    if rec["status"] != "ok":
                        continue
                    before = read(run.dir / rec["metrics_before"])
                    after = read(run.dir / rec["metrics_after"])
                    c = restore_checks(before, after, prompt, block, tol, per_block)
                    c.update(exact_blocks(c))
                    t, src = ttft(rec)
                    lp = _logprob_check(run, rec, cycle, c["computed_tokens"], read) if phase == "restore" else {}
                    rows.append({
                        "setup": run.setup, "run": run.name, "provenance": run.meta["provenance"], "tier": run.meta["server"]["tier"],
                        "cycle": cycle, "phase": phase, "round": round_,
                        "seq": rec["seq"], "attempt": rec["attempt"], "ttft_s": t, "ttft_source": src,
                        "first_byte_s": rec.get("first_byte_s"), "total_s": rec.get("total_s"), "prompt_tokens": prompt,
                        "gpu_hit_tokens": c["gpu_hit_tokens"], "pool_tokens": c["pool_tokens"], "computed_tokens": c["computed_tokens"],
                        "load_bytes": c["load_bytes"], "load_time_s": c["load_time_s"], "blocks_moved": c["blocks_moved"],
                        "blocks_served": c["blocks_served"], "blocks_moved_exact": c["blocks_moved_exact"],
                        "blocks_served_exact": c["blocks_served_exact"], "block_tokens": c["block_tokens"],
                        "bytes_per_block": c["bytes_per_block"], "evicted": c["evicted"], "recomputed": c["recomputed"],
                        "codes_expected": len(codes), "codes_found": len(find_codes(rec.get("answer") or "", codes)),
                        "kv_cache_tokens": before.kv_cache_tokens(), "pool_bytes": after.offload_pool_bytes(),
                        "logprob_max_diff": lp.get("max_abs_diff"), "logprob_passed": lp.get("passed"),
                        "logprob_same_compute": lp.get("same_compute"), "logprob_positions": lp.get("positions"),
                        "run_dir": run.dir.as_posix(), "metrics_before": rec["metrics_before"], "metrics_after": rec["metrics_after"],
                    })
    check_run_geometry(run, [parsed[p] for p in list(parsed)[:1] + list(parsed)[-1:]])
    return rows


def run_summary(run: Run, rows: pd.DataFrame) -> dict[str, Any]:
    """The verdict on one run, recomputed from its rows."""
    cold = rows[rows.phase == "cold"]
    restores = rows[rows.phase == "restore"].sort_values(["cycle", "round"])
    plan = run.meta.get("plan") or {}
    complete = (run.meta["status"] == "complete" and not cold.empty
                and len(restores) == int(plan.get("rounds", 0)) * run.cycles)
    excluded = bool(complete and (cold.codes_found < cold.codes_expected).any())
    evicted = bool(complete and restores.evicted.all())
    # a cold read that found the conversation cached (a resumed run on the same server) is no cold read
    tol = float(plan.get("gpu_hit_tolerance", 0.1))
    cold_ok = bool(complete and ((cold.gpu_hit_tokens + cold.pool_tokens) <= tol * cold.prompt_tokens).all())
    gpu = run.meta["host"].get("gpu") or {}
    server = run.meta["server"]
    pool = rows.pool_bytes.dropna()
    load = run.meta.get("host_load") or {}
    interval = load_interval_s(run.dir / load["file"]) if load.get("file") and (run.dir / load["file"]).exists() else None
    return {
        "setup": run.setup, "run": run.name, "provenance": run.meta["provenance"], "status": run.meta["status"],
        "tier": server["tier"], "platform": server.get("platform", "cuda"), "cycles": run.cycles, "complete": complete, "excluded": excluded, "evicted": evicted, "cold_verified": cold_ok,
        "valid": complete and not excluded and evicted and cold_ok,
        "model": run.meta["model"]["served_name"], "model_params": run.meta["model"].get("params"),
        "gpu": gpu.get("name", "none (CPU)"), "gpu_memory_bytes": gpu.get("memory_total_mib", 0) * MiB if gpu else None,
        "ram_pool_bytes": int(pool.iloc[0]) if len(pool) else (server.get("offload_gib", 0) * GiB or None),
        "kv_cache_tokens": rows.kv_cache_tokens.dropna().iloc[0] if rows.kv_cache_tokens.notna().any() else None,
        "prompt_tokens": int(run.conversation(1)["prompt_tokens"]) if run.meta.get("conversation") else None,
        "target_tokens": plan.get("target_tokens"), "evictors": plan.get("evictors"),
        "codes": len(run.meta["conversation"]["codes"]) if run.meta.get("conversation") else None,
        "health_wait_s": server.get("health_wait_s"),
        "started": str(run.meta["started"]), "record_set": record_set(run.meta, run.name),
        "cpus": run.meta["host"].get("cpus"), "load1_median": load.get("load1_median"), "load1_max": load.get("load1_max"),
        "steal_share": load.get("steal_share"), "load_interval_s": interval,
        "run_dir": run.dir.as_posix(),
    }


def load(run_dirs: list[Path], run_schema: Path, request_schema: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All runs -> (measured requests, one row per run)."""
    reqs, runs = [], []
    for d in run_dirs:
        run = read_run(d, run_schema, request_schema)
        rows = pd.DataFrame(measured_rows(run))
        if rows.empty:
            rows = pd.DataFrame(columns=["phase", "round", "cycle", "codes_found", "codes_expected", "evicted", "pool_bytes",
                                         "kv_cache_tokens", "gpu_hit_tokens", "pool_tokens", "prompt_tokens"])
        runs.append(run_summary(run, rows))
        reqs.append(rows)
    return pd.concat(reqs, ignore_index=True), pd.DataFrame(runs)


def table_runs(runs: pd.DataFrame, setups: list[str]) -> pd.DataFrame:
    """The run that stands for each setup in Table 1: its latest valid run, by recorded start time."""
    valid = runs[runs.valid & runs.setup.isin(setups)].sort_values(["started", "run"])
    missing = [s for s in setups if s not in set(valid.setup)]
    if missing:
        raise RawRecordError("raw/eviction", f"no valid run (complete, codes on the cold read, evicted) for setup(s) {missing}")
    return valid.groupby("setup").tail(1).set_index("setup").loc[setups]


def _phase(reqs: pd.DataFrame, run: str, phase: str, round_: int = 0, cycle: int = 1) -> pd.Series:
    sel = reqs[(reqs.run == run) & (reqs.phase == phase) & (reqs["round"] == round_) & (reqs.cycle == cycle)]
    return sel.iloc[-1]


def table1(reqs: pd.DataFrame, runs: pd.DataFrame, setups: list[str]) -> pd.DataFrame:
    """Table 1: per setup, TTFT cold / hit / restore (first round), ratios, bytes and codes."""
    chosen = table_runs(runs, setups)
    out = []
    for setup, r in chosen.iterrows():
        cold, hit, rest = (_phase(reqs, r.run, p, k) for p, k in (("cold", 0), ("hit", 0), ("restore", 1)))
        restores = reqs[(reqs.run == r.run) & (reqs.phase == "restore")]
        out.append({
            "setup": setup, "run": r.run, "provenance": r.provenance, "gpu": r.gpu, "gpu_memory_bytes": r.gpu_memory_bytes,
            "model_params": r.model_params, "kv_cache_tokens": r.kv_cache_tokens, "ram_pool_bytes": r.ram_pool_bytes,
            "prompt_tokens": r.prompt_tokens, "target_tokens": r.target_tokens, "evictors": r.evictors,
            "ttft_cold_s": cold.ttft_s, "ttft_hit_s": hit.ttft_s, "ttft_restore_s": rest.ttft_s,
            "ratio_cold_restore": cold.ttft_s / rest.ttft_s, "restore_minus_hit_s": rest.ttft_s - hit.ttft_s,
            "restore_bytes": rest.load_bytes, "blocks_moved": rest.blocks_moved, "blocks_served": rest.blocks_served,
            "restored_requests": len(restores), "restored_with_codes": int((restores.codes_found == restores.codes_expected).sum()),
            "codes": r.codes,
        })
    return pd.DataFrame(out)


def run_files(reqs: pd.DataFrame, runs: pd.DataFrame, names: Any, meta_only: bool = False) -> list[str]:
    """The raw files of these runs that the analysis reads: run.yaml, requests.jsonl and the
    snapshots around each measured request (run.yaml alone for facts the run declares)."""
    out: set[str] = set()
    names = set(names)
    for d in runs.loc[runs.run.isin(names), "run_dir"]:
        out.add(f"{d}/run.yaml")
        if not meta_only:
            out.add(f"{d}/requests.jsonl")
    if not meta_only:
        for r in reqs[reqs.run.isin(names)].itertuples(index=False):
            out.update((f"{r.run_dir}/{r.metrics_before}", f"{r.run_dir}/{r.metrics_after}"))
    return sorted(out)


def register_numbers(writer: Any, reqs: pd.DataFrame, runs: pd.DataFrame, setups: list[str], cpu_setup: str | None,
                     max_load_per_cpu: float = 3.0) -> pd.DataFrame:
    """Register Table 1's numbers and the aggregates; each lists the raw files of the runs it
    rests on (writer.reading), so setup A's numbers do not cite setup C or the CPU runs."""
    t = table1(reqs, runs, setups)
    for row in t.itertuples(index=False):
        p = f"evict.{row.setup}."
        writer.reading(*run_files(reqs, runs, [row.run]))
        writer.add(p + "ttft.cold", row.ttft_cold_s, "s")
        writer.add(p + "ttft.hit", row.ttft_hit_s, "s")
        writer.add(p + "ttft.restore", row.ttft_restore_s, "s")
        writer.add(p + "ratio_cold_restore", row.ratio_cold_restore, "x")
        writer.add(p + "restore_minus_hit", row.restore_minus_hit_s, "s")
        writer.add(p + "prompt_tokens", row.prompt_tokens, "tokens")
        writer.add(p + "evictors", row.evictors, "count")
        writer.add(p + "restored_requests", row.restored_requests, "requests")
        writer.add(p + "restored_with_codes", row.restored_with_codes, "requests")
        if not pd.isna(row.restore_bytes):
            writer.add(p + "restore_bytes", row.restore_bytes, "B")
        if not pd.isna(row.blocks_moved):
            writer.add(p + "blocks_moved", int(row.blocks_moved), "blocks")
        if not pd.isna(row.blocks_served):
            writer.add(p + "blocks_served", int(row.blocks_served), "blocks")
        if row.kv_cache_tokens:
            writer.add(p + "gpu_pool_tokens", int(row.kv_cache_tokens), "tokens")
        if row.ram_pool_bytes:
            writer.add(p + "ram_pool", row.ram_pool_bytes, "B")
        writer.reading(*run_files(reqs, runs, [row.run], meta_only=True))  # what run.yaml declares
        if row.gpu_memory_bytes:
            writer.add(p + "gpu_memory", row.gpu_memory_bytes, "B")
        if pd.notna(row.model_params):
            writer.add(p + "model_params", int(row.model_params), "count")
    scope = runs[runs.setup.isin(setups)]
    writer.reading(*run_files(reqs, runs, t.run))
    codes = set(t.codes)
    if len(codes) != 1:
        raise ValueError(f"runs of Table 1 hide different numbers of codes: {sorted(codes)}")
    per_setup = scope[scope.valid].groupby("setup").size()
    writer.add("evict.codes_per_conversation", codes.pop(), "count")
    block = set(reqs[reqs.run.isin(t.run) & (reqs.phase == "restore")].block_tokens.dropna().astype(int))
    if len(block) == 1:
        writer.add("evict.block_tokens", block.pop(), "tokens", note="offloaded block size of the Table 1 runs")
    writer.add("evict.restored_requests", int(t.restored_requests.sum()), "requests")
    writer.add("evict.restored_with_codes", int(t.restored_with_codes.sum()), "requests")
    writer.reading(*run_files(reqs, runs, scope.run))  # counted over every run of the setups
    writer.add("evict.excluded_runs", int(scope.excluded.sum()), "count", note="complete runs whose cold read missed a code")
    writer.add("evict.runs_per_setup", int(per_setup.max()), "count",
               note="valid runs per setup" + ("" if per_setup.nunique() == 1 else f" (differs: {per_setup.to_dict()})"))
    writer.reading(*run_files(reqs, runs, t.run))
    writer.add("evict.prompt_tokens", float(t.prompt_tokens.mean()), "tokens", note="mean conversation length over the setups")
    targets = set(t.target_tokens)
    if len(targets) == 1:
        writer.add("evict.target_tokens", targets.pop(), "tokens", note="size the conversations were built to")
    writer.add("evict.max_ratio", float(t.ratio_cold_restore.max()), "x")
    writer.add("evict.hit_mean", float(t.ttft_hit_s.mean()), "s")
    if cpu_setup:
        _cpu_numbers(writer, reqs, runs, cpu_setup, max_load_per_cpu)
    return t


def _spread(writer: Any, key: str, values: pd.Series, unit: str) -> None:
    """Median, range, count and (six values on) the 95% interval of the median (eviction.cpuset.spread)."""
    sp = spread(values)
    if sp is None:
        return
    writer.add(key + ".median", sp["median"], unit)
    writer.add(key + ".min", sp["min"], unit)
    writer.add(key + ".max", sp["max"], unit)
    writer.add(key + ".n", sp["n"], "count")
    if "ci95_lo" in sp:
        writer.add(key + ".ci95_lo", sp["ci95_lo"], unit, note="95% interval of the median, order statistics")
        writer.add(key + ".ci95_hi", sp["ci95_hi"], unit, note="95% interval of the median, order statistics")


def _cpu_numbers(writer: Any, reqs: pd.DataFrame, runs: pd.DataFrame, setup: str, max_load_per_cpu: float) -> None:
    """The measured runs on vLLM's CPU build, as an instrument: the latest record set (by recorded
    start), per tier (native CPU tier, no-offload control) its launches, those flagged for load, and
    the cycles of the others pooled: median, range and 95% interval. Keys: evict.<setup>.<tier>.*"""
    done = runs[(runs.setup == setup) & runs.complete & runs.cold_verified]
    if done.empty:
        return
    done = flag_load(done, max_load_per_cpu)
    name, current, earlier = latest_set(done)
    writer.reading(*run_files(reqs, runs, done.run, meta_only=True))
    writer.add(f"evict.{setup}.earlier_sets", int(earlier.record_set.nunique()), "count",
               note="earlier record sets of this setup, pinned but not in the medians")
    writer.add(f"evict.{setup}.earlier_launches", len(earlier), "count")
    writer.reading(*run_files(reqs, runs, current.run, meta_only=True))
    writer.add(f"evict.{setup}.launches", len(current), "count", note=f"launches of record set {name}, every tier")
    writer.add(f"evict.{setup}.launches_flagged", int(current.load_flagged.sum()), "count",
               note="launches whose median 1-minute load exceeded the threshold: out of the medians")
    writer.add(f"evict.{setup}.launches_unsampled", int((~current.load_sampled).sum()), "count")
    writer.reading()
    writer.add(f"evict.{setup}.max_load_per_cpu", float(max_load_per_cpu), "x", note="load threshold per CPU (config)")
    writer.add(f"evict.{setup}.ci_level", CI_LEVEL, "fraction", note="confidence of the interval beside each median")
    writer.add(f"evict.{setup}.ci_min_n", CI_MIN_N, "count", note="fewest values with such an interval")
    if current.load_sampled.any():
        writer.reading(*run_files(reqs, runs, current.run, meta_only=True))
        sampled = current[current.load_sampled]
        writer.add(f"evict.{setup}.load_threshold", float(sampled.load_threshold.iloc[0]), "x", note="1-minute load average")
        _spread(writer, f"evict.{setup}.load1_median", sampled.load1_median, "x")
        writer.reading(*sorted(f"{d}/host_load.tsv" for d in sampled.run_dir))
        writer.add(f"evict.{setup}.load_interval", float(sampled.load_interval_s.median()), "s",
                   note="median time between load samples")
        writer.add(f"evict.{setup}.load1_max", float(sampled.load1_max.max()), "x")
        if sampled.steal_share.notna().any():
            writer.add(f"evict.{setup}.steal_share_max", float(sampled.steal_share.max()), "fraction")
    for tier, group in current.groupby("tier"):
        kept = group[~group.load_flagged]
        p = f"evict.{setup}.{tier}."
        writer.reading(*run_files(reqs, runs, group.run, meta_only=True))
        writer.add(p + "launches", len(group), "count")
        writer.add(p + "launches_flagged", int(group.load_flagged.sum()), "count")
        # every launch above the threshold: the medians are over all of them, and say so (all_flagged)
        writer.add(p + "all_flagged", int(kept.empty), "count", note="1: no launch below the load threshold")
        if kept.empty:
            kept = group
        r = kept.iloc[0]
        rows = reqs[reqs.run.isin(kept.run)]
        cold, hit, rest = (rows[rows.phase == ph].sort_values(["run", "cycle"]) for ph in ("cold", "hit", "restore"))
        rest = rest[rest["round"] == 1]
        writer.reading(*run_files(reqs, runs, kept.run))
        writer.add(p + "launches_used", len(kept), "count")
        writer.add(p + "cycles", int(kept.cycles.sum()), "count", note="cycles of the launches kept, pooled")
        writer.add(p + "cycles_per_launch", int(kept.cycles.min()), "count")
        for name_, frame in (("cold", cold), ("hit", hit), ("restore", rest)):
            _spread(writer, p + f"ttft.{name_}", frame.ttft_s, "s")
        ratio = cold.set_index(["run", "cycle"]).ttft_s / rest.set_index(["run", "cycle"]).ttft_s
        _spread(writer, p + "ratio_cold_restore", ratio, "x")
        for col in ("gpu_hit_tokens", "pool_tokens", "computed_tokens"):
            _spread(writer, p + f"restore.{col}", rest[col], "tokens")
        _spread(writer, p + "cold.gpu_hit_tokens", cold.gpu_hit_tokens, "tokens")
        _spread(writer, p + "hit.gpu_hit_tokens", hit.gpu_hit_tokens, "tokens")
        _spread(writer, p + "prompt_tokens", cold.prompt_tokens, "tokens")
        writer.add(p + "restores_from_pool", int((rest.pool_tokens > 0).sum()), "requests")
        writer.add(p + "restores_evicted", int(rest.evicted.sum()), "requests")
        writer.add(p + "restores_gpu_hit_tokens", float(rest.gpu_hit_tokens.sum()), "tokens")
        writer.add(p + "kv_cache_tokens", int(r.kv_cache_tokens), "tokens")
        writer.add(p + "evictors", int(r.evictors), "count")
        writer.add(p + "evictor_tokens_over_cache", r.evictors * r.prompt_tokens / r.kv_cache_tokens, "x")
        if pd.notna(r.model_params):
            writer.add(p + "model_params", int(r.model_params), "count")
        if kept.health_wait_s.notna().any():
            _spread(writer, p + "health_wait", kept.health_wait_s, "s")
        if rest.load_bytes.notna().any() and (rest.load_bytes > 0).any():
            _spread(writer, p + "restore_bytes", rest.load_bytes, "B")
            _spread(writer, p + "blocks_moved", rest.blocks_moved_exact, "blocks")
            _spread(writer, p + "blocks_served", rest.blocks_served_exact, "blocks")
            # moved minus served, from whole numbers (bytes x tokens) so that equality is exact
            extra = ((rest.load_bytes * rest.block_tokens - rest.pool_tokens * rest.bytes_per_block)
                     / (rest.bytes_per_block * rest.block_tokens))
            _spread(writer, p + "extra_blocks", extra, "blocks")
            writer.add(p + "block_tokens", int(rest.block_tokens.dropna().iloc[0]), "tokens")
            writer.add(p + "bytes_per_block", int(rest.bytes_per_block.dropna().iloc[0]), "B")
            if r.ram_pool_bytes:
                writer.add(p + "ram_pool", float(r.ram_pool_bytes), "B")
        checked = rest[rest.logprob_passed.notna()]
        if not checked.empty:
            writer.add(p + "logprobs.checked", len(checked), "requests")
            writer.add(p + "logprobs.passed", int(checked.logprob_passed.astype(bool).sum()), "requests")
            writer.add(p + "logprobs.failed", int((~checked.logprob_passed.astype(bool)).sum()), "requests")
            writer.add(p + "logprobs.same_compute", int(checked.logprob_same_compute.astype(bool).sum()), "requests")
            writer.add(p + "logprobs.max_abs_diff", float(checked.logprob_max_diff.astype(float).max()), "nats")
            writer.add(p + "logprobs.positions", int(checked.logprob_positions.min()), "count")


def table1_markdown(t: pd.DataFrame) -> str:
    """Table 1 as a Markdown table for results/ (the note builds its own from the registry)."""
    head = "| Setup | GPU | Model params | Prompt tokens | Evictors | TTFT cold | TTFT hit | TTFT restored | Cold / restored | Restored − hit | Bytes restored | Restored requests with all codes |"
    from ..render.env import md_cell

    lines = [head, "|" + "---|" * 12]
    for r in t.itertuples(index=False):
        params = f"{r.model_params / 1e9:.0f}B" if pd.notna(r.model_params) else "not recorded"
        lines.append(f"| {md_cell(r.setup)} | {md_cell(r.gpu)} | {params} | {r.prompt_tokens:,} | {r.evictors} | "
                     f"{r.ttft_cold_s:.2f} s | {r.ttft_hit_s:.2f} s | {r.ttft_restore_s:.2f} s | {r.ratio_cold_restore:.0f}× | "
                     f"{r.restore_minus_hit_s:.2f} s | {r.restore_bytes / 1e9:.1f} GB | {r.restored_with_codes} of {r.restored_requests} |")
    return "\n".join(lines) + "\n"


def figure_1a(t: pd.DataFrame, out: str | Path) -> None:
    """Figure 1a: TTFT cold, hit and restored per setup (log scale), one row of bars per setup
    so the labels stay legible on a phone; each bar carries its value, each setup its ratio."""
    from ..render.svg import OKABE_ITO, WIDTH, panels, plain_log_ticks

    kinds = [("ttft_cold_s", "read cold", OKABE_ITO["vermillion"]), ("ttft_hit_s", "hit in GPU memory", OKABE_ITO["sky"]),
             ("ttft_restore_s", "restored from RAM", OKABE_ITO["blue"])]
    fig, ax = panels(1, 0.75 + 0.95 * len(t))
    fig.set_size_inches(WIDTH, 0.75 + 0.95 * len(t))
    height = 0.26
    y = np.arange(len(t))[::-1].astype(float)
    for i, (col, label, color) in enumerate(kinds):
        vals = t[col].to_numpy(dtype=float)
        bars = ax.barh(y + (1 - i) * height, vals, height, label=label, color=color)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.2f} s", (v, b.get_y() + b.get_height() / 2), ha="left", va="center",
                        xytext=(3, 0), textcoords="offset points")
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_xlim(right=float(t.ttft_cold_s.max()) * 6)
    ax.set_yticks(y, [f"setup {r.setup}\n{r.ratio_cold_restore:.0f}× sooner" for r in t.itertuples(index=False)])
    ax.set_xlabel("time to first token (s, log scale)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.32), ncol=3, handlelength=1, columnspacing=0.8)
    fig.tight_layout()
    save_svg(fig, out, "fig1a")
