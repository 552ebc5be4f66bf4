"""Simulator throughput on a public trace, with single-tier hits checked against libCacheSim.

    python benchmarks/bench_simulator.py [--trace ../shared/traces/mooncake/conversation_trace.jsonl]
                                         [--gpu-blocks 2000 20000] [--cpu-ratio 2] [--runs 3] [--json out.json]
                                         [--flavors lmcache vllm] [--policies write_through store_on_evict]
                                         [--offline-caps 32]

Throughput is block lookups per second: every block of every request is looked up on the GPU
tier once (a two-tier replay also probes the CPU tier behind a GPU miss; those probes are not
counted). Two-tier replays run for every flavor x policy given (default: all four). Reported as
wall-clock and as process CPU time, best of --runs, because the machines this runs on are shared.
The offline path (kvtier.sim.offline: lmcache write_through from two stack passes) is timed
for the one CPU capacity and for --offline-caps capacities at once, as lookups of the replays it
stands for per second, Outcome objects included; its outcomes are checked against the replay.
Target: >= 2 M lookups/s for the two-tier replay.
The trace is read where it lies; it is never copied into the repository.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kvtier.sim import POLICIES, TieredCache, read_mooncake, replay_offline
from kvtier.sim.tiers import FLAVORS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
TARGET = 2e6


def best_rate(make, requests, lookups: int, runs: int) -> tuple[float, float, list]:
    """Best wall and CPU-time rates over `runs` fresh replays; returns the last outcomes too."""
    wall = cpu = 0.0
    outcomes: list = []
    for _ in range(runs):
        cache = make()
        w0, c0 = time.perf_counter(), time.process_time()
        outcomes = cache.replay(requests)
        w1, c1 = time.perf_counter(), time.process_time()
        wall = max(wall, lookups / (w1 - w0))
        cpu = max(cpu, lookups / max(c1 - c0, 1e-9))
    return wall, cpu, outcomes


def offline_rows(requests, gpu: int, block_tokens: int, cpu_chunks: int, lookups: int, runs: int,
                 many: int) -> list[dict]:
    """Time replay_offline for the one CPU capacity and for `many` at once (0 .. 2 x cpu_chunks);
    rates count the lookups of every replay it stands for. Checked against a TieredCache replay."""
    want = TieredCache(gpu, block_tokens, cpu_chunks=cpu_chunks, policy="write_through", flavor="lmcache").replay(requests)
    out = []
    for caps in ([cpu_chunks], [cpu_chunks] + [2 * cpu_chunks * i // max(many - 2, 1) for i in range(many - 1)]):
        wall = cpu = 0.0
        for _ in range(runs):
            w0, c0 = time.perf_counter(), time.process_time()
            got = replay_offline(requests, gpu, block_tokens, caps)
            w1, c1 = time.perf_counter(), time.process_time()
            wall = max(wall, lookups * len(caps) / (w1 - w0))
            cpu = max(cpu, lookups * len(caps) / max(c1 - c0, 1e-9))
        equal = got[0] == want
        out.append({"capacities": len(caps), "wall_per_s": wall, "cpu_per_s": cpu, "equal": equal})
        label = f"offline lmcache write_through, {len(caps)} CPU size{'s' if len(caps) > 1 else ''}"
        print(f"    {label:<44}{wall / 1e6:5.2f} M lookups/s wall, {cpu / 1e6:5.2f} M/s CPU time "
              f"({'equal to' if equal else 'DIFFERENT from'} the replay; target {'met' if max(wall, cpu) >= TARGET else 'not met'})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--gpu-blocks", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--cpu-ratio", type=float, default=2.0, help="CPU tier size / GPU tier size (production: 2.0)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--flavors", nargs="+", default=list(FLAVORS), choices=FLAVORS)
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    ap.add_argument("--offline-caps", type=int, default=32, help="CPU capacities timed at once on the offline path")
    ap.add_argument("--no-check", action="store_true", help="skip the libCacheSim comparison")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not args.trace.exists():
        sys.exit(f"trace not found: {args.trace} (pass --trace; see ../shared/traces/README.md for the source)")
    requests = read_mooncake(args.trace)
    lookups = sum(r.n_blocks for r in requests)
    block_tokens = 512  # Mooncake's hash_ids cover 512 tokens each
    print(f"{args.trace.name}: {len(requests):,} requests, {lookups:,} block lookups per replay")
    rows = []
    for gpu in args.gpu_blocks:
        cpu_chunks = int(gpu * args.cpu_ratio)
        w1, c1, single = best_rate(lambda: TieredCache(gpu, block_tokens), requests, lookups, args.runs)
        hits = sum(o.gpu_blocks for o in single)
        row = {"gpu_blocks": gpu, "cpu_chunks": cpu_chunks, "single_hits": hits,
               "single_wall_per_s": w1, "single_cpu_per_s": c1, "two_tier": []}
        if not args.no_check:
            from kvtier.sim.reference import libcachesim_lru_hits
            ref = libcachesim_lru_hits(requests, gpu)
            row["libcachesim_hits"] = sum(ref)
            row["libcachesim_equal"] = ref == [o.gpu_blocks for o in single]
        check = "" if args.no_check else f"  libCacheSim {row['libcachesim_hits']:,} ({'equal' if row['libcachesim_equal'] else 'DIFFERENT'})"
        print(f"GPU {gpu:>7,} blocks, CPU {cpu_chunks:,} chunks: hits {hits:>9,}{check}\n"
              f"    {'single tier':<33}{w1 / 1e6:5.2f} M lookups/s wall, {c1 / 1e6:5.2f} M/s CPU time")
        for flavor in args.flavors:
            for policy in args.policies:
                w2, c2, two = best_rate(lambda: TieredCache(gpu, block_tokens, cpu_chunks=cpu_chunks, policy=policy,
                                                            flavor=flavor), requests, lookups, args.runs)
                row["two_tier"].append({"flavor": flavor, "policy": policy, "gpu_hits": sum(o.gpu_blocks for o in two),
                                        "cpu_chunks": sum(o.cpu_chunks for o in two), "wall_per_s": w2, "cpu_per_s": c2})
                print(f"    two tiers {flavor:<7} {policy:<14} {w2 / 1e6:5.2f} M lookups/s wall, {c2 / 1e6:5.2f} M/s CPU time "
                      f"(target {TARGET / 1e6:.0f} M/s: {'met' if max(w2, c2) >= TARGET else 'not met'})")
        row["offline"] = offline_rows(requests, gpu, block_tokens, cpu_chunks, lookups, args.runs, args.offline_caps)
        rows.append(row)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"trace": str(args.trace), "lookups": lookups, "rows": rows}, indent=1) + "\n")
    ok = all(r.get("libcachesim_equal", True) and all(o["equal"] for o in r["offline"]) for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
