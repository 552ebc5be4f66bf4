"""The benchmark row of the measured curve (docs/BENCHMARKS.md, moved there from the README) states the times the records give: every
value in its result cell is rebuilt here from the registry of a fresh build (curve.time.*,
curve.load1_*) with the note's formatting, and the clock times of the first start and the last stop
from the launches' host.yaml directly, then compared with that page word for word."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml

from kvtier.numbers import load_registry
from kvtier.render import formats as f

REPO = Path(__file__).resolve().parent.parent
ROW = "| measured pool-size curve (`production_curve_cpu`)"
PAGE = REPO / "docs" / "BENCHMARKS.md"


def _readme_cell() -> str:
    section = PAGE.read_text(encoding="utf-8").split("\n## Benchmarks", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith(ROW)]
    assert len(rows) == 1, "docs/BENCHMARKS.md's Benchmarks section has no (or two) rows for the measured curve"
    return [c.strip() for c in rows[0].strip("|").split("|")][2]


def _clock(repo: Path) -> str:
    """First launch's start and last launch's stop, from the records themselves."""
    cfg = yaml.safe_load((repo / "config/config.yaml").read_text())
    obs = [yaml.safe_load(p.read_text())["observation"] for p in sorted((repo / cfg["curve"]["records"]).glob("*/host.yaml"))]
    start = min(datetime.fromisoformat(o["start"]) for o in obs)
    end = max(datetime.fromisoformat(o["end"]) for o in obs)
    assert start.date() == end.date()
    return f"{start:%Y-%m-%d %H:%M}–{end:%H:%M} UTC"


def test_the_curve_benchmark_row_states_the_recorded_times(built_repo: Path) -> None:
    r = load_registry(sorted((built_repo / "results/numbers").glob("*.json")))

    def s(key: str) -> str:
        return f.seconds(float(r[key].value), r[key].unit, 0)

    def rng(name: str) -> str:
        return f"({s(f'curve.time.{name}.min').removesuffix(' s')}–{s(f'curve.time.{name}.max')})"

    def mins(key: str) -> str:
        return f.minutes(float(r[key].value), r[key].unit, 0)

    want = (f"{_clock(built_repo)}, run loads {f.num(r['curve.load1_min'].value, '', 1)}–{f.num(r['curve.load1_max'].value, '', 1)}; "
            "from the records (each launch's host.yaml observation and run.yaml wait for `/health`, `curve.time.*` in "
            f"`results/numbers/curve.json`): one launch (server start to stop) **{s('curve.time.launch.median')} median** "
            f"{rng('launch')}, of which `/health` {s('curve.time.health.median')} {rng('health')}; one sweep (every size once, "
            f"by start time) **{s('curve.time.sweep_alone.median')}** of launches, median of {f.count(r['curve.time.sweeps'].value)} "
            f"{rng('sweep_alone')}, {s('curve.time.sweep.median')} {rng('sweep')} from its first start to its last stop; the whole "
            f"experiment **{mins('curve.time.experiment_alone')} min** of launches ({s('curve.time.experiment_alone').replace(' s', '')} s), "
            f"{mins('curve.time.experiment')} min ({s('curve.time.experiment')}) from the first start to the last stop, the rest "
            "waiting for the server lock other users held; the analysis (`curve_cpu`, Figure 2's check included) seconds "
            "(`results/benchmarks/curve_cpu.tsv`)")
    assert _readme_cell() == want
    # the target cell's verdict follows from the same number
    target = [c.strip() for c in [ln for ln in PAGE.read_text().splitlines() if ln.startswith(ROW)][0].strip("|").split("|")][3]
    assert target.endswith(f"met ({mins('curve.time.experiment_alone')} min of launches)") == (float(r["curve.time.experiment_alone"].value) <= 3600)
