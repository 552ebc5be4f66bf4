"""Ingest cross-checks (issue 12, items 6-8): the log against the counters, units against physics,
histogram and log edge cases. Each input here went through silently before (or raised a bare
KeyError) and moved a printed number; now it stops with the file and the line. Expected lines
are found in the input text by the test itself, not taken from the parser."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kvtier.errors import RawRecordError
from kvtier.production import analysis as A
from kvtier.production import contract
from kvtier.production.logsummary import summarize_server_log
from kvtier.production.pipeline import ingest
from kvtier.production.plausible import check_plausible
from kvtier.production.promtext import parse_prometheus
from test_production_contract import M, log_file, snapshot_text, stats

REPO = Path(__file__).resolve().parent.parent
RAW = REPO / "raw/production/C"
SETTINGS = {k: v for k, v in yaml.safe_load((REPO / "config/config.yaml").read_text())["production"].items()
            if k not in ("metrics", "log", "host", "headroom", "coldreads")}
XFER = "(APIServer pid=1) INFO 10-05 08:00:{s:02d} [metrics.py:108] KV Transfer metrics: " \
       "vllm:kv_offload_load_bytes={b}, vllm:kv_offload_load_time=0.1, vllm:kv_offload_load_size_count={c}"


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    for name in ("metrics.prom", "server.log", "host.yaml"):
        shutil.copy(RAW / name, tmp_path / name)
    return tmp_path


def run_ingest(folder: Path) -> None:
    ingest(folder / "metrics.prom", folder / "server.log", folder / "host.yaml", SETTINGS)


def first_line_with(lines: list[str], text: str, start: int = 0) -> int:
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def test_the_replica_passes_every_cross_check(copy: Path) -> None:
    run_ingest(copy)


# ------------------------------------------------------------------ item 6: the log against the counters

def test_a_log_concatenated_with_itself_stops_at_the_second_copy(copy: Path) -> None:
    """Before: '1,018 of 517 restores', '-501 restores have no size', 199% of the bytes loaded."""
    text = (copy / "server.log").read_text()
    (copy / "server.log").write_text(text + text)
    lines = text.splitlines()
    second = len(lines) + first_line_with(lines, "] Engine 000:")
    with pytest.raises(RawRecordError, match=rf"server.log:{second}: a server run .* before the previous run's last report"):
        run_ingest(copy)


def test_a_duplicated_kv_transfer_line_is_refused(copy: Path) -> None:
    """Before: two phantom restores."""
    lines = (copy / "server.log").read_text().splitlines()
    k = first_line_with(lines, "vllm:kv_offload_load_size_count=")
    lines.insert(k, lines[k - 1])
    (copy / "server.log").write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=rf"server.log:{k + 1}: a second KV Transfer report .* \(the first is line {k}\)"):
        run_ingest(copy)


def test_reports_adding_up_to_more_than_the_counters_are_refused(tmp_path: Path) -> None:
    # counters: 1 load of 500 B; the log reports a load of 300 B, then one of 400 B (700 > 500)
    log = log_file(tmp_path, [stats(0), XFER.format(s=0, b=300, c=1), stats(10), XFER.format(s=10, b=400, c=1)])
    text = snapshot_text(load_c=f"vllm:kv_offload_load_size_count{{{M}}} 2.0")
    at = first_line_with(text.splitlines(), "vllm:kv_offload_load_bytes_total")
    snap = parse_prometheus(text, "m.prom")
    with pytest.raises(RawRecordError, match=rf"server.log:4: the KV Transfer reports up to this line add up to 700 "
                                             rf"load_bytes, more than the counter vllm:kv_offload_load_bytes_total \(500, line {at} "):
        summarize_server_log(log, 2026, limits=contract.counter_limits(snap))
    snap = parse_prometheus(snapshot_text(load_b=f"vllm:kv_offload_load_bytes_total{{{M}}} 700.0"), "m.prom")
    with pytest.raises(RawRecordError, match=r"server.log:4: .* add up to 2 load_count, more than the counter "
                                             r"vllm:kv_offload_load_size_count \(1,"):
        summarize_server_log(log, 2026, limits=contract.counter_limits(snap))


# ------------------------------------------------------------------ item 7: units against physical limits

def replace_value(text: str, name: str, scale: float, whole: bool = False) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            head, value = line.rsplit(" ", 1)
            v = float(value) * scale
            line = f"{head} {round(v) if whole else v!r}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_load_bytes_in_whole_gb_and_load_time_in_ms_are_refused(copy: Path) -> None:
    """Before: 51 B/s and 50.9 MB/s, both printed."""
    text = (RAW / "metrics.prom").read_text()
    geo = A.PoolGeometry(block_tokens=1600, bytes_per_block=43_939_737, blocks=2688, server_block_tokens=1600)
    gb = parse_prometheus(replace_value(text, "vllm:kv_offload_load_bytes_total", 1e-9, whole=True), "metrics.prom")
    with pytest.raises(RawRecordError, match=r"metrics.prom:\d+: loads ran at 5\d B/s .* outside \[1,000,000,000, 63,000,000,000\]"):
        check_plausible(gb, geo, 1e9, 63e9)
    (copy / "metrics.prom").write_text(replace_value(text, "vllm:kv_offload_load_time_total", 1e3))
    with pytest.raises(RawRecordError, match=r"metrics.prom:\d+: loads ran at 5\d,\d{3},\d{3} B/s"):
        run_ingest(copy)


def test_the_deprecated_time_counter_must_agree_with_the_flat_one(copy: Path) -> None:
    """vLLM 0.25-0.33 export store time twice; a store time twice too large still gives a
    plausible 26 GB/s, but the two counters of the same stores then disagree."""
    lines = (RAW / "metrics.prom").read_text().splitlines()
    legacy = 'vllm:kv_offload_total_time_total{engine="0",model_name="production-moe-int4",transfer_type="GPU_to_CPU"}'
    k = first_line_with(lines, legacy)
    flat = first_line_with(lines, "vllm:kv_offload_store_time_total{")
    head, value = lines[flat - 1].rsplit(" ", 1)
    lines[flat - 1] = f"{head} {float(value) * 2!r}"
    (copy / "metrics.prom").write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=rf"metrics.prom:{flat}: vllm:kv_offload_store_time_total = 244 but the deprecated "
                                             rf"vllm:kv_offload_total_time_total\{{transfer_type=\"GPU_to_CPU\"\}} = 122 \(line {k}\)"):
        run_ingest(copy)


def test_fewer_bytes_than_one_block_per_operation_is_refused() -> None:
    snap = parse_prometheus(snapshot_text(), "m.prom")  # 500 B over 1 load, 900 B over 3 stores
    geo = A.PoolGeometry(block_tokens=10, bytes_per_block=400, blocks=4, server_block_tokens=10)
    with pytest.raises(RawRecordError, match=r"m.prom:\d+: vllm:kv_offload_store_bytes_total = 900 B over 3 stores is less than one"):
        check_plausible(snap, geo, 1.0, 1e12)


# ------------------------------------------------------------------ item 8: histograms and log edge cases

def test_the_same_bucket_edge_in_two_spellings_is_refused() -> None:
    """Before: the two buckets were summed, and the share above 200K came out at -0.70."""
    extra = f'vllm:request_prompt_tokens_bucket{{engine="0",le="2e+02",model_name="m"}} 2.0'
    text = snapshot_text()
    lines = text.splitlines()
    k = first_line_with(lines, 'le="200.0"')
    snap = parse_prometheus(text + extra + "\n", "m.prom")
    with pytest.raises(RawRecordError, match=rf"m.prom:{len(lines) + 1}: vllm:request_prompt_tokens: bucket edge le=200 "
                                             rf"appears twice for the same series \(lines {k} and {len(lines) + 1}"):
        contract.check_snapshot(snap)


def test_a_missing_bucket_edge_names_the_file_and_line() -> None:
    """Before: a bare KeyError."""
    snap = parse_prometheus(snapshot_text(), "m.prom")
    with pytest.raises(RawRecordError, match=r"m.prom:\d+: vllm:time_to_first_token_seconds has no bucket edge le=2 "
                                             r"\(its edges: 1, 20, inf\)"):
        A.ttft_shares(snap, 2.0, 20.0)


def test_the_same_counters_under_a_second_engine_label_are_refused(copy: Path) -> None:
    """Before: every counter doubled silently (the by-source sums still add up)."""
    out = []
    for line in (RAW / "metrics.prom").read_text().splitlines():
        out.append(line)
        if not line.startswith("#") and 'engine="0"' in line:
            out.append(line.replace('engine="0"', 'engine="1"'))
    (copy / "metrics.prom").write_text("\n".join(out) + "\n")
    first = first_line_with(out, 'engine="1"')
    with pytest.raises(RawRecordError, match=rf"metrics.prom:{first}: counters under engine=\"1\", but the stats lines "
                                             r".* come from engine\(s\) \['0'\] only"):
        run_ingest(copy)


def test_a_log_cut_inside_a_number_is_refused(copy: Path) -> None:
    """Before: the cut number was read as a smaller one."""
    text = (copy / "server.log").read_text()
    cut = text.rstrip("\n")[:-3]  # the last line loses its last three characters and its newline
    (copy / "server.log").write_text(cut)
    n = len(text.splitlines())
    with pytest.raises(RawRecordError, match=rf"server.log:{n}: the log ends inside a line \(no final newline\)"):
        run_ingest(copy)


V0 = ("INFO 05-25 06:50:{s:02d} [metrics.py:486] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
      "15.5 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.1%.")


def test_v0_engine_stats_lines_are_named_as_such(tmp_path: Path) -> None:
    """Before: 'no ten-second stats lines: was the server started with --disable-log-stats?'.
    The line format is vLLM's V0 engine (vllm/engine/metrics.py), as quoted in vllm-project/vllm#18674."""
    log = log_file(tmp_path, ["(APIServer pid=1) INFO 05-25 06:50:00 [api_server.py:1] starting", V0.format(s=29), V0.format(s=34)])
    with pytest.raises(RawRecordError, match=r"server.log:2: a stats line of vLLM's V0 engine"):
        summarize_server_log(log, 2026)


