"""Eviction-test records -> tidy table, Table 1, Figure 1a and the `evict.*` numbers.

Nothing is taken on trust from run.yaml's own verdicts: codes are found again in the raw
answers, eviction and bytes restored are derived again from the raw /metrics snapshots.
A run enters Table 1 only if it completed, its cold read returned every code (else it is
excluded, as the note excludes one) and its restore found the prefix outside GPU memory.
Provenance is read off the records (kvtier.records.traced): each cell of the request and run
tables carries the files it was read from, and a number names the cells its computation read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from .. import links, loadrule
from ..links import Link
from ..errors import RawRecordError
from ..records.serverlog_facts import read_log_facts
from ..records import geometry
from ..records.evictionrun import MEASURED_PHASES, EvictionRun, read_run
from ..records.prometheus import Snapshot
from ..records.runcontract_counters import check_prompt_sources
from ..records.touch import quiet
from ..records.traced import Row, TracedFrame, plain
from . import checks as ck
from . import logprobs as lp_mod
from .conversation import find_codes
from .cpuset import CI_LEVEL, CI_MIN_N, flag_load, latest_set, load_interval_s, record_set, spread
from ..render.svg import save_svg

Run = EvictionRun  # the old name
MiB = 2**20
GiB = 2**30
EMPTY_ROWS = ["phase", "round", "cycle", "codes_found", "codes_expected", "evicted", "pool_bytes", "kv_cache_tokens",
              "gpu_hit_tokens", "pool_tokens", "prompt_tokens"]


def ttft(rec: Mapping[str, Any]) -> tuple[float, str]:
    """Client TTFT: first visible text; the first streamed chunk if the model emitted no text."""
    if rec.get("ttft_s") is not None:
        return float(rec["ttft_s"]), "text"
    if rec.get("first_chunk_s") is not None:
        return float(rec["first_chunk_s"]), "first_chunk"
    raise RawRecordError(f"requests.jsonl (seq {rec['seq']})", "request has neither ttft_s nor first_chunk_s")


def offload_block_bytes(run: EvictionRun) -> int | None:
    """Bytes of one offloaded block without kv_offload_config_info (vLLM 0.32): the raw server log's
    kvtier worker line first, else what run.yaml recorded from the model's geometry (records.geometry
    checks the two against each other)."""
    recorded = plain(run.meta)["server"].get("offload_block_bytes") or {}
    from_log = run.logged_block_bytes()
    if not from_log and recorded.get("model"):
        run.meta["server"]["offload_block_bytes"]["model"]  # the value is run.yaml's: read it there (touches)
    return geometry.offload_block_bytes(from_log, recorded, run.server_log or run.dir / "server.log")


def check_run_geometry(run: EvictionRun, snaps: list[Snapshot]) -> None:
    """run.yaml's pool and blocks against the server log's (startup args, the offload worker's
    line) and the snapshots' cache_config_info, as the run contract checks a capture's. A check:
    it reads without touching (records.touch.quiet)."""
    if run.server_log is not None:
        with quiet():
            geometry.check_geometry(run.run_yaml, dict(plain(run.meta).get("server") or {}), read_log_facts(run.server_log),
                                    snaps)


def _tolerance(meta: Mapping[str, Any]) -> float:
    return float(meta["plan"].get("gpu_hit_tolerance", 0.1))


def _logprob_cells(row: Row, run: EvictionRun, rec: Mapping[str, Any], cycle: int) -> None:
    """The restored request's logprobs against its cycle's hit, recomputed from the raw records:
    the comparison reads the two answers, whether both computed the same tokens their snapshots."""
    hit = [r for r in run.final("hit", 0, cycle) if plain(r)["status"] == "ok"]
    if not hit or plain(rec).get("logprobs") is None or plain(hit[-1]).get("logprobs") is None:
        row.update(logprob_max_diff=None, logprob_passed=None, logprob_same_compute=None, logprob_positions=None)
        return
    h = hit[-1]
    row.put("_cmp", lambda: lp_mod.compare(plain(rec["logprobs"]), plain(h["logprobs"])))
    row.put("_same", lambda: ck.request_delta(run.snapshot(plain(h)["metrics_before"]),
                                              run.snapshot(plain(h)["metrics_after"]))["computed_tokens"]
            == row["computed_tokens"], after=("computed_tokens",))
    row.put("_verdict", lambda m: lp_mod.verdict(row["_cmp"], row["_same"], float(m["plan"].get("logprob_tolerance", 0.05))),
            run.meta, after=("_cmp", "_same"))
    verdict = row["_verdict"]  # its values, each given the files of what it is computed from
    row.put("logprob_max_diff", lambda: verdict.get("max_abs_diff"), after=("_cmp",))
    row.put("logprob_passed", lambda: verdict.get("passed"), after=("_verdict",))
    row.put("logprob_same_compute", lambda: verdict.get("same_compute"), after=("_same",))
    row.put("logprob_positions", lambda: verdict.get("positions"), after=("_cmp",))
    row.pop("_same")
    row.pop("_cmp"), row.pop("_verdict")


def _request_row(run: EvictionRun, rec: Mapping[str, Any], cycle: int, phase: str, round_: int,
                 per_block: Any) -> Row:
    """One measured request: each cell computed from the records it rests on (records.traced)."""
    raw = plain(rec)
    before, after = run.snapshot(raw["metrics_before"]), run.snapshot(raw["metrics_after"])
    conv = run.conversation(cycle)
    row = Row()
    row.update(setup=run.setup, run=run.name, provenance=plain(run.meta)["provenance"], tier=plain(run.meta)["server"]["tier"],
               cycle=cycle, phase=phase, round=round_, seq=raw["seq"], attempt=raw["attempt"])
    t = row.put("_ttft", ttft, rec)
    row["ttft_s"], row["ttft_source"] = t[0], t[1]
    row.src["ttft_s"] = row.src["ttft_source"] = row.src.pop("_ttft")
    row.pop("_ttft")
    row.put("first_byte_s", lambda: rec.get("first_byte_s"))
    row.put("total_s", lambda: rec.get("total_s"))
    prompt = row.put("prompt_tokens", lambda: int(conv["prompt_tokens"]))
    d = row.put("_delta", ck.request_delta, before, after)
    for k in ("gpu_hit_tokens", "pool_tokens", "computed_tokens", "load_bytes", "load_time_s"):
        row.put(k, lambda: d[k], after=("_delta",))
    row.pop("_delta")
    block = row.put("block_tokens", lambda: geometry.offload_block_tokens(after, run.meta["server"].get("offload_block_tokens")))
    per = row.put("bytes_per_block", geometry.offload_block_bytes_of, after, per_block)
    row.put("blocks_moved", ck.blocks_moved, d["load_bytes"], per)
    row.put("blocks_served", ck.blocks_served, d["pool_tokens"], block)
    def exact(key: str) -> Any:  # each quotient from its own two cells
        return ck.exact_blocks({"load_bytes": d["load_bytes"], "pool_tokens": d["pool_tokens"], "bytes_per_block": per,
                                "block_tokens": block})[key]
    row.put("blocks_moved_exact", exact, "blocks_moved_exact", after=("load_bytes", "bytes_per_block"))
    row.put("blocks_served_exact", exact, "blocks_served_exact", after=("pool_tokens", "block_tokens"))
    # reorder below: the table's columns keep the order they had
    row.put("evicted", lambda: ck.evicted(d["gpu_hit_tokens"], prompt, _tolerance(run.meta)),
            after=("gpu_hit_tokens", "prompt_tokens"))
    row.put("recomputed", lambda: ck.recomputed(d["computed_tokens"], prompt, _tolerance(run.meta)),
            after=("computed_tokens", "prompt_tokens"))
    codes = conv["codes"]
    row.put("codes_expected", lambda: len(codes))
    row.put("codes_found", lambda: len(find_codes(rec.get("answer") or "", list(codes))))
    row.put("kv_cache_tokens", before.kv_cache_tokens)
    row.put("pool_bytes", after.offload_pool_bytes)
    if phase == "restore":
        _logprob_cells(row, run, rec, cycle)
    else:
        row.update(logprob_max_diff=None, logprob_passed=None, logprob_same_compute=None, logprob_positions=None)
    row.update(run_dir=run.dir.as_posix(), metrics_before=raw["metrics_before"], metrics_after=raw["metrics_after"])
    out = Row()
    for k in ROW_COLUMNS:
        out[k] = row[k]
        if k in row.src:
            out.src[k] = row.src[k]
    return out


ROW_COLUMNS = ["setup", "run", "provenance", "tier", "cycle", "phase", "round", "seq", "attempt", "ttft_s", "ttft_source",
               "first_byte_s", "total_s", "prompt_tokens", "gpu_hit_tokens", "pool_tokens", "computed_tokens", "load_bytes",
               "load_time_s", "blocks_moved", "blocks_served", "blocks_moved_exact", "blocks_served_exact", "block_tokens",
               "bytes_per_block", "evicted", "recomputed", "codes_expected", "codes_found", "kv_cache_tokens", "pool_bytes",
               "logprob_max_diff", "logprob_passed", "logprob_same_compute", "logprob_positions", "run_dir", "metrics_before",
               "metrics_after"]


def measured_rows(run: EvictionRun) -> list[Row]:
    """One row per measured request of the run's final attempts (every cycle), with its metric deltas."""
    rows: list[Row] = []
    meta = plain(run.meta)
    if meta.get("plan") is None:  # died before its first request (at server start)
        return rows
    per_block = Row().put("b", offload_block_bytes, run)
    rounds = int(meta["plan"]["rounds"])
    for cycle in range(1, run.cycles + 1):
        for phase in MEASURED_PHASES:
            for round_ in ([0] if phase != "restore" else range(1, rounds + 1)):
                for rec in run.final(phase, round_, cycle):
                    if plain(rec)["status"] == "ok":
                        rows.append(_request_row(run, rec, cycle, phase, round_, per_block))
    snaps = list(run._snapshots.values())
    with quiet():  # the run contract's: by source adding up to the prompt tokens, in every scrape read
        for snap in snaps:
            check_prompt_sources(snap)
    check_run_geometry(run, snaps[:1] + snaps[-1:])
    return rows


