"""What the single stack pass buys on the counterfactual's synthetic workload, and what the sweep costs.

    python benchmarks/bench_counterfactual.py [--fit results/counterfactual/workload_fit.json]
                                              [--workload results/counterfactual/workload.npz]
                                              [--sizes 9 50] [--no-sweep] [--json out.json]

(a) GPU-only hit share for N GPU sizes: one stack pass (kvtier.sim.stack, all sizes at once)
    against N compiled replays (`gpu_only_curve`, what the workflow uses), checked equal to 1e-12.
(b) The default sweep: pool sizes (and GPU sizes for write-through) x both policies, one replay
    per row (compiled core), as rule counterfactual runs it.
Also the cost of loading the stored workload. Wall-clock and process CPU time; the machines this
runs on are shared. Needs the fitted workload (`snakemake --cores 2 results/counterfactual/workload.npz`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.replay import Config, gpu_only_curve, replay
from kvtier.sim.stack import hits_by_capacity, stack_positions
from kvtier.counterfactual.run import sweep
from kvtier.workloads.store import load

REPO = Path(__file__).resolve().parent.parent


def timed(fn):
    """(result, wall s, CPU s) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def gpu_sizes(n: int, gpu_tokens: int, ratios: list[float]) -> np.ndarray:
    """The rule's own ratios when n matches them; otherwise n sizes spread over the same range."""
    r = np.asarray(ratios, dtype=float) if n == len(ratios) else np.linspace(min(ratios), max(ratios), n)
    return np.round(r * gpu_tokens).astype(np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", type=Path, default=REPO / "results" / "counterfactual" / "workload_fit.json")
    ap.add_argument("--workload", type=Path, default=REPO / "results" / "counterfactual" / "workload.npz")
    ap.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    ap.add_argument("--sizes", type=int, nargs="+", default=[9, 50], help="numbers of GPU sizes to compare")
    ap.add_argument("--no-sweep", action="store_true", help="skip (b), the pool-size sweep")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not args.fit.exists() or not args.workload.exists():
        sys.exit(f"fit or workload not found: {args.fit}, {args.workload} "
                 "(run: snakemake --cores 2 results/counterfactual/workload.npz)")
    cfg = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    cf, cr = cfg["counterfactual"], cfg["coldread"]
    fit = json.loads(args.fit.read_text(encoding="utf-8"))
    model = model_from_csv(REPO / cr["table"], cr["above_last"])
    w, wall, _ = timed(lambda: load(args.workload))
    lookups = w.lookups()
    print(f"workload: {len(w.requests):,} requests, {lookups:,} block lookups per replay (loaded in {wall:.3f} s)")
    report: dict = {"requests": len(w.requests), "lookups": lookups, "load_s": wall, "gpu_curve": [], "sweep": []}

    print("(a) GPU-only hit share for N GPU sizes")
    for n in args.sizes:
        sizes = gpu_sizes(n, fit["gpu_tokens"], cf["gpu_curve_ratios"])
        def stack_pass():
            hits = hits_by_capacity(stack_positions(w.requests), sizes // w.block_tokens)
            tok = w.prompt_tokens
            return np.minimum(hits * w.block_tokens, tok[:, None]).sum(axis=0) / tok.sum()
        shares, p_wall, p_cpu = timed(stack_pass)
        curve, r_wall, r_cpu = timed(lambda: gpu_only_curve(w, sizes))
        diff = float(np.abs(shares - curve["share_gpu"].to_numpy()).max())
        row = {"sizes": n, "pass_wall_s": p_wall, "pass_cpu_s": p_cpu, "replays_wall_s": r_wall,
               "replays_cpu_s": r_cpu, "max_abs_diff": diff}
        report["gpu_curve"].append(row)
        print(f"    N = {n:>3}: one pass {p_wall:6.2f} s wall ({p_cpu:6.2f} s CPU);  {n} replays {r_wall:6.2f} s wall "
              f"({r_cpu:6.2f} s CPU, {r_wall / n:.2f} s each)\n"
              f"             the pass buys {r_wall / p_wall:5.1f}x wall, {r_cpu / max(p_cpu, 1e-9):5.1f}x CPU; "
              f"worth it from {p_wall / (r_wall / n):.1f} sizes on; max |difference| {diff:.1e} "
              f"({'equal' if diff <= 1e-12 else 'DIFFERENT'})")

    if not args.no_sweep:
        print("(b) default sweep: pool sizes x policies (and GPU sizes for write-through), one replay per row")
        for policy in ("write_through", "store_on_evict"):
            table, s_wall, s_cpu = timed(lambda: sweep(w, model, fit["gpu_tokens"], cf["pool_ratios"], cf["gpu_ratios"],
                                                       fit["pool_blocks"], policy))
            rate = len(table) * lookups / s_wall
            report["sweep"].append({"policy": policy, "replays": len(table), "wall_s": s_wall, "cpu_s": s_cpu,
                                    "lookups_per_s": rate})
            print(f"    {policy:<15} {len(table):>3} replays {s_wall:6.2f} s wall ({s_cpu:6.2f} s CPU), "
                  f"{s_wall / len(table):.2f} s each, {rate / 1e6:.2f} M lookups/s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(r["max_abs_diff"] <= 1e-12 for r in report["gpu_curve"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
