"""Time the full reproduction from raw/ (clean copy) and a no-op rerun; report the medians.

    python benchmarks/bench_workflow.py [--runs 5] [--cores 2]

Each run copies the working tree to a fresh temporary folder (no results, no .snakemake), runs
`snakemake --cores N` there, then times `snakemake --cores N` again (nothing to do).
Targets on a 2-core machine: full run <= 30 s, no-op <= 3 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtier.worktree import copy_worktree

REPO = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{done.stderr[-3000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cores", default="2")
    ap.add_argument("--json", type=Path, help="also write the timings here")
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("snakemake"))
    full, noop = [], []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            repo = copy_worktree(REPO, Path(tmp))
            full.append(timed([exe, "--cores", args.cores, "--quiet", "all"], repo))
            noop.append(timed([exe, "--cores", args.cores, "--quiet", "all"], repo))
        print(f"run {i + 1}: full {full[-1]:.1f} s, no-op {noop[-1]:.2f} s", flush=True)
    result = {"runs": args.runs, "cores": args.cores, "full_median_s": statistics.median(full),
              "noop_median_s": statistics.median(noop), "full_s": full, "noop_s": noop}
    print(f"median of {args.runs}: full run {result['full_median_s']:.1f} s, no-op rerun {result['noop_median_s']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