def _first(rows: TracedFrame, column: str) -> TracedFrame:
    """The first row whose `column` is set (chosen without reading its value: a selection); taken
    by position, so only that row is copied, not every row that has one."""
    with quiet():
        has = rows[column].notna()
    return rows.iloc[np.flatnonzero(has.to_numpy())[:1]]


def run_summary(run: EvictionRun, rows: TracedFrame) -> Row:
    """The verdict on one run, recomputed from its rows; each cell with the files it read."""
    cold = rows[(rows.phase == "cold").to_numpy()]
    restores = rows[(rows.phase == "restore").to_numpy()].sort_values(["cycle", "round"])
    meta, m = plain(run.meta), run.meta
    r = Row()
    r.update(setup=run.setup, run=run.name, provenance=meta["provenance"], status=meta["status"], tier=meta["server"]["tier"],
             platform=meta["server"].get("platform", "cuda"))
    r.put("cycles", lambda: run.cycles)
    complete = r.put("complete", lambda: bool(m["status"] == "complete" and not cold.empty
                                             and len(restores) == int((m.get("plan") or {}).get("rounds", 0)) * run.cycles))
    excluded = r.put("excluded", lambda: bool(complete and (cold.codes_found < cold.codes_expected).any()), after=("complete",))
    evicted = r.put("evicted", lambda: bool(complete and restores.evicted.all()), after=("complete",))
    # a cold read that found the conversation cached (a resumed run on the same server) is no cold read
    cold_ok = r.put("cold_verified", lambda: bool(complete and ((cold.gpu_hit_tokens + cold.pool_tokens)
                                                                <= float((m.get("plan") or {}).get("gpu_hit_tolerance", 0.1))
                                                                * cold.prompt_tokens).all()), after=("complete",))
    r.put("valid", lambda: bool(complete and not excluded and evicted and cold_ok),
          after=("complete", "excluded", "evicted", "cold_verified"))
    r.put("model", lambda: m["model"]["served_name"])
    r.put("model_params", lambda: m["model"].get("params"))
    gpu = meta["host"].get("gpu") or {}
    r.put("gpu", lambda: (m["host"].get("gpu") or {}).get("name", "none (CPU)"))
    r.put("gpu_memory_bytes", lambda: m["host"]["gpu"].get("memory_total_mib", 0) * MiB if gpu else None)
    pool = _first(rows, "pool_bytes")
    r.put("ram_pool_bytes", lambda: int(pool.pool_bytes.iloc[0]) if len(pool) else (m["server"].get("offload_gib", 0) * GiB or None))
    kv = _first(rows, "kv_cache_tokens")
    r.put("kv_cache_tokens", lambda: kv.kv_cache_tokens.iloc[0] if len(kv) else None)
    r.put("prompt_tokens", lambda: int(run.conversation(1)["prompt_tokens"]) if "conversation" in m and meta["conversation"] else None)
    r.put("target_tokens", lambda: (m.get("plan") or {}).get("target_tokens"))
    r.put("evictors", lambda: (m.get("plan") or {}).get("evictors"))
    r.put("codes", lambda: len(m["conversation"]["codes"]) if meta.get("conversation") else None)
    r.put("health_wait_s", lambda: m["server"].get("health_wait_s"))
    r.put("started", lambda: str(m["started"]))
    r.put("record_set", lambda: record_set(m, run.name))
    r.put("cpus", lambda: m["host"].get("cpus"))
    load = m.get("host_load") or {}
    r.put("load1_median", load_median, run)  # from the samples (the load rule), the summary checked against them
    for k in ("load1_max", "steal_share"):
        r.put(k, lambda: load.get(k))
    r.put("load_interval_s", lambda: load_interval_s(run.load_series()) if run.host_load is not None else None)
    r["run_dir"] = run.dir.as_posix()
    return r


