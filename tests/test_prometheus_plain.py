"""The plain-text fast path of kvtier.records.prometheus parses as prometheus_client does: the
same families, types and samples on every pinned scrape and on edge cases, and None (so that
prometheus_client parses) on text outside the plain shapes (issue 25, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.manifest import read_manifest
from kvtier.records.prometheus import Snapshot, _plain_families

REPO = Path(__file__).resolve().parent.parent


def _client(text: str) -> list[tuple] | None:
    try:
        fams = list(text_string_to_metric_families(text))
    except Exception:
        return None
    return [(f.name, f.type, [(s.name, dict(s.labels), float(s.value)) for s in f.samples]) for f in fams]


def _plain(text: str) -> list[tuple] | None:
    fams = _plain_families(text)
    return None if fams is None else [(f.name, f.type, [(s.name, s.labels, s.value) for s in f.samples]) for f in fams]


def _same(a: list[tuple] | None, b: list[tuple] | None) -> bool:
    """Equal, NaN equal to NaN."""
    if a is None or b is None:
        return a is b
    return repr(a) == repr(b)


def test_every_pinned_scrape_parses_as_prometheus_client_parses_it() -> None:
    entries = read_manifest(REPO / "raw" / "MANIFEST.tsv")
    scrapes = [p for p in entries if p.endswith(".prom") or "metrics" in Path(p).name]
    assert len(scrapes) > 100
    plain = 0
    for rel in scrapes:
        text = (REPO / rel).read_text(encoding="utf-8", errors="replace")
        got = _plain(text)
        if got is not None:
            plain += 1
            assert _same(got, _client(text)), rel
    assert plain > 0.9 * len(scrapes)


CASES = [
    "# HELP a_total A.\n# TYPE a_total counter\na_total 3\n",
    "# HELP a A.\n# TYPE a counter\na_total{x=\"1\"} 3\na_created{x=\"1\"} 1.7e9\n",
    "# TYPE a counter\na 3\n",  # a counter whose sample lacks _total: renamed by the munging
    "# TYPE h histogram\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nh_sum 3.5\n",
    "# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_count 2\ns_sum 3\n",
    "# TYPE g gauge\ng{a=\"x,y}z\",b=\"\"} NaN\ng{a=\"2\"} +Inf 1700000000000\ng -Inf\n",
    "x 1\ny{} 2\n\n  \n# just a comment\n#\n",
    "# TYPE g gauge\ng{a=\"1\",a=\"2\"} 1\n",  # a repeated label: None, prometheus_client refuses
    "# TYPE g gauge\ng{__name__=\"x\"} 1\n",
    "# TYPE g weird\ng 1\n",
    "# TYPE g\ng 1\n",
    "# HELP\n",
    "g{a=\"x\\\"y\"} 1\n",  # an escape
    "# HELP g quoted \"doc\"\ng 1\n",
    "g 1_000\n",
    "g  1\n",
    "g\t1\n",
    "g 1 2 3\n",
    "g 0x10\n",
    "g{a=\"1\",} 1\n",
    "g{ a=\"1\"} 1\n",
    "g 1\r\n",
    "# TYPE i info\ni_info{v=\"1\"} 1\n",
    "# TYPE a gauge\n# HELP b B\nb 1\na 2\n",
]


@pytest.mark.parametrize("text", CASES)
def test_edge_cases_parse_as_prometheus_client_or_fall_back(text: str) -> None:
    got = _plain(text)
    assert got is None or _same(got, _client(text)), text


def test_the_tidy_table_is_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.records import prometheus

    entries = read_manifest(REPO / "raw" / "MANIFEST.tsv")
    scrapes = [p for p in entries if p.endswith(".prom") or "metrics" in Path(p).name][:40]
    fast = [Snapshot.read(REPO / p).samples for p in scrapes]
    monkeypatch.setattr(prometheus, "_plain_families", lambda text: None)
    for p, table in zip(scrapes, fast):
        slow = Snapshot.read(REPO / p).samples
        assert table.equals(slow), p
