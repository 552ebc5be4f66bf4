"""The data contract: one test per kind of malformed input, each showing the clear error
(file and line) or the reported repair."""
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.production import contract
from kvtier.production.promtext import parse_prometheus
from kvtier.production.logreader import read_server_log

M = 'engine="0",model_name="m"'


def snapshot_text(**over: str) -> str:
    """A minimal complete vLLM 0.33 snapshot with the offload series (values chosen by hand)."""
    series = {
        "prompt": f"vllm:prompt_tokens_total{{{M}}} 1000.0",
        "created": f"vllm:prompt_tokens_created{{{M}}} 1.7596512e+09",
        "compute": f'vllm:prompt_tokens_by_source_total{{{M},source="local_compute"}} 200.0',
        "hit": f'vllm:prompt_tokens_by_source_total{{{M},source="local_cache_hit"}} 700.0',
        "ext": f'vllm:prompt_tokens_by_source_total{{{M},source="external_kv_transfer"}} 100.0',
        "success": f'vllm:request_success_total{{{M},finished_reason="stop"}} 4.0',
        "gen": f"vllm:generation_tokens_total{{{M}}} 40.0",
        "p_buckets": "\n".join([f'vllm:request_prompt_tokens_bucket{{engine="0",le="{le}",model_name="m"}} {c}'
                                for le, c in (("100.0", "1.0"), ("200.0", "2.0"), ("500.0", "4.0"), ("+Inf", "4.0"))]),
        "p_count": f"vllm:request_prompt_tokens_count{{{M}}} 4.0",
        "p_sum": f"vllm:request_prompt_tokens_sum{{{M}}} 1000.0",
        "t_buckets": "\n".join([f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {c}'
                                for le, c in (("1.0", "3.0"), ("20.0", "4.0"), ("+Inf", "4.0"))]),
        "t_count": f"vllm:time_to_first_token_seconds_count{{{M}}} 4.0",
        "t_sum": f"vllm:time_to_first_token_seconds_sum{{{M}}} 12.0",
        "load_b": f"vllm:kv_offload_load_bytes_total{{{M}}} 500.0",
        "load_t": f"vllm:kv_offload_load_time_total{{{M}}} 0.1",
        "load_c": f"vllm:kv_offload_load_size_count{{{M}}} 1.0",
        "store_b": f"vllm:kv_offload_store_bytes_total{{{M}}} 900.0",
        "store_t": f"vllm:kv_offload_store_time_total{{{M}}} 0.2",
        "store_c": f"vllm:kv_offload_store_size_count{{{M}}} 3.0",
        "sync": f"vllm:kv_offload_lookup_sync_delay_seconds_count{{{M}}} 5.0",
        "async": f"vllm:kv_offload_lookup_async_delay_seconds_count{{{M}}} 0.0",
        "usage": f"vllm:kv_offload_cpu_cache_usage_perc{{{M}}} 0.003",
        "info": f'vllm:kv_offload_config_info{{cpu_kv_cache_size_bytes="400",cpu_kv_cache_size_tokens="40",cpu_num_chunks="4",{M}}} 1.0',
    }
    series.update(over)
    return "\n".join(v for v in series.values() if v) + "\n"


def test_a_complete_snapshot_passes():
    contract.check_snapshot(parse_prometheus(snapshot_text(), "m.prom"))


def test_truncated_line():
    text = snapshot_text(gen=f"vllm:generation_tokens_total{{{M}")
    with pytest.raises(RawRecordError, match=r"m.prom:7: not Prometheus text"):
        parse_prometheus(text, "m.prom")


def test_nan_value():
    snap = parse_prometheus(snapshot_text(gen=f"vllm:generation_tokens_total{{{M}}} NaN"), "m.prom")
    with pytest.raises(RawRecordError, match=r"m.prom:7: vllm:generation_tokens_total is nan"):
        contract.check_snapshot(snap)


def test_missing_metric():
    snap = parse_prometheus(snapshot_text(load_c=""), "m.prom")
    with pytest.raises(RawRecordError, match=r"m.prom: missing metric vllm:kv_offload_load_size_count"):
        contract.check_snapshot(snap)


def test_by_source_must_add_up_to_prompt_tokens():
    snap = parse_prometheus(snapshot_text(ext=f'vllm:prompt_tokens_by_source_total{{{M},source="external_kv_transfer"}} 90.0'), "m.prom")
    with pytest.raises(RawRecordError, match=r"m.prom:1: prompt tokens by source sum to 990, but vllm:prompt_tokens_total is 1000"):
        contract.check_snapshot(snap)


def test_duplicated_sample():
    text = snapshot_text() + f"vllm:generation_tokens_total{{{M}}} 40.0\n"
    with pytest.raises(RawRecordError, match=r"m.prom:29: .* appears twice \(lines 7 and 29\)"):
        contract.check_snapshot(parse_prometheus(text, "m.prom"))


def test_non_monotone_buckets():
    buckets = "\n".join([f'vllm:request_prompt_tokens_bucket{{engine="0",le="{le}",model_name="m"}} {c}'
                         for le, c in (("100.0", "1.0"), ("200.0", "3.0"), ("500.0", "2.0"), ("+Inf", "4.0"))])
    snap = parse_prometheus(snapshot_text(p_buckets=buckets), "m.prom")
    with pytest.raises(RawRecordError, match=r"m.prom:10: vllm:request_prompt_tokens: bucket le=500 holds 2, fewer than le=200"):
        contract.check_snapshot(snap)


