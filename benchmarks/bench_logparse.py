"""Benchmark: the production log ingest (kvtier.records.serverlog.summarize_server_log: the
streamed parse, the data contract on every chunk, the reduction) in MB/s and peak memory, beside
two floors measured in the same run on the same file: reading it (`cat > /dev/null`) and
`grep -c` of its transfer lines.

It writes a log of at least --gb gigabytes (default 1) to a temporary folder: the setup C replica
log (startup lines, ten-second stats and KV Transfer reports, access lines) once, then its reports
again and again, each copy shifted 26 hours later, so that the whole file is one valid server run
that passes the data contract. Or it takes an existing log (--log). Each measurement runs in a
fresh process (--runs times, default 3; the median is reported), with `--workers 1` the single-core
path; its peak memory is that process's maximum resident set size (ru_maxrss), which includes the
interpreter and its imports (the baseline, printed beside it). Nothing is committed.
Targets (issue 14, item 5): >= 150 MB/s on one core and peak <= 200 MB for a 1 GB log.

    python benchmarks/bench_logparse.py [--gb 1.0] [--runs 3] [--workers 1 2] [--keep DIR | --log FILE]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from kvtier.replica.production import SEED, generate

TARGET_MB_S = 150.0
TARGET_PEAK_MB = 200.0
STAMP = re.compile(rb"(?<= )(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?= )")
CHILD = r"""
import json, resource, sys, time
from kvtier.records.serverlog import summarize_server_log
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0, c0 = time.perf_counter(), time.process_time()
s = summarize_server_log(sys.argv[1], int(sys.argv[2]), workers=int(sys.argv[3]))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"wall": wall, "cpu": cpu, "base_kb": base, "peak_kb": peak, "child_peak_kb": kids,
                  "stats": s.n_stats, "transfers": s.n_transfers, "loads": len(s.loads)}))
"""


def make_log(path: Path, gigabytes: float) -> tuple[int, int]:
    """The replica log, then its report lines again, 26 h later each time, until the file holds
    at least `gigabytes` GB; returns (size, the year of its first line)."""
    text = generate(SEED).log.encode()
    lines = text.split(b"\n")
    first_report = next(i for i, line in enumerate(lines) if b"Starting vLLM server" in line) + 1
    body = b"\n".join(lines[first_report:]).rstrip(b"\n") + b"\n"
    year = 2026
    want, size, k = int(gigabytes * 1e9), 0, 0
    with open(path, "wb") as f:
        f.write(text)
        size = len(text)
        while size < want:
            k += 1
            shift = timedelta(hours=26 * k)
            cache: dict[bytes, bytes] = {}

            def moved(m: re.Match[bytes]) -> bytes:
                old = m.group(0)
                if old not in cache:
                    t = datetime.strptime(f"{year} {old.decode()}", "%Y %m-%d %H:%M:%S") + shift
                    cache[old] = t.strftime("%m-%d %H:%M:%S").encode()
                return cache[old]

            block = STAMP.sub(moved, body)
            f.write(block)
            size += len(block)
    return size, year


def floor_rates(path: Path, size_mb: float) -> dict[str, float]:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(["grep", "-c", "KV Transfer metrics", str(path)], capture_output=True, check=True)
    grep_s = time.perf_counter() - t0
    return {"read": size_mb / read_s, "grep": size_mb / grep_s}


def measure(path: Path, year: int, workers: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(year), str(workers)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"ingest failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the generated log in GB (default 1)")
    ap.add_argument("--runs", type=int, default=3, help="measurements per worker count; the median is reported")
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    ap.add_argument("--log", type=Path, help="ingest this existing log instead of writing one (it is kept)")
    ap.add_argument("--year", type=int, default=2026, help="year of the first line of --log")
    ap.add_argument("--workers", type=int, nargs="+", default=[1],
                    help="parser processes, one series of runs per value (default 1: the single-core path)")
    args = ap.parse_args()
    folder = None if args.log else (args.keep or Path(tempfile.mkdtemp(prefix="kvtier-bench-")))
    try:
        if args.log:
            path, size, year = args.log, args.log.stat().st_size, args.year
        else:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "bench-server.log"
            size, year = make_log(path, args.gb)
        mb = size / 1e6
        print(f"log: {mb:,.0f} MB ({path})")
        for workers in args.workers:
            runs, floors = [], []
            for _ in range(args.runs):
                floors.append(floor_rates(path, mb))  # the floors of the same moment, run by run
                runs.append(measure(path, year, workers))
            wall = statistics.median(r["wall"] for r in runs)
            cpu = statistics.median(r["cpu"] for r in runs)
            peak = statistics.median(max(r["peak_kb"], r["child_peak_kb"]) for r in runs) / 1024
            base = statistics.median(r["base_kb"] for r in runs) / 1024
            read = statistics.median(f["read"] for f in floors)
            grep = statistics.median(f["grep"] for f in floors)
            r0 = runs[0]
            print(f"{r0['stats']:,} stats lines, {r0['transfers']:,} transfer reports, {r0['loads']:,} with a load")
            own = f"   ({mb / cpu:.1f} MB/s of its own CPU time)" if workers == 1 else ""
            print(f"summarize_server_log, {workers} worker(s), median of {args.runs}: {wall:6.2f} s wall  "
                  f"{mb / wall:7.1f} MB/s{own}")
            which = "" if workers == 1 else " per process (the largest of the parent and its workers)"
            print(f"  peak memory{which} {peak:6.0f} MB (interpreter and imports alone: {base:.0f} MB)   "
                  f"floors: read {read:,.0f} MB/s, grep -c {grep:,.0f} MB/s; ingest / read = {mb / wall / read:.3f}, "
                  f"ingest / grep = {mb / wall / grep:.3f}")
            print(f"  targets: >= {TARGET_MB_S:g} MB/s: {'met' if mb / wall >= TARGET_MB_S else 'NOT met'}; "
                  f"peak <= {TARGET_PEAK_MB:g} MB: {'met' if peak <= TARGET_PEAK_MB else 'NOT met'}")
    finally:
        if folder is not None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
