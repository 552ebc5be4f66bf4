"""Every measured median in the rendered pages has its spread beside it (kvtier.render.spreads):
the rule on made-up pages, then on the pages a build wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.render.spreads import missing_spreads, spread_pairs

def num(key: str, cls: str = "num measured") -> str:
    return f'<a class="{cls}" href="note.provenance.html#n-{key}">1</a>'


@pytest.mark.parametrize("key, pair", [
    ("evict.cpu.native.ttft.cold.median", ("evict.cpu.native.ttft.cold.min", "evict.cpu.native.ttft.cold.max")),
    ("evict.cpu.native.ttft.cold.median", ("evict.cpu.native.ttft.cold.ci95_lo", "evict.cpu.native.ttft.cold.ci95_hi")),
    ("prodcpu.method.median_abs_error", ("prodcpu.method.min_abs_error", "prodcpu.method.max_abs_error")),
    ("lablive.vllm.second.ttft_p50", ("lablive.vllm.second.ttft_min", "lablive.vllm.second.ttft_max")),
    ("lablm.vllm.second.ttft_p50", ("lablm.vllm.second.ttft_p50_min", "lablm.vllm.second.ttft_p50_max")),
])
def test_a_median_with_its_spread_in_the_same_block_passes_and_without_it_fails(key: str, pair: tuple[str, str]):
    assert pair in spread_pairs(key)
    assert missing_spreads(f"<p>{num(key)} ({num(pair[0])}–{num(pair[1])})</p>") == []
    assert [k for k, _ in missing_spreads(f"<p>{num(key)}</p><p>{num(pair[0])}–{num(pair[1])}</p>")] == [key]  # not beside it
    assert [k for k, _ in missing_spreads(f"<table><tr><td>{num(key)}</td><td>{num(pair[0])}</td></tr></table>")] == [key]  # half


def test_only_measured_medians_are_held_to_it_and_a_spread_is_not_a_median():
    assert missing_spreads(f"<p>{num('cf.x.median', 'num modelled')} {num('prod.y.median', 'num replica')}</p>") == []
    assert spread_pairs("evict.cpu.load1_median.min") == [] and spread_pairs("lablm.vllm.first.ttft_p50_max") == []
    assert spread_pairs("curve.size.2.measured.share_pool.max") == [] and spread_pairs("curve.requests") == []


@pytest.mark.parametrize("page", ["note.html", "validation.html", "validation-pool.html", "lab.html"])
def test_every_measured_median_of_the_built_pages_has_its_spread_beside_it(built_repo: Path, page: str):
    path = built_repo / "paper" / page
    assert path.is_file(), f"{page} is not a target of the default build"
    text = path.read_text(encoding="utf-8")
    assert "measured" in text  # the pages mark measured numbers: the rule has something to check
    assert missing_spreads(text) == []