def load_median(run: EvictionRun) -> float | None:
    """The launch's median 1-minute load over its host_load.tsv samples (kvtier.loadrule), after
    checking that run.yaml's rounded summary (host_load.load1_median) says the same; None without
    samples (the launch cannot be judged: kept, counted as unsampled)."""
    series = run.load_series()
    if not series:
        return None
    median = loadrule.median_load(r["load1"] for r in series)
    recorded = (run.meta.get("host_load") or {}).get("load1_median")
    loadrule.check_summary(recorded, median, 2, run.run_yaml, run.host_load or run.dir, "run.yaml's host_load.load1_median")
    return median


def load(run_dirs: list[Path], run_schema: Path, request_schema: Path) -> tuple[TracedFrame, TracedFrame]:
    """All runs -> (measured requests, one row per run), tables whose cells carry their files."""
    return tables([read_run(d, run_schema, request_schema) for d in run_dirs])


def tables(read: list[EvictionRun]) -> tuple[TracedFrame, TracedFrame]:
    """Runs already read (read_run) -> the tables of `load`: for a caller that reads more of the
    same runs, which are then read and validated once."""
    reqs, runs = [], []
    for run in read:
        rows = TracedFrame.from_rows(measured_rows(run))
        if rows.empty:
            rows = TracedFrame(columns=EMPTY_ROWS)
        runs.append(run_summary(run, rows))
        reqs.append(rows)
    return TracedFrame(pd.concat(reqs, ignore_index=True)), TracedFrame.from_rows(runs)


