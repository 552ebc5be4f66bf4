"""The eviction test on vLLM's CPU build as an instrument: separate launches, their load, the spread.

A record set is the launches of one invocation (run.yaml `record_set`; a run without one is a set
of its own, named after its folder without the tier). The note reads the latest set by recorded
start time; earlier sets stay pinned and are counted, never mixed into its medians. A launch
whose median 1-minute load average over its host_load.tsv samples exceeds `max_load_per_cpu`
times the host's CPUs (the one load rule: kvtier.loadrule, docs/LOAD-RULE.md) is flagged and kept
out of the medians (a launch without a load series cannot be judged and is kept in, counted as
unsampled). Each median over the cycles of the
launches kept comes with its range and, from six values on, a distribution-free 95% interval for
the median (order statistics of the binomial, as in Conover, Practical Nonparametric Statistics).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import loadrule
from ..hostload import read_series
from ..records.traced import TracedFrame

TIERS = ("native", "lmcache", "none")
CI_LEVEL = 0.95
CI_MIN_N = 6  # five values cover the median with at most 1 - 2/32 = 93.75%


def median_ci95_ranks(n: int) -> tuple[int, int] | None:
    """1-based ranks (lo, hi) of the order statistics bounding the median with >= 95% coverage;
    None below six values (five give at most 1 - 2/32 = 93.75%)."""
    if n < CI_MIN_N:
        return None
    # scipy.special's binomial CDF, not scipy.stats.binom: the same ranks (tests/test_runfolder.py
    # checks n <= 2000 against scipy.stats) without scipy.stats' import (~0.5 s per rule process);
    # imported here, as the rules that read eviction records without a median need none of it
    from scipy.special import bdtr

    cdf = bdtr(np.arange(n + 1), n, 0.5)  # cdf[k] = P(X <= k), X ~ Binomial(n, 1/2)
    j = int(np.searchsorted(cdf, (1 - CI_LEVEL) / 2))  # binom.ppf: the smallest k with cdf[k] >= q
    while j > 0 and cdf[n - j] - cdf[j - 1] < CI_LEVEL:
        j -= 1
    return (j, n - j + 1) if j >= 1 else None


def spread(values: pd.Series) -> dict[str, float] | None:
    """Median, range, count and (n >= 6) the 95% interval of the median."""
    v = np.sort(values.dropna().astype(float).to_numpy())
    if v.size == 0:
        return None
    out = {"median": float(np.median(v)), "min": float(v[0]), "max": float(v[-1]), "n": int(v.size)}
    ranks = median_ci95_ranks(v.size)
    if ranks:
        out["ci95_lo"], out["ci95_hi"] = float(v[ranks[0] - 1]), float(v[ranks[1] - 1])
    return out


def record_set(meta: dict[str, Any], name: str) -> str:
    """The set a run belongs to: recorded by the harness, or (older runs) the folder without its tier."""
    if meta.get("record_set"):
        return str(meta["record_set"])
    stem, _, tier = name.rpartition("-")
    return stem if stem and tier in TIERS else name


def flag_load(runs: pd.DataFrame, max_load_per_cpu: float) -> pd.DataFrame:
    """Add `load_flagged` and `load_sampled`: the one load rule (kvtier.loadrule) on each launch's
    `load1_median`, which the reader computed from its host_load.tsv samples."""
    runs = TracedFrame(runs)  # each derived cell names the run.yaml it read (records.traced)
    nan = pd.Series(np.nan, index=runs.index)

    def load(f: pd.DataFrame) -> pd.Series:
        return pd.to_numeric(f["load1_median"], errors="coerce") if "load1_median" in f else nan.loc[f.index]

    def cpus(f: pd.DataFrame) -> pd.Series:
        return pd.to_numeric(f["cpus"], errors="coerce") if "cpus" in f else nan.loc[f.index]
    runs = runs.derive("load_sampled", lambda f: load(f).notna())
    runs = runs.derive("load_threshold", lambda f: loadrule.threshold(max_load_per_cpu, 1) * cpus(f))
    runs = runs.derive("load_flagged", lambda f: f.load_sampled & (load(f) > f["load_threshold"]))  # loadrule.flagged
    runs["load1_median"] = load(runs).to_numpy()
    return runs


def latest_set(runs: pd.DataFrame) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The latest record set by recorded start (its runs), and the runs of every earlier set."""
    first = runs.groupby("record_set")["started"].min().sort_values()
    name = str(first.index[-1])
    return name, runs[runs.record_set == name], runs[runs.record_set != name]


def register_fairness(writer: Any, runs: pd.DataFrame, setup: str) -> None:
    """evict.<setup>.arms.fair: whether the launches of the setup's latest record set, every tier,
    were run with the same settings apart from the tier (kvtier.fairarms), the finding in its note."""
    from .. import fairarms
    from ..records.touch import quiet

    with quiet():
        mine = runs[(runs.setup == setup).to_numpy()]
        if mine.empty:
            return
        _, current, _ = latest_set(mine)
        dirs = sorted(str(d) for d in current.run_dir)
    fairarms.register(writer, f"evict.{setup}.arms", [fairarms.eviction_arm(d) for d in dirs])


def load_interval_s(series: Any) -> float | None:
    """Median seconds between consecutive samples of a host_load.tsv (its path, or its rows read)."""
    rows = read_series(series) if isinstance(series, (str, Path)) else series
    times = pd.Series(pd.to_datetime([r["time"] for r in rows]))
    return float(times.diff().dt.total_seconds().median()) if len(times) > 1 else None


def summary_lines(numbers: dict[str, dict[str, Any]], setup: str) -> list[str]:
    """The CPU set's medians with their spread and the flagged launches, for the rule's log."""
    def v(key: str) -> Any:
        return numbers.get(f"evict.{setup}.{key}", {}).get("value")

    if v("launches") is None:
        return []
    lines = [f"{setup}: {v('launches')} launches in the latest record set, {v('launches_flagged')} flagged for load "
             f"(median 1-min load > {v('max_load_per_cpu')} per CPU), {v('earlier_launches')} in earlier sets"]
    for tier in TIERS:
        for q in ("ttft.cold", "ttft.hit", "ttft.restore", "ratio_cold_restore"):
            m = v(f"{tier}.{q}.median")
            if m is None:
                continue
            ci = (f"; 95% CI {v(f'{tier}.{q}.ci95_lo'):.4g}-{v(f'{tier}.{q}.ci95_hi'):.4g}"
                  if v(f"{tier}.{q}.ci95_lo") is not None else "")
            lines.append(f"  {tier} {q}: median {m:.4g} (range {v(f'{tier}.{q}.min'):.4g}-{v(f'{tier}.{q}.max'):.4g}{ci}; "
                         f"n={v(f'{tier}.{q}.n')}, launches flagged {v(f'{tier}.launches_flagged')})")
    return lines
