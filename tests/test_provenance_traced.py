"""Issue 25, item 2: a number's provenance is read off the records its computation touched.

The production analysis writes no list of files beside its numbers: each value is computed
through `NumbersWriter.compute`, and the records (a Snapshot, the server log, host.yaml, the
cold-read and headroom tables, the eviction records behind the restore correction) touch their
files when read (kvtier.records.touch). Checked here by perturbing one record at a time in a
copy of raw/: every number that moved names it, and for records whose every dependent a
perturbation reaches (the cold reads, the headroom tests), exactly the numbers that moved name it.
"""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kvtier.numbers import NumbersWriter
from kvtier.production.pipeline import analyse, ingest
from kvtier.records.prometheus import Snapshot
from kvtier.records.touch import quiet, scope, sources_of, traced, wrap

REPO = Path(__file__).resolve().parent.parent
C = Path("raw/production/C")
SETTINGS = {"restore_extra_blocks": 4, "large_restore_tokens": 100_000, "huge_restore_tokens": 500_000,
            "prompt_edges": [200_000, 500_000], "ttft_fast_s": 1.0, "ttft_slow_s": 20.0,
            "deferred_threshold_s": 5.0, "top_hours": 2, "link_max_bytes_per_s": 63.0e9,
            "min_transfer_bytes_per_s": 1.0e9}


def test_arithmetic_carries_the_union_and_a_scope_sees_what_a_record_read() -> None:
    a, b = wrap(3.0, {"x"}), wrap(2, {"y"})
    assert sources_of(a / b) == sources_of(b - a) == {"x", "y"}
    assert sources_of(1.0 / a) == {"x"} and a / b == 1.5
    snap = Snapshot.parse("# TYPE t counter\nt_total 4.0\n", "m.prom")
    with scope() as seen:
        assert snap.total("t_total") == 4.0
    assert seen == {"m.prom"}
    with scope() as seen, quiet():
        snap.value("t_total")  # a check reads without touching
    assert seen == set()
    assert sources_of(traced(lambda: {"v": snap.value("t_total") * 2})["v"]) == {"m.prom"}


def _numbers() -> dict[str, dict]:
    rec = ingest(C / "metrics.prom", C / "server.log", C / "host.yaml", SETTINGS)
    w = NumbersWriter("prod", "test", ["everything"])
    analyse(rec, C / "coldreads.csv", SETTINGS, C / "headroom.csv", w)
    return w.numbers


def _moved(before: dict, after: dict) -> set[str]:
    return {k for k in before if k in after and before[k]["value"] != after[k]["value"]}


def _naming(nums: dict, path: Path) -> set[str]:
    return {k for k, d in nums.items() if path.as_posix() in d["inputs"]}


@pytest.fixture()
def raw_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "raw" / "production" / "C", tmp_path / C)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _slower_cold_reads(path: Path) -> None:  # not uniform: the share extrapolated moves too
    lines = path.read_text().splitlines()
    rows = [lines[0]] + [re.sub(r"^(\d+),([\d.]+),", lambda m: f"{m.group(1)},{float(m.group(2)) + 0.5 * i},", ln)
                         for i, ln in enumerate(lines[1:], 1)]
    path.write_text("\n".join(rows) + "\n")


def _more_ram_free(path: Path) -> None:  # every pool, free RAM and /dev/shm size one GiB larger
    rows = list(csv.DictReader(path.open(newline="")))
    for r in rows:
        for k in ("pool_gib", "free_ram_gib", "shm_total_gib"):
            if r[k]:
                r[k] = str(float(r[k]) + 1)
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)


def _longer_observation(path: Path) -> None:
    meta = yaml.safe_load(path.read_text())
    meta["observation"]["end"] = meta["observation"]["end"].replace(hour=meta["observation"]["end"].hour + 1)
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


@pytest.mark.parametrize(("name", "perturb", "exact"), [("coldreads.csv", _slower_cold_reads, True),
                                                         ("headroom.csv", _more_ram_free, True),
                                                         ("host.yaml", _longer_observation, False)])
def test_a_perturbed_record_moves_the_numbers_that_name_it(raw_copy: Path, name: str, perturb, exact: bool) -> None:
    before = _numbers()
    assert all(d["inputs"] != ["everything"] for d in before.values())
    assert before["prod.prompt.low_edge"]["inputs"] == []  # settings: no record
    assert before["prod.tokens.share_pool"]["inputs"] == [(C / "metrics.prom").as_posix()]
    target = C / name
    perturb(target)
    moved = _moved(before, _numbers())
    naming = _naming(before, target)
    assert moved, f"the perturbation of {name} moved nothing"
    assert moved <= naming, f"moved when {name} changed but do not name it: {sorted(moved - naming)}"
    if exact:
        assert naming == moved, f"name {name} but did not move: {sorted(naming - moved)}"
    else:  # host.yaml: the observation's end moves the period and what is computed from it
        assert {"prod.period", "prod.hours.in_period", "prod.stores.share_of_period"} <= moved
