"""The lazy Snapshot against prometheus_client's whole-text parse, on every scrape in raw/."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.errors import RawRecordError
from kvtier.serving.metrics import Snapshot

ROOT = Path(__file__).resolve().parents[1]
SCRAPES = sorted((ROOT / "raw").rglob("*.prom"))


def whole_text(text: str) -> dict[str, list[tuple[dict, float]]]:
    """The reference: prometheus_client parses the whole scrape at once."""
    out: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name].append((dict(s.labels), float(s.value)))
    return dict(out)


def test_there_are_scrapes_to_compare() -> None:
    assert len(SCRAPES) > 100


def test_every_scrape_in_raw_gives_the_whole_text_samples() -> None:
    for path in SCRAPES:
        text = path.read_text(encoding="utf-8")
        ref = whole_text(text)
        snap = Snapshot.parse(text, str(path))
        assert snap.names == set(ref), path
        for name, samples in ref.items():
            assert [(s.labels, s.value) for s in snap._samples(name)] == samples, (path, name)
            assert snap.value(name) == pytest.approx(sum(v for _, v in samples), rel=1e-12, abs=0), (path, name)
        created = [v for n, xs in ref.items() if n.endswith("_created") for _, v in xs]
        assert snap.server_instance() == (f"{min(created):.3f}" if created else "unknown")


def test_text_that_is_not_prometheus_names_its_first_bad_line() -> None:
    with pytest.raises(RawRecordError, match=r"page\.prom:2: not Prometheus text"):
        Snapshot.parse("# HELP x a counter\n<html><body>502 Bad Gateway</body></html>\nx 1\n", "page.prom")


def test_a_bad_value_is_an_error_naming_its_line_when_the_series_is_read() -> None:
    text = "# TYPE a counter\na_total 1.0\n# TYPE b counter\nb_total{x=\"1\"} 2.0\nb_total{x=\"2\"} two\n"
    snap = Snapshot.parse(text, "s.prom")
    assert snap.value("a_total") == 1.0
    with pytest.raises(RawRecordError, match=r"s\.prom:5: not Prometheus text"):
        snap.value("b_total")


def test_label_subsets_and_info_labels() -> None:
    text = ('# TYPE t counter\nt_total{source="gpu",engine="0"} 3\nt_total{source="gpu",engine="1"} 4\n'
            't_total{source="cpu",engine="0"} 5\n# TYPE i gauge\ni{block_size="16",x="a}b"} 1\n')
    snap = Snapshot.parse(text)
    assert snap.value("t_total", source="gpu") == 7.0
    assert snap.value("t_total") == 12.0
    assert snap.total("absent_total") == 0  # total: 0 where absent; value: an error naming the file
    with pytest.raises(RawRecordError, match="missing metric absent_total"):
        snap.value("absent_total")
    assert snap.labels_of("i") == {"block_size": "16", "x": "a}b"}