def table_runs(runs: pd.DataFrame, setups: list[str]) -> pd.DataFrame:
    """The run that stands for each setup in Table 1: its latest valid run, by recorded start time."""
    valid = runs[runs.valid & runs.setup.isin(setups)].sort_values(["started", "run"])
    missing = [s for s in setups if s not in set(valid.setup)]
    if missing:
        raise RawRecordError("raw/eviction", f"no valid run (complete, codes on the cold read, evicted) for setup(s) {missing}")
    return valid.groupby("setup").tail(1).set_index("setup").loc[setups]


def _phase(reqs: pd.DataFrame, run: str, phase: str, round_: int = 0, cycle: int = 1) -> pd.DataFrame:
    """The request of a run's phase, as a one-row table (its cells' files read with it)."""
    sel = reqs[((reqs.run == run) & (reqs.phase == phase) & (reqs["round"] == round_) & (reqs.cycle == cycle)).to_numpy()]
    return sel.tail(1)


def table1(reqs: pd.DataFrame, runs: pd.DataFrame, setups: list[str]) -> TracedFrame:
    """Table 1: per setup, TTFT cold / hit / restore (first round), ratios, bytes and codes."""
    with quiet():  # which run stands for a setup is a selection: its verdicts are not its values
        chosen = table_runs(runs, setups)
    out = []
    for setup in setups:
        r = chosen.loc[[setup]]
        name = plain(r.run.iloc[0])
        cold, hit, rest = (_phase(reqs, name, p, k) for p, k in (("cold", 0), ("hit", 0), ("restore", 1)))
        restores = reqs[((reqs.run == name) & (reqs.phase == "restore")).to_numpy()]
        row = Row()
        row.update(setup=setup, run=name, provenance=r.provenance.iloc[0])
        for col in ("gpu", "gpu_memory_bytes", "model_params", "kv_cache_tokens", "ram_pool_bytes", "prompt_tokens",
                    "target_tokens", "evictors"):
            row.put(col, lambda: r[col].iloc[0])
        row.put("ttft_cold_s", lambda: cold.ttft_s.iloc[0])
        row.put("ttft_hit_s", lambda: hit.ttft_s.iloc[0])
        row.put("ttft_restore_s", lambda: rest.ttft_s.iloc[0])
        row.put("ratio_cold_restore", lambda: cold.ttft_s.iloc[0] / rest.ttft_s.iloc[0])
        row.put("restore_minus_hit_s", lambda: rest.ttft_s.iloc[0] - hit.ttft_s.iloc[0])
        row.put("restore_bytes", lambda: rest.load_bytes.iloc[0])
        row.put("restore_copy_s", lambda: rest.load_time_s.iloc[0])  # the server's own load-time counter
        row.put("blocks_moved", lambda: rest.blocks_moved.iloc[0])
        row.put("blocks_served", lambda: rest.blocks_served.iloc[0])
        row.put("restored_requests", lambda: len(restores.ttft_s))
        row.put("restored_with_codes", lambda: int((restores.codes_found == restores.codes_expected).sum()))
        row.put("codes", lambda: r.codes.iloc[0])
        out.append(row)
    return TracedFrame.from_rows(out)


