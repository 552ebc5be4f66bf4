"""Writers of the records kvtier.records reads: a record written and read back is the record.

The server log (startup lines, ten-second stats, KV-transfer reports, access lines), the offload
worker's startup and job lines, host.yaml, headroom.csv and coldreads.csv.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from kvtier.records import serverlog_write as W
from kvtier.records import workerlog
from kvtier.records.coldreads import TimedRead, coldreads_csv, read_coldreads_record
from kvtier.records.headroom import HeadroomTest, headroom_csv, read_headroom_record
from kvtier.records.host import host_yaml, read_host_record
from kvtier.records.serverlog import read_log_facts, read_server_log, summarize_server_log

T0 = datetime(2026, 10, 5, 8, 0, 0, tzinfo=timezone.utc)
ARGS = {"model": "/models/m", "max_model_len": 32_768, "enable_prefix_caching": True,
        "kv_transfer_config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                               "kv_connector_extra_config": {"block_size": 256, "cpu_bytes_to_use": 1 << 30}}}
WORKER = {"bytes_per_offloaded_block": 3_276_800, "bytes_per_device_block": 131_072, "blocks_per_chunk": 25, "host_chunks": 20}
REPORTS = [W.StatsReport(812.3, 41.0, 2, 0, 35.5, prefix_hit_pct=85.2, external_hit_pct=12.5),
           W.StatsReport(0.0, 12.7, 1, 1, 36.0, prefix_hit_pct=85.4, external_hit_pct=15.8, deferred=1),
           W.StatsReport(301.9, 0.0, 0, 0, 0.0, device="CPU", preemptions=3)]
TRANSFERS = [[("lookup_count", 3), ("lookup_time", 6.25e-05), ("load_bytes", 26_214_400), ("load_time", 0.0081),
              ("load_count", 1), ("load_size_sum", 26_214_400), ("store_bytes", 6_553_600), ("store_time", 0.0015),
              ("store_count", 2), ("store_size_sum", 6_553_600), ("pool_usage", 0.012994)],
             [("lookup_count", 1), ("lookup_time", 1e-05), ("deferred_count", 1), ("deferred_time", 0.2), ("pool_usage", 0.0)],
             [("store_bytes", 131_072), ("store_time", 0.0001), ("store_count", 1), ("pool_usage", 0.000977)]]


def write_log(path: Path) -> Path:
    lines = [W.record_line("APIServer", 11, "INFO", T0, "api_utils.py:347", W.startup_message("version", version="0.33.0")),
             W.record_line("APIServer", 11, "INFO", T0, "api_utils.py:286", W.args_message(ARGS)),
             W.record_line("APIServer", 11, "INFO", T0, "model.py:2152", W.startup_message("max_model_len", max_model_len=32_768)),
             W.record_line("Worker", 13, "INFO", T0, "gpu_model_runner.py:5150",
                           W.startup_message("model_loading", model_gib=1.25, seconds=3.5)),
             W.record_line("Worker", 13, "INFO", T0, "gpu_worker.py:760", W.startup_message("kv_memory", kv_cache_gib=2.5)),
             W.record_line("EngineCore", 12, "INFO", T0, "kv_cache_utils.py:2328",
                           W.startup_message("kv_size", kv_device="GPU", kv_cache_tokens=81_920, max_model_len=32_768,
                                             concurrency=2.5)),
             W.record_line("Worker", 13, "INFO", T0, "shared_offload_region.py:143",
                           W.startup_message("mmap", mmap_path="/dev/shm/x.mmap", mmap_gb=1.07)),
             W.record_line("Worker", 13, "INFO", T0, "worker.py:74", workerlog.startup_message(WORKER))]
    for k, (report, items) in enumerate(zip(REPORTS, TRANSFERS)):
        t = T0 + timedelta(seconds=10 * (k + 1))
        lines.append(W.access_line("APIServer", 11, "10.0.0.1", 40_000 + k))
        lines.append(W.record_line("APIServer", 11, "INFO", t, "loggers.py:335", W.stats_message(report)))
        lines.append(W.record_line("APIServer", 11, "INFO", t, "metrics.py:108", W.transfer_message(items)))
    lines.append(W.record_line("Worker", 13, "INFO", T0 + timedelta(seconds=31), "worker.py:104",
                               workerlog.job_message("load", 0, 200, 200 * 131_072, 0.0041)))
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_a_server_log_written_reads_back_as_written(tmp_path: Path) -> None:
    log = read_server_log(write_log(tmp_path / "server.log"), 2026)
    facts = log.facts()
    assert facts["version"] == "0.33.0" and facts["args"] == ARGS and facts["max_model_len"] == 32_768
    assert (facts["model_gib"], facts["kv_cache_gib"], facts["kv_device"], facts["kv_cache_tokens"]) == (1.25, 2.5, "GPU", 81_920)
    assert (facts["mmap_path"], facts["mmap_gb"]) == ("/dev/shm/x.mmap", 1.07)
    assert {k: v for k, v in facts["offload_worker"].items() if k != "line"} == WORKER
    assert len(log.segments) == 1 and log.key_generation == "flat"
    st = log.stats
    for col, field in (("prompt_tps", "prompt_tps"), ("gen_tps", "gen_tps"), ("running", "running"), ("waiting", "waiting"),
                       ("kv_usage_pct", "kv_usage_pct"), ("prefix_hit_pct", "prefix_hit_pct"),
                       ("external_hit_pct", "external_hit_pct"), ("deferred", "deferred"), ("preemptions", "preemptions")):
        want = [np.nan if getattr(r, field) is None else float(getattr(r, field)) for r in REPORTS]
        assert st[col].tolist() == pytest.approx(want, nan_ok=True), col
    assert st["device"].tolist() == ["GPU", "GPU", "CPU"] and st["pid"].tolist() == [11.0] * 3
    assert [t.to_pydatetime() for t in st["time"]] == [(T0 + timedelta(seconds=10 * k)).replace(tzinfo=None) for k in (1, 2, 3)]
    x = log.transfers
    for row, items in zip(x.to_dict("records"), TRANSFERS):
        written = {k: float(v) for k, v in items if k in x.columns}
        assert {k: row[k] for k in written} == written
        assert all(np.isnan(row[c]) for c in ("load_bytes", "load_time", "load_count", "store_bytes", "store_time",
                                               "store_count", "lookup_count", "lookup_time", "deferred_count",
                                               "deferred_time", "pool_usage") if c not in written)
    assert x["stats_line"].tolist() == st["line"].tolist()


def test_the_written_log_passes_the_data_contract_and_sums_as_written(tmp_path: Path) -> None:
    summary = summarize_server_log(write_log(tmp_path / "server.log"), 2026)
    assert summary.n_stats == 3 and summary.n_transfers == 3 and summary.repairs == [] and summary.engines == {"0"}
    assert summary.totals["load_bytes"] == 26_214_400 and summary.totals["store_count"] == 3


def test_the_workers_lines_read_back_as_written(tmp_path: Path) -> None:
    path = write_log(tmp_path / "server.log")
    line = workerlog.read_worker_line(path)
    assert line is not None and line.fields == WORKER and line.line == 8 and line.pool_blocks == 500
    facts = read_log_facts(path)
    assert facts.args == ARGS and {k: v for k, v in facts.worker.items() if k != "line"} == WORKER
    assert facts.jobs == [(facts.jobs[0][0], "load", 0, 200, 200 * 131_072, 0.0041)]
    jobs = workerlog.read_load_jobs(path)
    assert jobs[["job", "blocks", "bytes", "seconds"]].values.tolist() == [[0, 200, 200 * 131_072, 0.0041]]


def test_host_yaml_reads_back_as_written(tmp_path: Path) -> None:
    data = {"setup": "X", "observation": {"start": T0, "end": T0 + timedelta(hours=26), "log_year": 2026},
            "host": {"gpu": "NVIDIA H200", "vcpus": 16, "ram_gib": 197}, "server": {"vllm_version": "0.33.0", "stats_interval_s": 10}}
    p = tmp_path / "host.yaml"
    p.write_text(host_yaml(data, "a header\nof two lines", {"observation": "a note"}), encoding="utf-8")
    rec = read_host_record(p)
    assert rec.data == data and (rec.start, rec.end) == (T0, T0 + timedelta(hours=26))
    assert rec.log_year == 2026 and rec.interval_s == 10.0
    assert rec.facts() == [("vcpus", 16, "count"), ("ram", 197 * 2.0**30, "B")]


def test_the_committed_host_and_headroom_records_are_what_their_writers_write() -> None:
    from kvtier.replica import production as replica

    raw = Path(__file__).resolve().parent.parent / "raw/production/C"
    assert replica._host_yaml() == (raw / "host.yaml").read_text(encoding="utf-8")
    assert replica._headroom_csv() == (raw / "headroom.csv").read_text(encoding="utf-8")
    assert coldreads_csv(read_coldreads_record(raw / "coldreads.csv").reads) == (raw / "coldreads.csv").read_text(encoding="utf-8")


def test_headroom_reads_back_as_written(tmp_path: Path) -> None:
    tests = [HeadroomTest("C", "2026-09-28", 120.0, 0.5, None, True, "left almost no RAM free"),
             HeadroomTest("B", "2026-09-24", 120.0, None, 107.0, False, "pool larger than /dev/shm"),
             HeadroomTest("C", "2026-09-27", 1.0, None, None, True, "")]
    p = tmp_path / "headroom.csv"
    p.write_text(headroom_csv(tests), encoding="utf-8")
    assert read_headroom_record(p).tests() == tests


def test_cold_reads_read_back_as_written(tmp_path: Path) -> None:
    reads = (TimedRead(200_000, 11.8, date(2026, 10, 3), "C", "a model", "the note, Setup"),
             TimedRead(500_000, 31.25, date(2026, 10, 3), "C", "a model", ""))
    p = tmp_path / "coldreads.csv"
    p.write_text(coldreads_csv(reads), encoding="utf-8")
    assert read_coldreads_record(p).reads == reads
