"""Issue 13, item 4: each number lists the raw files it read, checked by perturbation.

Change one raw file in a copy of raw/, recompute: every number whose value moved must list
that file. And the converse the note relies on: Table 1's numbers of one setup never cite the
other setup's runs, the excluded run or the CPU self-test.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kvtier.eviction import analysis
from kvtier.eviction.records import REQUEST_SCHEMA, RUN_SCHEMA
from kvtier.numbers import NumbersWriter
from kvtier.production.pipeline import analyse, ingest

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {"restore_extra_blocks": 4, "large_restore_tokens": 100_000, "huge_restore_tokens": 500_000,
            "prompt_edges": [200_000, 500_000], "ttft_fast_s": 1.0, "ttft_slow_s": 20.0,
            "deferred_threshold_s": 5.0, "top_hours": 2, "link_max_bytes_per_s": 63.0e9,
            "min_transfer_bytes_per_s": 1.0e9}


def _evict_runs() -> list[Path]:
    """The runs rule eviction_numbers reads: the long-context launches have their own rule (longctx_numbers)."""
    return sorted(p for p in Path("raw/eviction").glob("*/*") if p.parent.name != "longctx")


def _evict_numbers() -> dict[str, dict]:
    runs_dirs = _evict_runs()
    reqs, runs = analysis.load(runs_dirs, RUN_SCHEMA, REQUEST_SCHEMA)
    w = NumbersWriter("evict", "test", ["everything"])
    analysis.register_numbers(w, reqs, runs, ["A", "C"], "cpu")
    return w.numbers


def _scale_ttft(path: Path) -> None:
    lines = []
    for ln in path.read_text().splitlines():
        rec = json.loads(ln)
        for k in ("ttft_s", "first_chunk_s"):
            if rec.get(k) is not None:
                rec[k] = rec[k] * 1.5
        lines.append(json.dumps(rec, sort_keys=True))
    path.write_text("\n".join(lines) + "\n")


def _bump_gpu(path: Path) -> None:
    meta = yaml.safe_load(path.read_text())
    if meta["host"].get("gpu"):
        meta["host"]["gpu"]["memory_total_mib"] += 1024
    meta["model"]["params"] = (meta["model"].get("params") or 1) + 10**6
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if k in after and before[k]["value"] != after[k]["value"]}


@pytest.fixture()
def raw_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "raw", tmp_path / "raw")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_eviction_numbers_list_only_the_runs_they_rest_on(raw_copy: Path) -> None:
    nums = _evict_numbers()
    for key, d in nums.items():
        assert d["inputs"] != ["everything"], f"{key} fell back to every input of the rule"
        m = re.match(r"evict\.(A|C|cpu)\.", key)
        if m:
            assert all(p.startswith(f"raw/eviction/{m.group(1)}/") for p in d["inputs"]), key
        if not key.startswith("evict.cpu."):
            assert not any(p.startswith("raw/eviction/cpu/") for p in d["inputs"]), key
    excluded = "raw/eviction/A/2026-10-13T15-30-10Z/"
    assert not any(p.startswith(excluded) for p in nums["evict.A.ttft.cold"]["inputs"])
    assert any(p.startswith(excluded) for p in nums["evict.excluded_runs"]["inputs"])  # it counts that run
    assert nums["evict.A.gpu_memory"]["inputs"] == ["raw/eviction/A/2026-10-14T09-12-05Z/run.yaml"]


@pytest.mark.parametrize("change", ["requests", "run"])
def test_every_moved_eviction_number_lists_the_changed_file(raw_copy: Path, change: str) -> None:
    before = _evict_numbers()
    for run in _evict_runs():
        target = run / ("requests.jsonl" if change == "requests" else "run.yaml")
        saved = target.read_bytes()
        (_scale_ttft if change == "requests" else _bump_gpu)(target)
        moved = _changed(before, _evict_numbers())
        target.write_bytes(saved)
        for key in moved:
            assert target.as_posix() in before[key]["inputs"], f"{key} moved when {target} changed but does not list it"
        if change == "requests" and run.parent.name != "cpu" and run.name != "2026-10-13T15-30-10Z":
            assert f"evict.{run.parent.name}.ttft.cold" in moved  # the perturbation does reach the note


def _prod_numbers() -> dict[str, dict]:
    raw = Path("raw/production/C")
    rec = ingest(raw / "metrics.prom", raw / "server.log", raw / "host.yaml", SETTINGS)
    w = NumbersWriter("prod", "test", ["everything"])
    analyse(rec, raw / "coldreads.csv", SETTINGS, raw / "headroom.csv", w)
    return w.numbers


def test_production_numbers_moved_by_a_file_list_it(raw_copy: Path) -> None:
    before = _prod_numbers()
    assert all(d["inputs"] != ["everything"] for d in before.values())
    assert before["prod.tokens.share_pool"]["inputs"] == ["raw/production/C/metrics.prom"]
    # cold reads: a slower cold read moves only the modelled prefill
    cold = Path("raw/production/C/coldreads.csv")
    text = cold.read_text()
    lines = text.splitlines()
    head, rows = lines[0].split(","), [ln.split(",") for ln in lines[1:]]
    i = next(j for j, h in enumerate(head) if "second" in h or h.endswith("_s"))
    for r in rows:
        r[i] = str(float(r[i]) * 1.2)
    cold.write_text("\n".join([lines[0], *(",".join(r) for r in rows)]) + "\n")
    moved = _changed(before, _prod_numbers())
    cold.write_text(text)
    assert moved and all("raw/production/C/coldreads.csv" in before[k]["inputs"] for k in moved)
    assert "prod.coldread.total" in moved
    # headroom observations move only the recommendations' numbers
    head_csv = Path("raw/production/C/headroom.csv")
    text = head_csv.read_text()
    head_csv.write_text(re.sub(r"(\d+\.\d+)", lambda m: str(float(m.group(1)) + 1), text))
    moved = _changed(before, _prod_numbers())
    head_csv.write_text(text)
    assert moved and all("raw/production/C/headroom.csv" in before[k]["inputs"] for k in moved), moved