def test_inf_bucket_must_equal_count():
    snap = parse_prometheus(snapshot_text(p_count=f"vllm:request_prompt_tokens_count{{{M}}} 5.0"), "m.prom")
    with pytest.raises(RawRecordError, match=r"\+Inf bucket 4 differs from _count 5"):
        contract.check_snapshot(snap)


def test_histogram_sum_outside_its_buckets():
    snap = parse_prometheus(snapshot_text(p_sum=f"vllm:request_prompt_tokens_sum{{{M}}} 5000.0"), "m.prom")
    with pytest.raises(RawRecordError, match=r"_sum 5000 is above what its buckets allow"):
        contract.check_snapshot(snap)


def test_units_a_perc_gauge_is_a_fraction():
    snap = parse_prometheus(snapshot_text(usage=f"vllm:kv_offload_cpu_cache_usage_perc{{{M}}} 30.0"), "m.prom")
    with pytest.raises(RawRecordError, match=r"a \*_perc gauge is a fraction"):
        contract.check_snapshot(snap)


def test_counter_reset_inside_the_period_is_detected():
    snap = parse_prometheus(snapshot_text(), "m.prom")  # counters created 2025-10-05T08:00:00Z
    start = datetime(2025, 10, 5, 6, 0, tzinfo=timezone.utc)
    with pytest.raises(RawRecordError, match=r"m.prom: counters were created at .* \+2.00 h from observation.start.*restarted"):
        contract.check_period(snap, start)
    contract.check_period(snap, datetime(2025, 10, 5, 8, 0, tzinfo=timezone.utc))


def test_counter_reset_is_stitched_across_snapshots():
    vals = [300.0, 1000.0, 50.0, 400.0]  # restart after the second snapshot: 1000 + 400 in all
    snaps = [parse_prometheus(snapshot_text(prompt=f"vllm:prompt_tokens_total{{{M}}} {v}"), f"s{i}.prom") for i, v in enumerate(vals)]
    assert contract.stitch_counters(snaps, "vllm:prompt_tokens_total") == 1400.0


STATS = ("(APIServer pid=1) INFO 10-05 08:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: {p:.1f} tokens/s, "
         "Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%")


def log_file(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "server.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def stats(s: int, p: float = 10.0, m: int = 0) -> str:
    return STATS.format(s=s, p=p).replace("08:00:", f"08:{m:02d}:")


def test_duplicated_log_line(tmp_path):
    log = read_server_log(log_file(tmp_path, [stats(0), stats(10), stats(10), stats(20)]), 2026)
    with pytest.raises(RawRecordError, match=r"server.log:3: report repeated at the same second as line 2"):
        contract.check_log(log)


def test_clock_going_back(tmp_path):
    log = read_server_log(log_file(tmp_path, [stats(0), stats(20), stats(10)]), 2026)
    with pytest.raises(RawRecordError, match=r"server.log:3: clock goes back 10 s from line 2"):
        contract.check_log(log)


def test_reports_closer_than_the_interval(tmp_path):
    log = read_server_log(log_file(tmp_path, [stats(0), stats(3)]), 2026)
    with pytest.raises(RawRecordError, match=r"server.log:2: reports 3 s apart"):
        contract.check_log(log)


def test_silence_after_an_idle_report_is_fine_but_a_gap_in_traffic_is_reported(tmp_path):
    idle = [stats(0), stats(10, p=0.0).replace("generation throughput: 1.0", "generation throughput: 0.0"), stats(40, m=5)]
    assert contract.check_log(read_server_log(log_file(tmp_path, idle), 2026)) == []
    busy = [stats(0), stats(10), stats(40), stats(50)]
    (repair,) = contract.check_log(read_server_log(log_file(tmp_path, busy), 2026))
    assert (repair.first_line, repair.last_line, repair.kind, repair.seconds) == (2, 3, "missing_reports", 20.0)
    assert repair.detail == "2 ten-second reports missing during traffic"


def test_stats_line_of_another_vllm_version(tmp_path):
    future = stats(0).replace("GPU KV cache usage: 3.0%", "GPU KV cache usage: 3.0%, Speculative acceptance: 71.0%")
    with pytest.raises(RawRecordError, match=r"server.log:1: stats line in no known vLLM format"):
        read_server_log(log_file(tmp_path, [future]), 2026)


def test_transfer_line_of_another_generation(tmp_path):
    odd = "(APIServer pid=1) INFO 10-05 08:00:00 [metrics.py:108] KV Transfer metrics: lmcache_bytes=12"
    with pytest.raises(RawRecordError, match=r"server.log:2: KV Transfer item 'lmcache_bytes=12' is neither"):
        read_server_log(log_file(tmp_path, [stats(0), odd]), 2026)


def test_truncated_transfer_line_and_nan(tmp_path):
    cut = "(APIServer pid=1) INFO 10-05 08:00:00 [metrics.py:108] KV Transfer metrics: vllm:kv_offload_load_bytes=12, vllm:kv_offload_lo"
    with pytest.raises(RawRecordError, match=r"server.log:2: KV Transfer item 'vllm:kv_offload_lo' is not key=value"):
        read_server_log(log_file(tmp_path, [stats(0), cut]), 2026)
    nan = "(APIServer pid=1) INFO 10-05 08:00:00 [metrics.py:108] KV Transfer metrics: vllm:kv_offload_load_time=nan"
    with pytest.raises(RawRecordError, match=r"server.log:2: vllm:kv_offload_load_time is nan"):
        read_server_log(log_file(tmp_path, [stats(0), nan]), 2026)
