"""Issue 34, item 2: repeats that say what they show. On a fresh build no rendered page prints a
degenerate range "(x–x)"; where a stream is deterministic (one request in flight, the launches of a
size identical) the pages say so and count the distinct requests instead."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from kvtier.numbers import load_registry
from kvtier.render import formats as f
from kvtier.render.env import NO_SPREAD, collapse_degenerate_ranges

SAME = re.compile(r"\(([^()\n–]+?)–\1\)")


@pytest.mark.parametrize("doc", ["note", "validation", "lab"])
def test_no_rendered_cell_reads_x_to_x(built_repo: Path, doc: str) -> None:
    md = (built_repo / f"paper/{doc}.md").read_text(encoding="utf-8")
    assert not SAME.findall(md), SAME.findall(md)[:5]
    text = html.unescape(re.sub(r"<[^>]+>", "", (built_repo / f"paper/{doc}.html").read_text(encoding="utf-8")))
    assert not SAME.findall(text), SAME.findall(text)[:5]


def test_a_degenerate_range_collapses_and_a_real_one_stays() -> None:
    assert collapse_degenerate_ranges("384 s● (384 s●–384 s●)") == f"384 s● {NO_SPREAD}"
    assert collapse_degenerate_ranges("1.18 s (1.13 s–1.24 s)") == "1.18 s (1.13 s–1.24 s)"
    linked = ('(<a class="num measured" href="p#n-a.min" title="a">38.3%<span class="mk">●</span></a>–'
              '<a class="num measured" href="p#n-a.max" title="b">38.3%<span class="mk">●</span></a>)')
    # the HTML keeps the range's two keys, for the spreads check (render.spreads)
    assert collapse_degenerate_ranges(linked) == '(<span class="no-spread" data-keys="a.min a.max">no spread</span>)'
    from kvtier.render.spreads import missing_spreads
    median = '<a class="num measured" href="p#n-a.median">38.3%</a> '
    assert missing_spreads(f"<p>{median}{collapse_degenerate_ranges(linked)}</p>") == []


def test_deterministic_streams_are_said_and_counted(built_repo: Path) -> None:
    r = load_registry(sorted((built_repo / "results/numbers").glob("*.json")))
    marks = str.maketrans("", "", "●△◇◈")
    note = (built_repo / "paper/note.md").read_text(encoding="utf-8").translate(marks)
    distinct = int(r["curve.requests_distinct"].value)
    # recomputed here: one launch's requests at every size (the stream sends the same turns at each)
    assert distinct == int(r["curve.requests"].value) * int(r["curve.sizes"].value)
    assert int(r["curve.requests_all"].value) == distinct * int(r["curve.repeats_min"].value)  # 2,520 = 3 x 840
    assert "the stream is deterministic" in note and f"{f.count(distinct)}" in note
    assert "the launches of a size identical" in note
    lab = (built_repo / "paper/lab.md").read_text(encoding="utf-8").translate(marks)
    lab_distinct = int(r["lablm.requests_distinct"].value)
    assert int(r["lablm.requests"].value) == 3 * lab_distinct  # 279 = 3 x 93: three launches of each setup
    assert f"these are {f.count(lab_distinct)}" in lab and "identical in all three launches" in lab