def _count(frame: pd.DataFrame, column: str) -> Callable[[], int]:
    """How many rows: counted over a column of theirs, so the count names the files it counts."""
    return lambda: len(frame[column])


def register_numbers(writer: Any, reqs: pd.DataFrame, runs: pd.DataFrame, setups: list[str], cpu_setup: str | None,
                     max_load_per_cpu: float = 3.0, host_links: Mapping[str, Link] | None = None) -> pd.DataFrame:
    """Register Table 1's numbers and the aggregates. Each is computed through writer.compute, so
    it names the files of the cells it read (setup A's numbers do not cite setup C or the CPU
    runs); which runs count is a selection made before, from the runs' verdicts."""
    T = writer.compute
    t = table1(reqs, runs, setups)
    for i in range(len(t)):
        row = t.iloc[[i]]
        one = row.iloc[0]  # for the conditions only: a value registered is read through T
        p = f"evict.{one.setup}."

        def v(col: str) -> Any:
            return T(lambda: row[col].iloc[0])
        writer.add(p + "ttft.cold", v("ttft_cold_s"), "s")
        writer.add(p + "ttft.hit", v("ttft_hit_s"), "s")
        writer.add(p + "ttft.restore", v("ttft_restore_s"), "s")
        writer.add(p + "ratio_cold_restore", v("ratio_cold_restore"), "x")
        writer.add(p + "restore_minus_hit", v("restore_minus_hit_s"), "s")
        writer.add(p + "prompt_tokens", v("prompt_tokens"), "tokens")
        writer.add(p + "evictors", v("evictors"), "count")
        writer.add(p + "restored_requests", v("restored_requests"), "requests")
        writer.add(p + "restored_with_codes", v("restored_with_codes"), "requests")
        if not pd.isna(one.restore_bytes):
            writer.add(p + "restore_bytes", v("restore_bytes"), "B")
        if not pd.isna(one.blocks_moved):
            writer.add(p + "blocks_moved", T(lambda: int(row.blocks_moved.iloc[0])), "blocks")
        if not pd.isna(one.blocks_served):
            writer.add(p + "blocks_served", T(lambda: int(row.blocks_served.iloc[0])), "blocks")
        if host_links and one.setup in host_links and not pd.isna(one.restore_bytes):
            _link_numbers(writer, p, host_links[one.setup],
                          {"copy": (lambda: row.restore_bytes.iloc[0], lambda: row.restore_copy_s.iloc[0]),
                           "minus_hit": (lambda: row.restore_bytes.iloc[0], lambda: row.restore_minus_hit_s.iloc[0])})
        if one.kv_cache_tokens:
            writer.add(p + "gpu_pool_tokens", T(lambda: int(row.kv_cache_tokens.iloc[0])), "tokens")
        if one.ram_pool_bytes:
            writer.add(p + "ram_pool", v("ram_pool_bytes"), "B")
        if one.gpu_memory_bytes:
            writer.add(p + "gpu_memory", v("gpu_memory_bytes"), "B")
        if pd.notna(one.model_params):
            writer.add(p + "model_params", T(lambda: int(row.model_params.iloc[0])), "count")
    scope = runs[runs.setup.isin(setups).to_numpy()]
    codes = T(lambda: sorted(set(t.codes)))
    if len(codes) != 1:
        raise ValueError(f"runs of Table 1 hide different numbers of codes: {sorted(codes)}")
    with quiet():
        per_setup = scope[scope.valid.to_numpy()].groupby("setup").size()
    writer.add("evict.codes_per_conversation", codes[0], "count")
    restores = reqs[(reqs.run.isin(t.run) & (reqs.phase == "restore")).to_numpy()]
    block = T(lambda: sorted(set(restores.block_tokens.dropna().astype(int))))
    if len(block) == 1:
        writer.add("evict.block_tokens", block[0], "tokens", note="offloaded block size of the Table 1 runs")
    writer.add("evict.restored_requests", T(lambda: int(t.restored_requests.sum())), "requests")
    writer.add("evict.restored_with_codes", T(lambda: int(t.restored_with_codes.sum())), "requests")
    # counted over every run of the setups: these read every run's verdicts
    writer.add("evict.excluded_runs", T(lambda: int(scope.excluded.sum())), "count",
               note="complete runs whose cold read missed a code")
    writer.add("evict.runs_per_setup", T(lambda: int(scope[scope.valid.to_numpy()].groupby("setup").size().max())), "count",
               note="valid runs per setup" + ("" if per_setup.nunique() == 1 else f" (differs: {per_setup.to_dict()})"))
    writer.add("evict.prompt_tokens", T(lambda: float(t.prompt_tokens.mean())), "tokens",
               note="mean conversation length over the setups")
    targets = T(lambda: sorted(set(t.target_tokens)))
    if len(targets) == 1:
        writer.add("evict.target_tokens", targets[0], "tokens", note="size the conversations were built to")
    writer.add("evict.max_ratio", T(lambda: float(t.ratio_cold_restore.max())), "x")
    writer.add("evict.hit_mean", T(lambda: float(t.ttft_hit_s.mean())), "s")
    if cpu_setup:
        _cpu_numbers(writer, reqs, runs, cpu_setup, max_load_per_cpu, (host_links or {}).get(cpu_setup))
    return t


