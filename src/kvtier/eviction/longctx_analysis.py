"""Long-context eviction runs -> the context-length curve: per size and tier, cold, hit and
restored TTFT with their spread, cold / restored, bytes restored, blocks moved and served, the
logprob check; a power-law fit of the CPU's cold reads beside one of the note's timed GPU reads.

Everything is recomputed from the raw records with the eviction test's own row builder
(`analysis.measured_rows`), so eviction, pool tokens and blocks come from the /metrics snapshots,
not from run.yaml's verdicts. A launch enters the medians if it completed, its cold reads were
cold and (native tier) every restore found the conversation outside the KV cache; a launch above
the load threshold (`cpuset.flag_load`) is kept out and counted. The note's two GPU setups (Table 1,
records classed in raw/MANIFEST.tsv) are drawn beside the curve as what they are. Provenance is
read off the records (kvtier.records.traced): each number names the cells its computation read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..records.evictionrun import read_run
from ..records.touch import quiet
from ..records import identity
from ..records.traced import SRC, Row, TracedFrame, plain, read
from . import analysis
from .checks import restored_from_pool
from .cpuset import flag_load, spread

SPREAD_FIELDS = ("median", "min", "max", "n", "ci95_lo", "ci95_hi")


def size_key(tokens: int) -> str:
    """200000 -> 's200k': a name a template can index."""
    return f"s{int(tokens) // 1000}k"


def load(run_dirs: list[Path], run_schema: Path, request_schema: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows of every measured request and one row per launch, with the size each was built to."""
    read_runs = [read_run(d, run_schema, request_schema) for d in run_dirs]  # each read and validated once
    with quiet():  # each launch once: its folder is what its run.yaml says, and no other folder is it too
        identity.check_unique(identity.longctx(r.dir, plain(r.meta)) for r in read_runs)
    reqs, runs = analysis.tables(read_runs)
    if runs.empty:
        raise RawRecordError("raw/eviction/longctx", "no long-context runs among the pinned records")
    meta = {r.dir.as_posix(): r.meta for r in read_runs}
    cells = [read(_wall_s, meta[d]) for d in runs.run_dir]
    for d, (v, _) in zip(runs.run_dir, cells):
        if v is not None and not v >= 0:  # a launch that ends before it starts: a clock or an edit, not a time
            raise RawRecordError(Path(d) / "run.yaml", f"the launch lasts {v} s (host_load.end, or finished, before its start): "
                                                       "times are never negative")
    runs["wall_s"] = [v for v, _ in cells]
    runs[SRC + "wall_s"] = pd.Series([f for _, f in cells], index=runs.index, dtype=object)
    reqs = TracedFrame(reqs.merge(runs[["run", "target_tokens"]], on="run", how="left"))
    return reqs, runs


def _wall_s(meta: Mapping[str, Any]) -> float | None:
    """Seconds of the whole launch (server start to stop, attempts of a resumed run not summed),
    from its run.yaml as the run's reader gives it (its items touch run.yaml when read)."""
    load = meta.get("host_load") or {}
    if load.get("start") and load.get("end"):  # the sampler runs from before the server's start to after its stop
        return (pd.Timestamp(load["end"]) - pd.Timestamp(load["start"])).total_seconds()
    if not meta.get("finished"):
        return None
    return (pd.Timestamp(meta["finished"]) - pd.Timestamp(meta["started"])).total_seconds()


def usable(runs: pd.DataFrame, max_load_per_cpu: float) -> pd.DataFrame:
    """Launches that count: complete, cold reads cold, evicted; with `load_flagged` beside them."""
    ok = runs[runs.complete & runs.cold_verified & runs.evicted]
    return flag_load(ok, max_load_per_cpu)


def ratios(reqs: pd.DataFrame) -> pd.DataFrame:
    """Every restore with its cycle's cold read: cold / restored TTFT."""
    cold = reqs[reqs.phase == "cold"][["run", "cycle", "ttft_s"]].rename(columns={"ttft_s": "cold_s", SRC + "ttft_s": SRC + "cold_s"})
    rest = reqs[reqs.phase == "restore"].merge(cold, on=["run", "cycle"])
    return rest.assign(ratio=rest.cold_s / rest.ttft_s)


