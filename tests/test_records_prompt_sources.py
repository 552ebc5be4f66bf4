"""The prompt tokens by source add up to vllm:prompt_tokens_total, per engine, in every scrape
(records.runcontract_counters.check_prompt_sources).

vLLM increments vllm:prompt_tokens_total and the three vllm:prompt_tokens_by_source_total
counters in one place from one PromptTokenStats per step (v1/metrics/loggers.py, record), whose
sources are computed = prompt - cached, local cache hit and external transfer
(v1/metrics/stats.py, PrefillStats.set): their sum is the prompt tokens, exactly. Every committed
scrape passes; an edited copy (64 more computed tokens) is refused by each domain's reader (the
replay run, the lab, the eviction test, the live lab's contract), naming the scrape and the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.eviction import analysis
from kvtier.records import labrun, replayrun
from kvtier.records.evictionrun import read_run
from kvtier.records.prometheus import Snapshot, read_prometheus
from kvtier.records.runcontract_counters import check_prompt_sources, check_series
from kvtier.records.touch import quiet

from perturbation import REPO, copier, sub

CURVE = "raw/production/cpu-curve/r1-pool-0.03125"
LAB = "raw/lab/cyclic-cpu/native"
EVICTION = "raw/eviction/cpu/2026-12-01-native"
LABELS = r'\{engine="0",model_name="tiny"\}'


def refusal(got: int, lines: str, total: int) -> str:
    """The refusal's message, as a regex."""
    return (rf"vllm:prompt_tokens_by_source_total{LABELS} sums to {got} over its sources \(lines {lines}\), but "
            rf"vllm:prompt_tokens_total{LABELS} is {total}: vLLM counts both from the same prompt tokens")


def line_of(path: Path, needle: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if needle in l)


def test_every_committed_scrape_adds_up() -> None:
    """All 1,277 committed scrapes (measured and replica; replay, eviction, lab, production)."""
    snaps = sorted((REPO / "raw").rglob("*.prom"))
    kinds = {p.relative_to(REPO / "raw").parts[:2] for p in snaps}
    assert {("production", "cpu"), ("production", "cpu-curve"), ("production", "cpu-sweep"), ("production", "C"),
            ("eviction", "cpu"), ("eviction", "longctx"), ("eviction", "A"), ("eviction", "C"), ("lab", "cyclic"),
            ("lab", "cyclic-cpu"), ("lab", "cyclic-lmcache-cpu")} <= kinds
    with quiet():
        for p in snaps:
            snap = read_prometheus(p)
            assert snap.has("vllm:prompt_tokens_by_source_total") and snap.has("vllm:prompt_tokens_total"), p
            check_prompt_sources(snap)


def test_replay_run_refuses_computed_tokens_the_total_lacks(tmp_path: Path) -> None:
    d = copier(tmp_path)(CURVE) / CURVE
    replayrun.read(d)  # the copy reads
    prom = d / "metrics.prom"
    sub('source="local_compute"} 171827.0', 'source="local_compute"} 171891.0')(prom)
    with pytest.raises(RawRecordError, match=refusal(233971, "286, 287, 288", 233907)) as e:
        replayrun.read(d)
    assert e.value.path == str(prom) and e.value.line == line_of(prom, "vllm:prompt_tokens_total{")


def test_lab_refuses_it(tmp_path: Path) -> None:
    d = copier(tmp_path)(LAB) / LAB
    labrun.metrics_by_pass(d / "metrics", "native")
    prom = d / "metrics" / "2_second.prom"
    sub('source="local_compute"} 40952.0', 'source="local_compute"} 41016.0')(prom)
    with pytest.raises(RawRecordError, match=refusal(79928, "286, 287, 288", 79864)) as e:
        labrun.metrics_by_pass(d / "metrics", "native")
    assert e.value.path == str(prom) and e.value.line == 280


def test_eviction_run_refuses_it(tmp_path: Path) -> None:
    d = copier(tmp_path)(EVICTION) / EVICTION
    analysis.measured_rows(read_run(d))
    prom = d / "metrics" / "002_hit_after.prom"
    sub('source="local_compute"} 16011.0', 'source="local_compute"} 16075.0')(prom)
    with pytest.raises(RawRecordError, match=refusal(24139, "262, 263, 264", 24075)) as e:
        analysis.measured_rows(read_run(d))
    assert e.value.path == str(prom) and e.value.line == 256


def test_live_contract_refuses_it() -> None:
    text = (REPO / LAB / "metrics" / "2_second.prom").read_text()
    check_series(Snapshot.parse(text, "live"))
    bad = Snapshot.parse(text.replace('source="local_compute"} 40952.0', 'source="local_compute"} 41016.0'), "live")
    with pytest.raises(RawRecordError, match=refusal(79928, "286, 287, 288", 79864)) as e:
        check_series(bad)
    assert e.value.line == 280


def test_an_engine_without_a_total_is_refused() -> None:
    text = (REPO / LAB / "metrics" / "2_second.prom").read_text()
    bad = Snapshot.parse(text.replace('vllm:prompt_tokens_total{engine="0"', 'vllm:prompt_tokens_total{engine="1"'), "x")
    with pytest.raises(RawRecordError, match=r'sums to 0 over its sources \(lines none for these labels\)') as e:
        check_prompt_sources(bad)
    assert e.value.line == 280