def _link_settings(writer: Any, p: str, link: Link) -> None:
    """The setup's host link, a hardware fact from config (kvtier.links): its ceiling, and for PCIe
    its generation and lanes."""
    writer.add(p + "link.ceiling", link.bytes_per_s, "B/s", inputs=[], note=f"{link.name} ({link.source})")
    writer.add(p + "link.pcie", int(link.kind == "pcie"), "count", inputs=[], note="1: PCIe; 0: a copy within host memory")
    if link.kind == "pcie":
        writer.add(p + "link.pcie_generation", float(link.pcie_generation or 0), "count", inputs=[])
        writer.add(p + "link.pcie_lanes", int(link.pcie_lanes or 0), "count", inputs=[])


def _link_numbers(writer: Any, p: str, link: Link, rates: Mapping[str, tuple[Callable[[], float], Callable[[], float]]]) -> None:
    """A restore's rates against its link (kvtier.links), each as (bytes, seconds): over the server's
    copy time ("copy") and over the difference to a hit ("minus_hit"), each with whether it is above
    the ceiling (1: that time is not the copy's)."""
    T = writer.compute
    _link_settings(writer, p, link)
    for name, (nbytes, seconds) in rates.items():
        ck_ = T(lambda: links.check(nbytes(), seconds(), link))
        if math.isnan(ck_["rate"]):
            continue
        writer.add(p + f"link.{name}_time", T(seconds), "s")
        writer.add(p + f"link.{name}_rate", ck_["rate"], "B/s")
        writer.add(p + f"link.{name}_share", ck_["share_of_link"], "fraction")
        writer.add(p + f"link.{name}_above", ck_["above_link"], "count", note="1: above the link's ceiling")


def _spread(writer: Any, key: str, values: Callable[[], pd.Series], unit: str) -> None:
    """Median, range, count and (six values on) the 95% interval of the median (eviction.cpuset.spread)
    of the values `values()` reads, each naming the files of those values."""
    sp = writer.compute(lambda: spread(values()))
    if sp is None:
        return
    writer.add(key + ".median", sp["median"], unit)
    writer.add(key + ".min", sp["min"], unit)
    writer.add(key + ".max", sp["max"], unit)
    writer.add(key + ".n", sp["n"], "count")
    if "ci95_lo" in sp:
        writer.add(key + ".ci95_lo", sp["ci95_lo"], unit, note="95% interval of the median, order statistics")
        writer.add(key + ".ci95_hi", sp["ci95_hi"], unit, note="95% interval of the median, order statistics")