def size_table(reqs: pd.DataFrame, runs: pd.DataFrame, max_load_per_cpu: float) -> TracedFrame:
    """One row per (size, tier) over the launches kept: medians with their range, counts, checks;
    each cell with the files it read (the launches kept are a selection, made before)."""
    kept_all = usable(runs, max_load_per_cpu)
    out = []
    for (size, tier), grp in kept_all.groupby(["target_tokens", "tier"]):
        with quiet():
            kept = grp[(~grp.load_flagged).to_numpy()]
            r = reqs[reqs.run.isin(kept.run).to_numpy()]
            cold, hit, after = (r[(r.phase == ph).to_numpy()] for ph in ("cold", "hit", "restore"))
            # with the tier, a request after eviction is a restore only if the pool served it: one the
            # server computed again (no pool tokens) is reported as recomputed, out of the restores'
            # count, times and ratios; the control's requests after eviction are all recomputed
            pooled = restored_from_pool(after, tier)
            rest = after[pooled]
            lp = rest[rest.logprob_passed.notna().to_numpy()]
            rr = ratios(r)
            rr = rr[restored_from_pool(rr, tier)]
        row = Row()
        row.put("target_tokens", lambda: int(grp.target_tokens.iloc[0]))
        row["tier"] = tier
        row.put("launches", lambda: len(grp.started))
        row.put("launches_flagged", lambda: int(grp.load_flagged.sum()))
        row.put("launches_used", lambda: len(kept.started))
        row.put("restores", lambda: len(rest.ttft_s))
        row.put("restores_recomputed", lambda: int((~restored_from_pool(after, tier)).sum()))
        row.put("prompt_tokens", lambda: float(cold.prompt_tokens.median()) if len(r) else math.nan)
        row.put("kv_cache_tokens", lambda: float(kept.kv_cache_tokens.median()) if len(kept) else math.nan)
        row.put("wall_s_median", lambda: float(kept.wall_s.median()) if len(kept) else math.nan)
        row.put("wall_s_min", lambda: float(kept.wall_s.min()) if len(kept) else math.nan)
        row.put("wall_s_max", lambda: float(kept.wall_s.max()) if len(kept) else math.nan)
        row.put("load1_median_max", lambda: float(pd.to_numeric(grp.load1_median, errors="coerce").max()))
        with quiet():
            kept_out = grp[grp.load_flagged.to_numpy()]
        row.put("flagged_loads", lambda: [float(v) for v in kept_out.load1_median])  # each launch kept out, with its load
        row.put("logprob_checked", lambda: len(lp.logprob_passed))
        row.put("logprob_passed", lambda: int((lp.logprob_passed == True).sum()))  # noqa: E712
        row.put("logprob_same_compute", lambda: int((lp.logprob_same_compute == True).sum()))  # noqa: E712
        row.put("logprob_max_diff", lambda: float(lp.logprob_max_diff.max()) if len(lp) else math.nan)
        for name, values in (("cold", lambda: cold.ttft_s), ("hit", lambda: hit.ttft_s), ("restore", lambda: rest.ttft_s),
                             ("ratio", lambda: rr.cold_s / rr.ttft_s), ("restore_bytes", lambda: rest.load_bytes),
                             ("blocks_moved", lambda: rest.blocks_moved_exact), ("blocks_served", lambda: rest.blocks_served_exact),
                             ("pool_tokens", lambda: rest.pool_tokens), ("computed_tokens", lambda: rest.computed_tokens),
                             ("gpu_hit_tokens", lambda: rest.gpu_hit_tokens)):
            row.put("_sp", lambda: spread(pd.to_numeric(values(), errors="coerce")) or {})
            sp, files = row.pop("_sp"), row.src.pop("_sp")
            for f in SPREAD_FIELDS:
                row[f"{name}_{f}"] = sp.get(f, math.nan)
                row.src[f"{name}_{f}"] = files
        out.append(row)
    if not out:
        raise RawRecordError("raw/eviction/longctx", "no complete, evicted long-context launch to analyse")
    return TracedFrame.from_rows(out).sort_values(["target_tokens", "tier"]).reset_index(drop=True)


