"""Simulator throughput on a public trace: the compiled core, the Python reference, a plain
OrderedDict loop and libCacheSim's native process_trace, side by side in one run.

    python benchmarks/bench_simulator.py [--trace ../shared/traces/mooncake/conversation_trace.jsonl]
                                         [--gpu-blocks 2000 20000] [--cpu-ratio 2] [--runs 5] [--json out.json]
                                         [--step-tokens 2048]

Throughput is block lookups per second: every block of every request is looked up on the GPU
tier once (a two-tier replay also probes the CPU tier behind a GPU miss; not counted). Each
figure is the median of --runs, as wall-clock and as process CPU time (the machines are shared).
The compiled core's outcomes are checked against the reference (TieredCache) per request, and
its single-tier hits against libCacheSim. libCacheSim replays the same requests as the flat
reference stream of kvtier.sim.reference (3 references a block) from a plain-text trace
file; its time is that of the whole trace, compared to ours for the same requests.
--step-tokens adds the native flavor with its stores offered per scheduler step of that many
tokens (TieredCache step_tokens; vLLM's CPU default budget is 2,048).
Target: >= 20 M lookups/s two-tier for the compiled core. The trace is never copied into the repository.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from kvtier.sim import POLICIES, TieredCache, fast, read_mooncake
from kvtier.sim.tiers import FLAVORS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
if not DEFAULT_TRACE.exists():
    DEFAULT_TRACE = REPO.parent.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
TARGET = 20e6


def timed(fn, runs: int) -> tuple[float, float, object]:
    """Median wall and CPU seconds of `runs` calls; the last result."""
    walls, cpus, out = [], [], None
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus), out


def plain_loop(requests, capacity: int) -> list[int]:
    """A 20-line single-tier prefix LRU in vLLM's order (no scratch blocks: Mooncake's whole blocks)."""
    lru: OrderedDict[int, None] = OrderedDict()
    hits = []
    for r in requests:
        g = 0
        while g < r.max_hit and r.blocks[g] in lru:
            g += 1
        for b in reversed(r.blocks[g:]):
            lru[b] = None
        for b in reversed(r.blocks[:g]):
            lru.move_to_end(b)
        while len(lru) > capacity:
            lru.popitem(last=False)
        hits.append(g)
    return hits


def libcachesim_trace(requests, path: Path) -> int:
    """Write the reference stream of kvtier.sim.reference as a plain-text trace; returns its length."""
    n = 0
    with open(path, "w") as f:
        for r in requests:
            # the hit prefix cannot be known without replaying: every block is read, then all again
            # from last to first (the stream libCacheSim sees for a cold request)
            for b in (*r.blocks, *reversed(r.blocks)):
                f.write(f"{b + 1}\n")
                n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--gpu-blocks", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--cpu-ratio", type=float, default=2.0, help="CPU tier size / GPU tier size (production: 2.0)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--step-tokens", type=int, help="also time the native flavor with stores offered per step")
    args = ap.parse_args()
    if not args.trace.exists():
        sys.exit(f"trace not found: {args.trace} (pass --trace; see ../shared/traces/README.md for the source)")
    import libcachesim

    requests = read_mooncake(args.trace)
    lookups = sum(r.n_blocks for r in requests)
    B = 512  # Mooncake's hash_ids cover 512 tokens each
    flat = fast.flatten(requests)
    print(f"{args.trace.name}: {len(requests):,} requests, {lookups:,} block lookups per replay")
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "stream.txt"
        refs = libcachesim_trace(requests, stream)
        for gpu in args.gpu_blocks:
            cpu_chunks = int(gpu * args.cpu_ratio)
            row: dict = {"gpu_blocks": gpu, "cpu_chunks": cpu_chunks}
            w, c, ref = timed(lambda: TieredCache(gpu, B).replay(requests), max(1, args.runs // 2))
            row["reference_single"] = lookups / w
            w, c, got = timed(lambda: fast.replay_flat(flat, gpu, B), args.runs)
            row["compiled_single"], row["compiled_single_cpu"] = lookups / w, lookups / c
            equal = got.gpu_blocks.tolist() == [o.gpu_blocks for o in ref]
            w, c, plain = timed(lambda: plain_loop(requests, gpu), max(1, args.runs // 2))
            row["plain_loop_single"] = lookups / w
            equal &= plain == [o.gpu_blocks for o in ref]

            def lcs():
                reader = libcachesim.TraceReader(str(stream), libcachesim.TraceType.PLAIN_TXT_TRACE,
                                                 libcachesim.ReaderInitParam(ignore_obj_size=True))
                return libcachesim.LRU(cache_size=gpu).process_trace(reader)
            w, c, _ = timed(lcs, args.runs)
            row["libcachesim_trace_s"], row["libcachesim_refs_per_s"] = w, refs / w
            row["compiled_trace_s"] = lookups / row["compiled_single"]
            print(f"GPU {gpu:,} blocks: single tier (hits equal: {equal})\n"
                  f"    compiled     {row['compiled_single'] / 1e6:7.1f} M lookups/s  ({row['compiled_trace_s'] * 1e3:6.1f} ms for the trace)\n"
                  f"    reference    {row['reference_single'] / 1e6:7.2f} M lookups/s\n"
                  f"    plain loop   {row['plain_loop_single'] / 1e6:7.2f} M lookups/s\n"
                  f"    libCacheSim  process_trace {w * 1e3:6.1f} ms for the trace ({refs:,} references, "
                  f"{refs / w / 1e6:.1f} M/s): compiled core {w / row['compiled_trace_s']:.1f}x faster")
            row["two_tier"] = []
            cases = [(f, p, None) for f in FLAVORS for p in POLICIES]
            if args.step_tokens:
                cases += [("vllm", p, args.step_tokens) for p in POLICIES]
            for flavor, policy, step in cases:
                kw = dict(cpu_chunks=cpu_chunks, policy=policy, flavor=flavor, **({"step_tokens": step} if step else {}))
                w, c, got = timed(lambda: fast.replay_flat(flat, gpu, B, **kw), args.runs)
                want = TieredCache(gpu, B, **kw).replay(requests)
                same = got.outcomes([r.label for r in requests]) == want
                equal &= same
                row["two_tier"].append({"flavor": flavor, "policy": policy, "step_tokens": step, "per_s": lookups / w,
                                        "cpu_per_s": lookups / c, "equal": same})
                print(f"    two tiers {flavor + (f'/{step}' if step else ''):<10} {policy:<14} {lookups / w / 1e6:6.1f} M lookups/s wall, "
                      f"{lookups / c / 1e6:6.1f} M/s CPU (equal to reference: {same}; target 20 M/s "
                      f"{'met' if lookups / w >= TARGET else 'not met'})")
            row["equal"] = equal
            ok &= equal
            rows.append(row)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"trace": str(args.trace), "lookups": lookups, "rows": rows}, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
