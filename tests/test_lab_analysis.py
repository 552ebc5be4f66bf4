"""The lab's numbers from the pinned records, against values derived independently: the lab's
printed table and text, and arithmetic done here with the standard library on the raw files."""

import csv
import re
import statistics
from pathlib import Path

import pytest

from kvtier.lab.analysis import LabInputs, analyse
from kvtier.lab.model import read_model
from kvtier.numbers import NumbersWriter

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "raw" / "lab" / "cyclic"
MODEL = REPO / "raw" / "lab" / "model" / "qwen2.5-1.5b-instruct.yaml"


@pytest.fixture(scope="module")
def numbers() -> dict:
    w = NumbersWriter("lab", "test", [])
    analyse(LabInputs.under(RUN, str(MODEL)), w)
    return {k: v["value"] for k, v in w.numbers.items()}


def _rows() -> list[dict]:
    with open(RUN / "requests.csv", newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["phase"] == "doc"]


def test_table_cells_by_hand(numbers):
    # the lab's printed table, median and mean per setup and pass, recomputed with statistics
    printed = {("vllm", "first"): (575.5, 581.2), ("vllm", "second"): (576.2, 575.9), ("vllm", "reverse"): (505.4, 343.6),
               ("lmcache", "first"): (597.8, 605.4), ("lmcache", "second"): (48.6, 49.6), ("lmcache", "reverse"): (47.2, 40.9)}
    rows = _rows()
    for (setup, p), (p50, mean) in printed.items():
        ttft = [float(r["ttft_ms"]) for r in rows if r["setup"] == setup and r["pass"] == p]
        assert len(ttft) == 10
        assert statistics.median(ttft) == pytest.approx(p50, abs=0.05)
        assert statistics.fmean(ttft) == pytest.approx(mean, abs=0.05)
        assert numbers[f"lab.ttft.{setup}.{p}.p50"] == pytest.approx(statistics.median(ttft))


def test_ratios_and_slowdown(numbers):
    assert numbers["lab.ratio.second.p50"] == pytest.approx(576.2 / 48.6, abs=0.01)  # 11.9
    assert numbers["lab.ratio.second.mean"] == pytest.approx(575.9 / 49.6, abs=0.01)  # 11.6
    assert numbers["lab.first_read_slowdown"] == pytest.approx(597.8 / 575.5 - 1, abs=1e-3)  # about 4%


def test_kv_and_model_arithmetic(numbers):
    # K and V x 28 layers x 2 KV heads x (1536 / 12) dims x 2 bytes
    assert read_model(MODEL).kv_bytes_per_token == 2 * 28 * 2 * 128 * 2 == 28_672
    assert numbers["lab.cpu.kv_bytes_all_docs"] == 10 * 5011 * 28_672
    assert numbers["lab.cpu.kv_bytes_all_docs"] / 2**30 == pytest.approx(1.34, abs=0.005)  # "about 1.3GB"
    assert numbers["lab.cpu.limit"] == 1.5 * 2**30
    assert numbers["lab.setup.model_params"] / 1e9 == pytest.approx(1.54, abs=0.005)  # Qwen2.5-1.5B: 1.54B


def test_reverse_pass_split_from_the_counters(numbers):
    assert numbers["lab.reverse.gpu_resolved_tokens"] == 21_488
    assert numbers["lab.reverse.lmcache_queried_tokens"] == 28_755
    assert numbers["lab.reverse.total_tokens"] == 21_488 + 28_755 == 50_243
    assert numbers["lab.reverse.hit_docs"] == [9, 8, 7, 6]
    assert numbers["lab.reverse.partial_doc"] == 5


def test_load_example_from_the_log_text(numbers):
    text = (RUN / "lmcache" / "server.log").read_text(encoding="utf-8")
    got = [tuple(map(int, m)) for m in re.findall(r"Retrieved (\d+) out of (\d+) required", text)]
    assert (4864, 5011) in got
    assert numbers["lab.load.tokens"] == 4864 and numbers["lab.load.chunks"] == 4864 // 256 == 19
    assert numbers["lab.load.computed_tokens"] == 5011 - 4864
    assert 7.5 <= numbers["lab.load.time_min"] < numbers["lab.load.time_max"] < 9.5  # "8-9 ms"
    assert numbers["lab.load.speedup"] > 60


def test_simulator_reproduces_the_measured_gpu_split(numbers):
    # the block simulator, not the replica, gives 4 x 5,008 + 1,456 = 21,488 at the lab's sizes
    assert numbers["lab.sim.second_pass_hit_tokens"] == 0
    assert numbers["lab.sim.reverse.hit_docs"] == numbers["lab.reverse.hit_docs"]
    assert numbers["lab.sim.reverse.gpu_tokens"] == numbers["lab.reverse.gpu_resolved_tokens"]
    assert numbers["lab.sim.whole_doc.reverse.partial_docs"] == 0
    assert numbers["lab.sim.twotier.second.cpu_tokens"] == 10 * 4864


def test_pass_times(numbers):
    rows = _rows()
    for setup, want in (("vllm", 6.2), ("lmcache", 0.9)):
        r = [x for x in rows if x["setup"] == setup and x["pass"] == "second"]
        span = max(float(x["start_s"]) + float(x["e2e_ms"]) / 1000 for x in r) - min(float(x["start_s"]) for x in r)
        assert span == pytest.approx(want, abs=0.05)
        assert numbers[f"lab.pass_time.{setup}.second"] == pytest.approx(span)