def power_fit(tokens: Any, seconds: Any) -> dict[str, float]:
    """T = a x n^b by least squares on logs: the exponent says how a cold read grows with its length."""
    x, y = np.log(np.asarray(tokens, float)), np.log(np.asarray(seconds, float))
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError("a power fit needs two or more distinct prompt sizes")
    b, log_a = np.polyfit(x, y, 1)
    resid = y - (log_a + b * x)
    return {"exponent": float(b), "coefficient": float(math.exp(log_a)), "points": int(x.size),
            "max_rel_resid": float(np.max(np.abs(np.expm1(resid))))}


def gpu_points(run_dirs: list[Path], run_schema: Path, request_schema: Path, setups: list[str],
               classes: dict[str, str]) -> pd.DataFrame:
    """Table 1's setups (the note's GPU points): prompt, cold / restored, and each run's class in the manifest."""
    reqs, runs = analysis.load(run_dirs, run_schema, request_schema)
    t = analysis.table1(reqs, runs, setups)
    t["record_class"] = [classes.get(f"{runs.set_index('run').loc[r, 'run_dir']}/run.yaml", "unpinned") for r in t.run]
    return t[["setup", "run", "prompt_tokens", "ratio_cold_restore", "ttft_cold_s", "ttft_restore_s", "record_class"]]


