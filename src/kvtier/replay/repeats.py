"""Repeated, interleaved launches of one fixed stream at several pool sizes (the measured curve).

    python -m kvtier repeats --out raw/production/cpu-curve --pools 0 0.03125 0.0625 \
        --repeats 3 --lock /tmp/kvtier-vllm.lock -- --trace ... --fixed-order --count 240 ...

Launch k of repeat r at pool p writes `<out>/r<r>-pool-<p>/`: repeats go A B C ... A B C ... so
a slow drift of a shared machine spreads over every setting instead of landing on one. Every
folder is checked absent before the first server starts (a run never writes into an existing
folder), and every launch holds the shared server lock for itself only (`flock LOCK`, one launch
per hold), so other users of the machine's one server slot get their turn between launches. A
launch that fails keeps its folder, renamed `<name>.failed`, with its log; the others go on.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from .. import cliargs as A
from . import tier_args


def plan(out: Path, pools: list[float], repeats: int) -> list[tuple[Path, float]]:
    """(folder, pool GiB) of every launch, in the interleaved order."""
    return [(out / f"r{r}-pool-{p:g}", p) for r in range(1, repeats + 1) for p in pools]


def launch_command(python: str, lock: str | None, folder: Path, pool: float, replay_args: list[str],
                   timeout_s: int) -> list[str]:
    cmd = ["timeout", str(timeout_s), python, "-m", "kvtier", "replay", *replay_args, *tier_args(pool).split(),
           "--out", str(folder), "--no-progress"]
    return ["flock", lock, *cmd] if lock else cmd


def build_parser(prog: str = "kvtier repeats") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=A.folder_to_write, help="folder of the experiment: one new sub-folder per launch")
    p.add_argument("--pools", type=A.NONNEG, nargs="+", required=True, help="pool sizes in GiB (0: no second tier)")
    p.add_argument("--repeats", type=A.COUNT, default=3)
    p.add_argument("--lock", default="/tmp/kvtier-vllm.lock", help="flock file held around each launch ('' for none)")
    p.add_argument("--launch-timeout", type=A.COUNT, default=900, help="seconds one launch may take")
    p.add_argument("--python", default=sys.executable, type=A.executable, help="the Python that runs `kvtier replay` (the vLLM venv's)")
    p.add_argument("replay_args", nargs=argparse.REMAINDER, help="-- then kvtier replay's options (without --out and the tier)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    args = a.replay_args[1:] if a.replay_args[:1] == ["--"] else a.replay_args
    if "--fixed-order" not in args:
        print("error: repeats compare launches of one stream: pass --fixed-order to kvtier replay", file=sys.stderr)
        return 2
    launches = plan(Path(a.out), a.pools, a.repeats)
    there = [str(f) for f, _ in launches if f.exists() or f.with_name(f.name + ".failed").exists()]
    if there:
        raise SystemExit(f"error: {len(there)} launch folders exist already ({there[0]} ...): a run writes a new folder of its own")
    failed = []
    t_all = time.monotonic()
    for k, (folder, pool) in enumerate(launches, 1):
        folder.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        rc = subprocess.call(launch_command(a.python, a.lock or None, folder, pool, args, a.launch_timeout))
        took = time.monotonic() - t0
        print(f"launch {k}/{len(launches)} {folder}: rc {rc}, {took:.0f} s (lock wait included)", flush=True)
        if rc != 0:
            failed.append(str(folder))
            if folder.exists():
                folder.rename(folder.with_name(folder.name + ".failed"))
    print(f"{len(launches) - len(failed)} of {len(launches)} launches done in {time.monotonic() - t_all:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