def test_a_restart_seen_only_as_a_new_pid_is_refused(tmp_path: Path) -> None:
    log = log_file(tmp_path, [stats(0), stats(10), stats(20).replace("pid=1)", "pid=2)")])
    with pytest.raises(RawRecordError, match=r"server.log:3: stats lines change from pid 1 \(line 2\) to pid 2 with no startup block"):
        summarize_server_log(log, 2026)


def test_a_second_startup_block_the_counters_do_not_show_is_refused(copy: Path) -> None:
    """Before: a restart inside the period was summed with the run the counters cover."""
    lines = (copy / "server.log").read_text().splitlines()
    startup = [l for l in lines[:12] if "non-default args" in l or "API server version" in l]
    k = first_line_with(lines, "] Engine 000:", len(lines) // 2)
    lines[k - 1:k - 1] = startup
    (copy / "server.log").write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=rf"server.log:{k}: a second server run starts here"):
        run_ingest(copy)


def test_streaming_in_small_chunks_and_a_pool_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 9: the summary the pipeline streams is the same whatever the chunking."""
    import kvtier.records.serverlog_read as R  # the module that reads CHUNK
    one = summarize_server_log(RAW / "server.log", 2026, workers=1)
    monkeypatch.setattr(R, "CHUNK", 1 << 19)      # ~8 ranges
    monkeypatch.setattr(R, "PARALLEL_FROM", 0)    # and a process pool for this small file
    many = summarize_server_log(RAW / "server.log", 2026, workers=2)
    assert one.loads.equals(many.loads) and one.busy_hours == many.busy_hours and one.engines == many.engines == {"0"}
    assert one.totals == pytest.approx(many.totals, rel=1e-12) and one.repairs == many.repairs
    assert one.tokens_by_hour == pytest.approx(many.tokens_by_hour, rel=1e-12)
    assert (one.n_stats, one.n_transfers, one.max_running, one.first_time, one.last_time) == \
           (many.n_stats, many.n_transfers, many.max_running, many.first_time, many.last_time)


def test_memory_does_not_grow_with_the_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Item 9: the streamed ingest holds one chunk, not the log (before: rows for every report,
    peak memory about 0.8 x the file). Four times the log, about the same peak (traced allocations)."""
    import importlib.util
    import tracemalloc

    import kvtier.records.serverlog_read as R  # the module that reads CHUNK
    spec = importlib.util.spec_from_file_location("bench_logparse", REPO / "benchmarks/bench_logparse.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(R, "CHUNK", 1 << 20)
    peaks = []
    for copies in (2, 8):
        path = tmp_path / f"server-{copies}.log"
        size, year = bench.make_log(path, copies * (RAW / "server.log").stat().st_size / 1e9 - 0.001)
        tracemalloc.start()
        summary = summarize_server_log(path, year, workers=1)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert summary.n_stats == path.read_bytes().count(b"] Engine 000: ")  # every report read
    assert peaks[1] < 1.5 * peaks[0], f"peak {peaks[1] / 1e6:.1f} MB for 4x the log against {peaks[0] / 1e6:.1f} MB"