def register_numbers(writer: Any, reqs: pd.DataFrame, runs: pd.DataFrame, table: pd.DataFrame,
                     gpu: pd.DataFrame, coldread_table: str, max_load_per_cpu: float) -> dict[str, dict[str, float] | None]:
    """longctx.<size>.<tier>.* per row, the fits, and the GPU points (citing their own records).
    Each is computed through writer.compute: it names the files of the cells it read."""
    from ..coldread import read_coldreads

    T = writer.compute
    for i in range(len(table)):
        one = table.iloc[[i]]
        row = one.iloc[0]  # for the keys and conditions only
        p = f"longctx.{size_key(row.target_tokens)}.{row.tier}."

        def v(col: str, kind: type = float) -> Any:
            return T(lambda: kind(one[col].iloc[0]))
        writer.add(p + "target_tokens", v("target_tokens", int), "tokens")
        writer.add(p + "prompt_tokens", v("prompt_tokens"), "tokens")
        for k in ("launches", "launches_flagged", "launches_used", "restores", "restores_recomputed", "logprob_checked", "logprob_passed",
                  "logprob_same_compute"):
            writer.add(p + k, v(k, int), "count")
        if pd.notna(row.kv_cache_tokens):
            writer.add(p + "kv_cache_tokens", v("kv_cache_tokens", int), "tokens")
        if pd.notna(row.logprob_max_diff):
            writer.add(p + "logprob_max_diff", v("logprob_max_diff"), "nats")
        for name, unit in (("cold", "s"), ("hit", "s"), ("restore", "s"), ("ratio", "x"), ("restore_bytes", "B"),
                           ("blocks_moved", "blocks"), ("blocks_served", "blocks"), ("pool_tokens", "tokens"),
                           ("computed_tokens", "tokens"), ("gpu_hit_tokens", "tokens")):
            for f in SPREAD_FIELDS:
                if pd.notna(getattr(row, f"{name}_{f}")):
                    writer.add(f"{p}{name}.{f}", v(f"{name}_{f}", int if f == "n" else float), "count" if f == "n" else unit)
        for j, _ in enumerate(row.flagged_loads):
            writer.add(p + f"flagged.{j}.load", T(lambda: float(one.flagged_loads.iloc[0][j])), "x",
                       note="median 1-minute load over the launch's samples, above the threshold (the load rule)")
        if pd.notna(row.wall_s_median):
            writer.add(p + "wall_s.median", v("wall_s_median"), "s")
            writer.add(p + "wall_s.min", v("wall_s_min"), "s")
            writer.add(p + "wall_s.max", v("wall_s_max"), "s")
    # the CPU's cold reads (every launch kept, both tiers: the tier does not touch a cold read) and their fit
    with quiet():
        kept = usable(runs, max_load_per_cpu)
        used = kept[(~kept.load_flagged).to_numpy()]
        colds = reqs[(reqs.run.isin(used.run) & (reqs.phase == "cold")).to_numpy()]
        sizes = colds.target_tokens.nunique()
    fit = T(lambda: power_fit(colds.prompt_tokens, colds.ttft_s)) if sizes > 1 else None
    if fit is not None:  # one size has no slope
        writer.add("longctx.fit.cpu.exponent", fit["exponent"], "x", note="T_cold = a n^b, least squares on logs, every cold read kept")
        writer.add("longctx.fit.cpu.coefficient", fit["coefficient"], "s")
        writer.add("longctx.fit.cpu.points", fit["points"], "count")
        writer.add("longctx.fit.cpu.max_rel_resid", fit["max_rel_resid"], "x")
    # the two tiers' cold reads at each size: a cold read finds nothing in the pool, so the servers
    # should take the same time; the page remarks where they did not (the native tier's server
    # also stores every block it computes into its pool, on the same cores)
    for size, grp in table.groupby("target_tokens"):
        tiers = {str(t): grp.iloc[[i]] for i, t in enumerate(grp.tier)}
        if {"native", "none"} <= set(tiers):
            nat, ctl = tiers["native"], tiers["none"]
            p = f"longctx.{size_key(size)}."
            writer.add(p + "cold_reads.native_over_none", T(lambda: float(nat.cold_median.iloc[0]) / float(ctl.cold_median.iloc[0])), "x",  # noqa: B023
                       note="the native-tier server's median cold read over the control's")
            writer.add(p + "cold_reads.apart", T(lambda: abs(float(nat.cold_median.iloc[0]) / float(ctl.cold_median.iloc[0]) - 1)),  # noqa: B023
                       "fraction", note="how far apart the two servers' median cold reads are, as a share of the control's")
            for tier, one in (("native", nat), ("none", ctl)):
                writer.add(p + f"{tier}.load1_median_max", T(lambda: float(one.load1_median_max.iloc[0])), "load",  # noqa: B023
                           note="the highest of its launches' median 1-minute load")
    writer.add("longctx.sizes", T(lambda: int(table.target_tokens.nunique())), "count")
    for i, size in enumerate(T(lambda: [int(x) for x in sorted(table.target_tokens.unique())])):  # in order, for the page's loops
        writer.add(f"longctx.size.{i}.tokens", size, "tokens")
    # the set's cost (the run times in docs/EXPERIMENTS.md): every launch, kept or flagged, server start to stop
    writer.add("longctx.time.launches", T(lambda: int(runs.wall_s.notna().sum())), "count")
    writer.add("longctx.time.launches_s", T(lambda: float(pd.to_numeric(runs.wall_s, errors="coerce").sum())), "s")
    writer.add("longctx.restore_min_tokens", 190_000, "tokens", inputs=[], note="the issue's bar for a restore at the note's scale")
    with quiet():
        native = table[(table.tier == "native").to_numpy()]
        big = native[(native.target_tokens >= 190_000).to_numpy()]  # built to the size: prompt tokens within the builder's 0.5%
        control = table[(table.tier == "none").to_numpy()]
    writer.add("longctx.restores_native", T(lambda: int(native.restores.sum())), "requests")
    writer.add("longctx.restores_native_190k", T(lambda: int(big.restores.sum())), "requests",
               note="restores from the native tier of conversations built to >= 190,000 tokens (the pool served tokens)")
    writer.add("longctx.recomputed_native", T(lambda: int(native.restores_recomputed.sum())), "requests",
               note="requests after eviction the native tier's server computed again (no pool tokens): not restores")
    if len(control):
        writer.add("longctx.control_ratio_min", T(lambda: float(control.ratio_min.min())), "x")
        writer.add("longctx.control_ratio_max", T(lambda: float(control.ratio_max.max())), "x")
    writer.add("longctx.logprob_failed", T(lambda: int((table.logprob_checked - table.logprob_passed).sum())), "count")
    writer.add("longctx.max_load_per_cpu", max_load_per_cpu, "x", inputs=[])
    with quiet():
        cpus = pd.to_numeric(runs.cpus, errors="coerce").dropna()
    if len(cpus):
        writer.add("longctx.load_threshold", T(lambda: float(max_load_per_cpu * pd.to_numeric(runs.cpus).max())), "x",
                   note="the load rule's threshold on this host: max_load_per_cpu x the CPUs")
    gfit = T(lambda: power_fit(*zip(*[(r.prompt_tokens, r.ttft_s) for r in read_coldreads(coldread_table)])))
    writer.add("longctx.fit.gpu.exponent", gfit["exponent"], "x", note="the same fit to the note's timed cold reads (setup C)")
    writer.add("longctx.fit.gpu.points", gfit["points"], "count")
    for i in range(len(gpu)):
        g = gpu.iloc[[i]]
        setup = g.setup.iloc[0]
        writer.add(f"longctx.gpu.{setup}.prompt_tokens", T(lambda: g.prompt_tokens.iloc[0]), "tokens")
        writer.add(f"longctx.gpu.{setup}.ratio", T(lambda: g.ratio_cold_restore.iloc[0]), "x")
    return {"cpu": fit, "gpu": gfit}


