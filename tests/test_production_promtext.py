"""Prometheus text parsing: checked against prometheus_client itself and against values read by hand."""
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.errors import RawRecordError
from kvtier.production.promtext import parse_prometheus

# Lines in the shape vLLM serves (reference/vllm-telemetry.md), two engines, labels in any order.
TEXT = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 160000.0
vllm:prompt_tokens_total{model_name="m",engine="1"} 40000.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7959889340248852e+09
vllm:prompt_tokens_created{engine="1",model_name="m"} 1.7959889350248852e+09
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 48000.0
vllm:prompt_tokens_by_source_total{source="local_cache_hit",engine="0",model_name="m"} 64000.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 48000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 23.5
vllm:time_to_first_token_seconds_bucket{le="0.5",engine="1",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 1.5
"""


def test_samples_match_prometheus_client():
    snap = parse_prometheus(TEXT, "t.prom")
    ours = sorted((r.name, r.labels, r.value) for r in snap.samples.itertuples())
    ref = sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                 for f in text_string_to_metric_families(TEXT) for s in f.samples)
    assert ours == ref


def test_counters_sum_over_engines_and_keep_line_numbers():
    snap = parse_prometheus(TEXT, "t.prom")
    assert snap.value("vllm:prompt_tokens_total") == 200000.0
    assert snap.first_line("vllm:prompt_tokens_total") == 3
    by = snap.by_label("vllm:prompt_tokens_by_source_total", "source")
    assert by.to_dict() == {"external_kv_transfer": 48000.0, "local_cache_hit": 64000.0, "local_compute": 48000.0}
    assert snap.created() == pytest.approx(1795988934.0248852)


def test_histogram_aligns_buckets_across_engines():
    h = parse_prometheus(TEXT, "t.prom").histogram("vllm:time_to_first_token_seconds")
    assert list(h.edges) == [0.5, 1.0, math.inf]
    assert list(h.cumulative) == [1.0, 5.0, 6.0]
    assert (h.count, h.sum) == (6.0, 25.0)
    assert h.at(1.0) == 5.0
    with pytest.raises(RawRecordError, match=r"t.prom:\d+: .* no bucket edge le=2"):  # a record error, not a bare KeyError
        h.at(2.0)


def test_malformed_line_names_its_line():
    bad = TEXT.replace('vllm:prompt_tokens_total{model_name="m",engine="1"} 40000.0',
                       'vllm:prompt_tokens_total{model_name="m",engine="1" 40000.0')
    with pytest.raises(RawRecordError, match=r"t.prom:4: not Prometheus text"):
        parse_prometheus(bad, "t.prom")


def test_missing_metric_is_an_error_naming_the_file():
    with pytest.raises(RawRecordError, match=r"t.prom: missing metric vllm:generation_tokens_total"):
        parse_prometheus(TEXT, "t.prom").value("vllm:generation_tokens_total")


def _one_line_at_a_time(text: str) -> list[tuple[str, dict, float, int]]:
    """Each sample line parsed by prometheus_client on its own: its samples and its line number."""
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            out += [(s.name, dict(s.labels), float(s.value), lineno)
                    for fam in text_string_to_metric_families(line + "\n") for s in fam.samples]
    return out


def test_every_scrape_in_raw_keeps_each_sample_on_its_own_line():
    """The whole-text parse takes line numbers from sample order; on every scrape kept in raw/,
    each sample's name, labels, value and line equal those of its line parsed alone."""
    from pathlib import Path

    scrapes = sorted(Path(__file__).resolve().parents[1].glob("raw/**/*.prom"))
    assert len(scrapes) > 200
    for path in scrapes:
        text = path.read_text(encoding="utf-8")
        want = _one_line_at_a_time(text)
        rows = parse_prometheus(text, path).samples.iloc[: len(want)]  # after them: flat copies of legacy names
        got = [(n, dict(ls), v, int(line)) for n, ls, v, line in zip(rows["name"], rows["labels"], rows["value"], rows["line"])]
        assert got == want, path


def test_a_line_out_of_step_is_parsed_alone_and_named():
    """A line the whole-text parse cannot take (here a bad value) is still named by its number."""
    bad = TEXT.replace('vllm:prompt_tokens_total{model_name="m",engine="1"} 40000.0',
                       'vllm:prompt_tokens_total{model_name="m",engine="1"} forty')
    with pytest.raises(RawRecordError, match=r":4: not Prometheus text exposition"):
        parse_prometheus(bad, "x.prom")
