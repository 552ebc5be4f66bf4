"""The workflow benchmark row of docs/BENCHMARKS.md (moved there from the README) (issue 25, item 5) states what the committed run of
benchmarks/bench_workflow.py wrote (benchmarks/results/bench_workflow.json): every figure in the
row is rebuilt from that file, so the row cannot drift from the measurement it cites."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULT = REPO / "benchmarks" / "results" / "bench_workflow.json"


def _row() -> str:
    text = (REPO / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")
    section = text.split("\n## Benchmarks", 1)[1].split("\n## ", 1)[0]
    return next(ln for ln in section.splitlines() if ln.startswith("| issue 25 targets"))


def test_the_readme_row_is_the_committed_run() -> None:
    r = json.loads(RESULT.read_text(encoding="utf-8"))
    med, runs = r["median"], r["runs"]
    row = _row()
    want = [
        f"median of {len(runs)}",
        f"load {r['load_start'][0]:.2f} → {r['load_end'][0]:.2f}",
        f"fresh **{med['fresh_s']:.1f} s**",
        f"minimal workflow {med['minimal_s']:.1f} s",
        f"**{med['fresh_s'] / med['minimal_s']:.2f}×**",
        f"no-op **{med['noop_s']:.2f} s**",
        f"minimal workflow's no-op {med['minimal_noop_s']:.2f} s",
        f"{med['noop_s'] / med['minimal_noop_s']:.2f}×",
        f"hollow workflow {med['hollow_s']:.1f} s = **{med['fresh_s'] / med['hollow_s']:.2f}×**",
        f"the hollow workflow itself is {med['hollow_s'] / med['minimal_s']:.2f}× the minimal",
    ]
    for w in want:
        assert w in row, f"docs/BENCHMARKS.md's benchmark row lacks {w!r} (from {RESULT.name}):\n{row}"