def register_fairness(writer: Any, runs: pd.DataFrame) -> None:
    """longctx.<size>.arms.fair per size: whether its native and control launches were run with the
    same settings apart from the tier (kvtier.fairarms), the finding in its note."""
    from .. import fairarms

    with quiet():
        plain = pd.DataFrame({"size": runs.target_tokens, "dir": runs.run_dir})
    for size, grp in plain.groupby("size"):
        fairarms.register(writer, f"longctx.{size_key(size)}.arms", [fairarms.eviction_arm(d) for d in sorted(grp.dir)])


def figure(table: pd.DataFrame, gpu: pd.DataFrame, fit: dict[str, float] | None, out: str | Path) -> None:
    """Cold / restored against conversation length: (a) the CPU build's medians with their range
    over launches (the control beside them); (b) the note's GPU setups, on axes of their own. A
    CPU build's ratio is not comparable to a GPU's (another machine, model and link: the cold read
    is slow on a CPU, so the ratio grows far larger), so the two never share a y axis (issue 34)."""
    from ..render.svg import MIN_FONT, OKABE_ITO, WIDTH, panels, plain_log_ticks, save_svg

    rows = 2 if len(gpu) else 1
    heights = (3.6, 2.2)[:rows]
    fig, axes = panels(rows, 1.0, sharex=True, gridspec_kw={"height_ratios": list(heights)})
    fig.set_size_inches(WIDTH, sum(heights) + 0.3 * (rows - 1))
    axes = list(axes) if rows > 1 else [axes]
    ax = axes[0]
    for tier, label, color, fmt in (("native", "native tier", OKABE_ITO["blue"], "o-"),
                                    ("none", "no tier, the control", OKABE_ITO["sky"], "^--")):
        t = table[table.tier == tier].sort_values("target_tokens")
        if t.empty:
            continue
        x = t.prompt_tokens / 1000
        ax.errorbar(x, t.ratio_median, yerr=[t.ratio_median - t.ratio_min, t.ratio_max - t.ratio_median], fmt=fmt,
                    color=color, capsize=3, label=f"{label} (median, range)")
    title = "(a) vLLM's CPU build"
    if fit is not None:
        title += f": cold reads grow as n^{fit['exponent']:.2f}"
    ax.set_title(title, loc="left")
    ax.legend(loc="upper left")
    if rows > 1:
        gx = axes[1]
        for g in gpu.itertuples(index=False):
            gx.plot(g.prompt_tokens / 1000, g.ratio_cold_restore, marker="s", color=OKABE_ITO["vermillion"],
                    linestyle="none")
            gx.annotate(f"setup {g.setup} ({g.record_class}): {g.ratio_cold_restore:.0f}×", (g.prompt_tokens / 1000, g.ratio_cold_restore),
                        textcoords="offset points", xytext=(-7, -3), ha="right", fontsize=MIN_FONT)
        gx.set_title("(b) the note's GPU setups, not comparable with (a)", loc="left")
        gx.set_yscale("log")
        plain_log_ticks(gx.yaxis)
        gx.set_ylabel("cold / after eviction")
        gx.grid(True, which="both", alpha=0.3)
        lo, hi = float(gpu.ratio_cold_restore.min()), float(gpu.ratio_cold_restore.max())
        gx.set_ylim(lo / 3, hi * 3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    plain_log_ticks(axes[-1].xaxis)
    axes[-1].set_xlabel("conversation length (thousand tokens, log scale)")
    ax.set_ylabel("cold / after eviction (log scale)")
    for a in axes:
        a.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    save_svg(fig, out, "longctx")
