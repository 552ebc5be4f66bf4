"""The workflow's cost, in one run, against the minimal two-rule workflow measured beside it.

    python benchmarks/bench_workflow.py [--runs 5] [--cores 2] [--json out.json]

Per run, on a fresh copy of the working tree (as git sees it: no results, no build):
  fresh   build the simulator's C extension in the copy (what `pip install -e .` compiles), then
          `snakemake --cores N` -- everything from raw/, compile included;
  no-op   `snakemake --cores N` again (nothing to do);
  forced  `snakemake --cores N --forceall` (every rule again, extension built);
  minimal `snakemake --cores N --forceall` of benchmarks/minimal (two rules: a table, a figure).
The copy's own package is imported (PYTHONPATH=copy/src), so its freshly built extension is used.
Each is reported as the median wall time, the median CPU time of the child processes
(user + sys: less noisy on a shared machine) and as a ratio to the minimal workflow of the same
run. The last fresh run's per-rule times (results/benchmarks/) are set beside the minimal
workflow's per-rule time (the floor of a `script:` rule that imports pandas).
Targets on a 2-core machine: forced rebuild <= 15 s and <= 3x the minimal workflow; no-op <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from kvtier.worktree import copy_worktree

REPO = Path(__file__).resolve().parent.parent
MINIMAL = REPO / "benchmarks" / "minimal"
# the extension as pyproject.toml declares it, built into the copy's src/ (run from an empty folder,
# so setuptools reads no project configuration: only the compile is timed, not a dependency resolve)
BUILD = ("import sys; from setuptools import setup, Extension; src = sys.argv[1]; "
         "setup(script_args=['-q', 'build_ext', '--build-lib', src, '--build-temp', 'tmp'], "
         "ext_modules=[Extension('kvtier.sim._core', [src + '/kvtier/sim/_core.c'], extra_compile_args=['-O2'])])")


def timed(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the children) of one command; exits on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def per_rule(repo: Path) -> dict[str, float]:
    out = {}
    for f in sorted((repo / "results" / "benchmarks").glob("*.tsv")):
        out[f.stem] = float(pd.read_csv(f, sep="\t")["s"].iloc[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cores", default="2")
    ap.add_argument("--json", type=Path, help="also write the timings here")
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("snakemake"))
    sm = [exe, "--cores", args.cores, "--quiet", "all"]
    rows, rules, floor = [], {}, 0.0
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            repo = copy_worktree(REPO, Path(tmp) / "repo")
            env = {**os.environ, "PYTHONPATH": str(repo / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
            (Path(tmp) / "build").mkdir()
            bw, bc = timed([sys.executable, "-c", BUILD, str(repo / "src")], Path(tmp) / "build", env)
            if not list((repo / "src" / "kvtier" / "sim").glob("_core*.so")):
                sys.exit("the extension was not built into the copy")
            fw, fc = timed(sm, repo, env)
            nw, nc = timed(sm, repo, env)
            rules = per_rule(repo)
            xw, xc = timed(sm + ["--forceall"], repo, env)
            mini = Path(tmp) / "minimal"
            shutil.copytree(MINIMAL, mini)
            timed([exe, "--cores", args.cores, "--quiet", "all"], mini)  # first: outputs exist afterwards
            mw, mc = timed([exe, "--cores", args.cores, "--quiet", "all", "--forceall"], mini)
            floor = max(floor, mw / 2)
        row = {"build_s": bw, "fresh_s": bw + fw, "fresh_cpu_s": bc + fc, "noop_s": nw, "noop_cpu_s": nc,
               "forced_s": xw, "forced_cpu_s": xc, "minimal_s": mw, "minimal_cpu_s": mc}
        rows.append(row)
        print(f"run {i + 1}: fresh {row['fresh_s']:.1f} s (build {bw:.1f} s), no-op {nw:.2f} s, forced {xw:.1f} s, "
              f"minimal {mw:.1f} s", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    ratio = {k: med[k] / med["minimal_s"] for k in ("fresh_s", "noop_s", "forced_s")}
    ratio.update({k: med[k] / med["minimal_cpu_s"] for k in ("fresh_cpu_s", "noop_cpu_s", "forced_cpu_s")})
    print(f"median of {args.runs} (wall / CPU user+sys):")
    for name in ("fresh", "noop", "forced", "minimal"):
        w, c = med[f"{name}_s"], med[f"{name}_cpu_s"]
        extra = "" if name == "minimal" else f"   = {ratio[f'{name}_s']:.2f}x / {ratio[f'{name}_cpu_s']:.2f}x the minimal workflow"
        print(f"  {name:<8}{w:6.2f} s / {c:6.2f} s{extra}")
    rule_floor = med["minimal_s"] / 2
    print(f"per rule, last fresh run (the minimal workflow's mean rule: {rule_floor:.2f} s wall):")
    for name, s in sorted(rules.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<22}{s:6.2f} s  {s / rule_floor:5.1f}x the floor")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "median": med, "ratio": ratio, "rules_s": rules,
                                         "rule_floor_s": rule_floor}, indent=1) + "\n")


if __name__ == "__main__":
    main()
