"""Benchmark: ingest throughput of the vLLM log parser (kvtier.production.vllmlog) in MB/s,
beside `grep -c` on the same file.

It writes a log of at least --gb gigabytes (default 1) to a temporary folder by repeating the
setup C replica log (startup lines, ten-second stats and KV Transfer reports, access lines), or
takes an existing one (--log). It parses the file with read_server_log once per --workers value
(default: one worker per available CPU; `--workers 1` is the single-process path, `--workers 1 2`
measures both), counts the report lines once with `grep -c`, prints the rates and their ratio,
and deletes the file it wrote. Nothing is committed. Target: >= 50 MB/s in a single process.
The replica log is dense in reports (two lines in three are stats or KV Transfer lines), so this
is a hard case: a log with more access and request lines parses faster per MB.

    python benchmarks/bench_logparse.py [--gb 1.0] [--keep DIR | --log FILE] [--workers 1 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kvtier.production.vllmlog import read_server_log
from kvtier.replica.production import SEED, generate

TARGET_MB_S = 50.0


def make_log(path: Path, gigabytes: float) -> int:
    """Repeat the replica log until the file holds at least `gigabytes` GB; returns its size."""
    block = generate(SEED).log.encode()
    want = int(gigabytes * 1e9)
    size = 0
    with open(path, "wb") as f:
        while size < want:
            f.write(block)
            size += len(block)
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the generated log in GB (default 1)")
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    ap.add_argument("--log", type=Path, help="parse this existing log instead of writing one (it is kept)")
    ap.add_argument("--workers", type=int, nargs="+", default=None,
                    help="parser processes, one run per value (default: the CPUs available; 1 = single process)")
    args = ap.parse_args()
    folder = None if args.log else (args.keep or Path(tempfile.mkdtemp(prefix="kvtier-bench-")))
    try:
        if args.log:
            path, size = args.log, args.log.stat().st_size
        else:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "bench-server.log"
            size = make_log(path, args.gb)
        mb = size / 1e6
        t0 = time.perf_counter()
        grep = subprocess.run(["grep", "-c", "KV Transfer metrics", str(path)], capture_output=True, text=True, check=True)
        grep_s = time.perf_counter() - t0
        runs = []
        for workers in args.workers or [len(os.sched_getaffinity(0))]:
            t0 = time.perf_counter()
            log = read_server_log(path, 2026, workers=workers)
            runs.append((workers, time.perf_counter() - t0))
            if int(grep.stdout) != len(log.transfers):
                raise SystemExit("parser and grep disagree on the number of KV Transfer lines")
        print(f"log: {mb:,.0f} MB, {len(log.stats):,} stats lines, {len(log.transfers):,} transfer lines "
              f"(grep -c counts {int(grep.stdout):,})")
        for workers, parse_s in runs:
            print(f"kvtier read_server_log: {parse_s:6.2f} s  {mb / parse_s:7.1f} MB/s  ({workers} worker process(es))")
        print(f"grep -c               : {grep_s:6.2f} s  {mb / grep_s:7.1f} MB/s")
        for workers, parse_s in runs:
            print(f"parser / grep -c      : {grep_s / parse_s:.2f} of grep's rate with {workers} worker(s); "
                  f"target >= {TARGET_MB_S:g} MB/s: {'met' if mb / parse_s >= TARGET_MB_S else 'NOT met'}")
    finally:
        if folder is not None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