def _cpu_numbers(writer: Any, reqs: pd.DataFrame, runs: pd.DataFrame, setup: str, max_load_per_cpu: float,
                 link: Link | None = None) -> None:
    """The measured runs on vLLM's CPU build, as an instrument: the latest record set (by recorded
    start), per tier (native CPU tier, no-offload control) its launches, those flagged for load, and
    the cycles of the others pooled: median, range and 95% interval. Keys: evict.<setup>.<tier>.*"""
    T = writer.compute
    with quiet():  # which launches count: a selection by their verdicts and record set
        done = runs[((runs.setup == setup) & runs.complete & runs.cold_verified).to_numpy()]
    if done.empty:
        return
    done = flag_load(done, max_load_per_cpu)  # its cells name what they read (outside quiet: it records them)
    with quiet():
        name, current, earlier = latest_set(done)
    # a set's name is run.yaml's record_set, or (older runs) the folder's: counted over their run.yaml
    writer.add(f"evict.{setup}.earlier_sets", T(lambda: int(earlier.started.count() and earlier.record_set.nunique())), "count",
               note="earlier record sets of this setup, pinned but not in the medians")
    writer.add(f"evict.{setup}.earlier_launches", T(_count(earlier, "started")), "count")
    writer.add(f"evict.{setup}.launches", T(_count(current, "started")), "count", note=f"launches of record set {name}, every tier")
    writer.add(f"evict.{setup}.launches_flagged", T(lambda: int(current.load_flagged.sum())), "count",
               note="launches whose median 1-minute load exceeded the threshold: out of the medians")
    writer.add(f"evict.{setup}.launches_unsampled", T(lambda: int((~current.load_sampled).sum())), "count")
    writer.add(f"evict.{setup}.max_load_per_cpu", float(max_load_per_cpu), "x", inputs=[], note="load threshold per CPU (config)")
    writer.add(f"evict.{setup}.ci_level", CI_LEVEL, "fraction", inputs=[], note="confidence of the interval beside each median")
    writer.add(f"evict.{setup}.ci_min_n", CI_MIN_N, "count", inputs=[], note="fewest values with such an interval")
    with quiet():
        sampled = current[current.load_sampled.to_numpy()]
    if len(sampled):
        writer.add(f"evict.{setup}.load_threshold", T(lambda: float(sampled.load_threshold.iloc[0])), "x",
                   note="1-minute load average")
        _spread(writer, f"evict.{setup}.load1_median", lambda: sampled.load1_median, "x")
        writer.add(f"evict.{setup}.load_interval", T(lambda: float(sampled.load_interval_s.median())), "s",
                   note="median time between load samples")
        writer.add(f"evict.{setup}.load1_max", T(lambda: float(sampled.load1_max.max())), "x")
        with quiet():
            has_steal = sampled.steal_share.notna().any()
        if has_steal:
            writer.add(f"evict.{setup}.steal_share_max", T(lambda: float(sampled.steal_share.max())), "fraction")
    for tier, group in current.groupby("tier"):
        with quiet():
            kept = group[(~group.load_flagged).to_numpy()]
        p = f"evict.{setup}.{tier}."
        writer.add(p + "launches", T(_count(group, "started")), "count")
        writer.add(p + "launches_flagged", T(lambda: int(group.load_flagged.sum())), "count")
        with quiet():
            out = group[group.load_flagged.to_numpy()]
        for j in range(len(out)):  # each launch kept out, shown with the load that put it out (the load rule)
            one = out.iloc[[j]]
            writer.add(p + f"flagged.{j}.load", T(lambda: float(one.load1_median.iloc[0])), "x",
                       note="median 1-minute load over the launch's samples, above the threshold")
        # every launch above the threshold: the medians are over all of them, and say so (all_flagged)
        writer.add(p + "all_flagged", T(lambda: int(group[(~group.load_flagged).to_numpy()].empty)), "count",
                   note="1: no launch below the load threshold")
        if kept.empty:
            kept = group
        first = kept.head(1)
        r = first.iloc[0]  # for the conditions only
        with quiet():
            rows = reqs[reqs.run.isin(kept.run).to_numpy()]
            cold, hit, rest = (rows[(rows.phase == ph).to_numpy()].sort_values(["run", "cycle"]) for ph in ("cold", "hit", "restore"))
            rest = rest[(rest["round"] == 1).to_numpy()]
            # with a tier, a request after eviction the pool served nothing to was recomputed: not a restore
            after = rest
            rest = rest[ck.restored_from_pool(after, str(tier))]
        writer.add(p + "launches_used", T(_count(kept, "started")), "count")
        if tier != "none":
            writer.add(p + "restores_recomputed", T(lambda: int((~ck.restored_from_pool(after, str(tier))).sum())), "requests",
                       note="requests after eviction that took no tokens from the pool: reported, out of the restore medians")
        writer.add(p + "cycles", T(lambda: int(kept.cycles.sum())), "count", note="cycles of the launches kept, pooled")
        writer.add(p + "cycles_per_launch", T(lambda: int(kept.cycles.min())), "count")
        for name_, frame in (("cold", cold), ("hit", hit), ("restore", rest)):
            _spread(writer, p + f"ttft.{name_}", lambda: frame.ttft_s, "s")
        _spread(writer, p + "ratio_cold_restore",
                lambda: cold.set_index(["run", "cycle"]).ttft_s / rest.set_index(["run", "cycle"]).ttft_s, "x")
        for col in ("gpu_hit_tokens", "pool_tokens", "computed_tokens"):
            _spread(writer, p + f"restore.{col}", lambda: rest[col], "tokens")
        _spread(writer, p + "cold.gpu_hit_tokens", lambda: cold.gpu_hit_tokens, "tokens")
        _spread(writer, p + "hit.gpu_hit_tokens", lambda: hit.gpu_hit_tokens, "tokens")
        _spread(writer, p + "prompt_tokens", lambda: cold.prompt_tokens, "tokens")
        writer.add(p + "restores_from_pool", T(lambda: int((rest.pool_tokens > 0).sum())), "requests")
        writer.add(p + "restores_evicted", T(lambda: int(rest.evicted.sum())), "requests")
        writer.add(p + "restores_gpu_hit_tokens", T(lambda: float(rest.gpu_hit_tokens.sum())), "tokens")
        writer.add(p + "kv_cache_tokens", T(lambda: int(first.kv_cache_tokens.iloc[0])), "tokens")
        writer.add(p + "evictors", T(lambda: int(first.evictors.iloc[0])), "count")
        writer.add(p + "evictor_tokens_over_cache",
                   T(lambda: first.evictors.iloc[0] * first.prompt_tokens.iloc[0] / first.kv_cache_tokens.iloc[0]), "x")
        if pd.notna(r.model_params):
            writer.add(p + "model_params", T(lambda: int(first.model_params.iloc[0])), "count")
        with quiet():
            waited = kept.health_wait_s.notna().any()
            moved = rest.load_bytes.notna().any() and (rest.load_bytes > 0).any()
            checked = rest[rest.logprob_passed.notna().to_numpy()]
        if waited:
            _spread(writer, p + "health_wait", lambda: kept.health_wait_s, "s")
        if moved:
            _spread(writer, p + "restore_bytes", lambda: rest.load_bytes, "B")
            _spread(writer, p + "blocks_moved", lambda: rest.blocks_moved_exact, "blocks")
            _spread(writer, p + "blocks_served", lambda: rest.blocks_served_exact, "blocks")
            # moved minus served, from whole numbers (bytes x tokens) so that equality is exact
            _spread(writer, p + "extra_blocks", lambda: ((rest.load_bytes * rest.block_tokens - rest.pool_tokens * rest.bytes_per_block)
                                                        / (rest.bytes_per_block * rest.block_tokens)), "blocks")
            if link is not None:  # every kept restore's rates against the host's memory copy; the fastest is checked
                def per() -> pd.DataFrame:  # bytes, the server's copy time, and the restore less its cycle's hit
                    r, h = rest.set_index(["run", "cycle"]), hit.set_index(["run", "cycle"])
                    return pd.DataFrame({"b": r.load_bytes, "copy_s": r.load_time_s, "minus_hit_s": r.ttft_s - h.ttft_s}).dropna()

                def fastest(over: str) -> pd.Series:  # the restore whose rate over `over` is highest
                    f = per()
                    return f.loc[(f.b / f[over].where(f[over] > 0)).idxmax()]
                _link_numbers(writer, p, link, {"copy": (lambda: fastest("copy_s").b, lambda: fastest("copy_s").copy_s),
                                                "minus_hit": (lambda: fastest("minus_hit_s").b,
                                                              lambda: fastest("minus_hit_s").minus_hit_s)})
            writer.add(p + "block_tokens", T(lambda: int(rest.head(1).block_tokens.dropna().iloc[0])), "tokens")
            writer.add(p + "bytes_per_block", T(lambda: int(rest.head(1).bytes_per_block.dropna().iloc[0])), "B")
            if r.ram_pool_bytes:
                writer.add(p + "ram_pool", T(lambda: float(first.ram_pool_bytes.iloc[0])), "B")
        if not checked.empty:
            writer.add(p + "logprobs.checked", T(_count(checked, "logprob_passed")), "requests")
            writer.add(p + "logprobs.passed", T(lambda: int(checked.logprob_passed.astype(bool).sum())), "requests")
            writer.add(p + "logprobs.failed", T(lambda: int((~checked.logprob_passed.astype(bool)).sum())), "requests")
            writer.add(p + "logprobs.same_compute", T(lambda: int(checked.logprob_same_compute.astype(bool).sum())), "requests")
            writer.add(p + "logprobs.max_abs_diff", T(lambda: float(checked.logprob_max_diff.astype(float).max())), "nats")
            writer.add(p + "logprobs.positions", T(lambda: int(checked.logprob_positions.min())), "count")


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
