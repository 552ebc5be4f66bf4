"""The vLLM log: stats lines of 0.11-0.33, both KV Transfer key generations, startup facts,
prefixes, year-less timestamps, ANSI colours, restarts. Lines from reference/vllm-telemetry.md."""
from pathlib import Path

import numpy as np
import pytest

from kvtier.errors import RawRecordError
from kvtier.production.logreader import read_server_log

V025 = ("(APIServer pid=5150) INFO 07-14 21:36:42 [loggers.py:273] Engine 000: Avg prompt throughput: 4.0 tokens/s, "
        "Avg generation throughput: 5.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%, "
        "Prefix cache hit rate: 48.4%")
V011 = ("INFO 07-14 21:36:52 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 12.5 tokens/s, Running: 2 reqs, Waiting: 1 reqs, GPU KV cache usage: 7.5%, Prefix cache hit rate: 0.0%")
V029 = ("(APIServer pid=5150) INFO 07-14 21:37:02 [loggers.py:310] Engine 000: Avg prompt throughput: 812.3 tokens/s, "
        "Avg generation throughput: 40.1 tokens/s, Running: 6 reqs, Waiting: 3 reqs, Deferred: 1 reqs, Preemptions: 2, "
        "GPU KV cache usage: 91.0%, Prefix cache hit rate: 85.2%, External prefix cache hit rate: 16.0%")
V033 = ("(APIServer pid=5150) INFO 07-14 21:37:12 [loggers.py:335] Engine 000: Avg prompt throughput: 622.4 tokens/s, "
        "Avg generation throughput: 1.2 tokens/s, Running: 1 reqs, Waiting: 0 reqs, KV fetch: 1 waiting to start, "
        "0 in progress, 2 completed waiting, CPU KV cache usage: 6.3%")
DP = ("(APIServer pid=5150) INFO 07-14 21:37:22 [loggers.py:335] 2 Engines Aggregated: Avg prompt throughput: 1.0 tokens/s, "
      "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, XPU KV cache usage: 1.0%, Prefix cache hit rate: 2.0%")
LEGACY = ("(APIServer pid=5150) INFO 07-14 21:36:42 [metrics.py:103] KV Transfer metrics: GPU_to_CPU_total_bytes=283115520, "
          "GPU_to_CPU_total_time=0.019877, CPU_to_GPU_total_bytes=94371840, CPU_to_GPU_total_time=0.006512")
FLAT = ("(APIServer pid=5150) INFO 07-14 21:36:42 [metrics.py:108] KV Transfer metrics: vllm:kv_offload_lookup_sync_delay_seconds_count=3, "
        "vllm:kv_offload_lookup_sync_delay_seconds_sum=0.00064, vllm:kv_offload_load_bytes=94371840, vllm:kv_offload_load_time=0.006512, "
        "vllm:kv_offload_load_size_count=1, vllm:kv_offload_load_size_sum=94371840, vllm:kv_offload_store_bytes=283115520, "
        "vllm:kv_offload_store_time=0.019877, vllm:kv_offload_store_size_count=3, vllm:kv_offload_store_size_sum=283115520, "
        "vllm:kv_offload_cpu_cache_usage_perc=0.0, vllm:kv_offload_cpu_allocation_size_count=1, vllm:kv_offload_cpu_allocation_size_sum=3, "
        "vllm:kv_offload_cpu_cache_write_usage_perc=0.0, vllm:kv_offload_cpu_cache_read_usage_perc=0.0")
STARTUP = [
    "(APIServer pid=5150) INFO 07-14 21:30:00 [api_utils.py:286] non-default args: {'model': 'm', 'max_model_len': 1000000}",
    "(EngineCore pid=5160) INFO 07-14 21:31:00 [kv_cache_utils.py:2328] GPU KV cache size: 2,113,003 tokens, Maximum concurrency for 1,000,000 tokens per request: 2.11x",
    "(Worker pid=5170) INFO 07-14 21:31:00 [gpu_worker.py:760] Available KV cache memory: 55.9 GiB",
    "(Worker pid=5170) INFO 07-14 21:30:50 [gpu_model_runner.py:5150] Model loading took 76.6 GiB memory and 52.3 seconds",
    "(Worker pid=5170) INFO 07-14 21:31:05 [shared_offload_region.py:143] Created mmap file /dev/shm/vllm_offload_x.mmap (118.08 GB)",
]


def write(tmp_path: Path, lines: list[str], name: str = "server.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_stats_line_variants_of_all_versions(tmp_path):
    log = read_server_log(write(tmp_path, [V025, V011, V029, V033, DP]), 2026)
    st = log.stats
    assert st["prompt_tps"].tolist() == [4.0, 0.0, 812.3, 622.4, 1.0]
    assert st["running"].tolist() == [1, 2, 6, 1, 3]
    assert st["device"].tolist() == ["GPU", "GPU", "GPU", "CPU", "XPU"]
    assert st["deferred"].iloc[2] == 1 and st["preemptions"].iloc[2] == 2 and st["external_hit_pct"].iloc[2] == 16.0
    assert np.isnan(st["prefix_hit_pct"].iloc[3])  # 0.33 omits it before the first request
    assert st["pid"].iloc[0] == 5150 and np.isnan(st["pid"].astype(float).iloc[1])  # 0.11 without a prefix
    assert str(st["time"].iloc[0]) == "2026-07-14 21:36:42"


def test_transfer_lines_both_key_generations(tmp_path):
    legacy = read_server_log(write(tmp_path, [V025, LEGACY], "a.log"), 2026)
    flat = read_server_log(write(tmp_path, [V025, FLAT], "b.log"), 2026)
    assert legacy.key_generation == "legacy" and flat.key_generation == "flat"
    for log in (legacy, flat):
        x = log.transfers.iloc[0]
        assert (x["load_bytes"], x["store_bytes"]) == (94371840, 283115520)
        assert x["load_time"] == pytest.approx(0.006512) and x["stats_line"] == 1
    assert flat.transfers["load_count"].iloc[0] == 1 and np.isnan(legacy.transfers["load_count"].iloc[0])
    assert flat.transfers["lookup_count"].iloc[0] == 3


def test_startup_facts(tmp_path):
    log = read_server_log(write(tmp_path, STARTUP + [V025]), 2026)
    f = log.facts()
    assert f["kv_cache_tokens"] == 2_113_003 and f["kv_cache_gib"] == 55.9 and f["model_gib"] == 76.6
    assert f["mmap_gb"] == 118.08 and f["args"]["max_model_len"] == 1_000_000
    assert len(log.segments) == 1


def test_ansi_colours_are_stripped(tmp_path):
    coloured = V025.replace("INFO", "\x1b[32mINFO\x1b[0m").replace("Engine 000", "\x1b[1mEngine 000\x1b[0m")
    log = read_server_log(write(tmp_path, [coloured]), 2026)
    assert log.stats["prompt_tps"].tolist() == [4.0]


def test_year_comes_from_metadata_and_rolls_over(tmp_path):
    dec = V025.replace("07-14 21:36:42", "12-31 23:59:55")
    jan = V025.replace("07-14 21:36:42", "01-01 00:00:05")
    t = read_server_log(write(tmp_path, [dec, jan]), 2025).stats["time"]
    assert [str(x) for x in t] == ["2025-12-31 23:59:55", "2026-01-01 00:00:05"]


def test_restart_opens_a_new_segment(tmp_path):
    log = read_server_log(write(tmp_path, STARTUP[:1] + [V025] + STARTUP[:1] + [V029]), 2026)
    assert len(log.segments) == 2
    assert log.stats["segment"].tolist() == [0, 1]


def test_unrelated_lines_are_skipped_and_lines_counted(tmp_path):
    noise = '(APIServer pid=5150) INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    log = read_server_log(write(tmp_path, [noise, noise, V025, noise, FLAT]), 2026)
    assert log.stats["line"].tolist() == [3] and log.transfers["line"].tolist() == [5]


def test_truncated_stats_line_names_the_line(tmp_path):
    p = write(tmp_path, [V025, V029[:120]])
    with pytest.raises(RawRecordError, match=r"server.log:2: stats line in no known vLLM format"):
        read_server_log(p, 2026)


REPLICA_LOG = Path(__file__).resolve().parent.parent / "raw/production/C/server.log"


def test_chunked_and_parallel_parsing_agree_with_one_pass(monkeypatch, tmp_path):
    one = read_server_log(REPLICA_LOG, 2026, workers=1)
    import kvtier.records.serverlog_read as R  # the module that reads CHUNK (production.logreader is its old path)
    monkeypatch.setattr(R, "CHUNK", 1 << 20)        # ~5 ranges
    monkeypatch.setattr(R, "PARALLEL_FROM", 0)      # and a process pool even for this small file
    many = read_server_log(REPLICA_LOG, 2026, workers=2)
    for a, b in ((one.stats, many.stats), (one.transfers, many.transfers)):
        assert a.equals(b)
    assert [s.first_line for s in one.segments] == [s.first_line for s in many.segments]
    # an error deep in the file still names the file's line, not the chunk's
    lines = REPLICA_LOG.read_text().splitlines()
    k = next(i for i in range(15_000, len(lines)) if "] Engine 000:" in lines[i])
    lines[k] = lines[k][:150]
    bad = tmp_path / "server.log"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=rf"server.log:{k + 1}: stats line in no known vLLM format"):
        read_server_log(bad, 2026, workers=2)


def test_layout_path_agrees_with_the_regex_path(monkeypatch, tmp_path):
    """Stats lines are matched once per digit layout; forcing the per-line regex gives the same table."""
    odd = [V029.replace("812.3", "-0.0").replace("85.2%", "nan%"), V033.replace("pid=5150", "pid=7"), DP,
           V011.replace("12.5", "123456789012.25"), V025.replace("21:36:42", "21:36:42.123")]
    p = write(tmp_path, [V025, V011, V029, V033] + odd)
    fast, replica = read_server_log(p, 2026).stats, read_server_log(REPLICA_LOG, 2026)
    import kvtier.records.serverlog_parse as V  # the module that reads MAX_LAYOUTS
    monkeypatch.setattr(V, "MAX_LAYOUTS", 0)
    slow, again = read_server_log(p, 2026).stats, read_server_log(REPLICA_LOG, 2026)
    assert fast.equals(slow) and replica.stats.equals(again.stats) and replica.transfers.equals(again.transfers)
    assert fast["prompt_tps"].iloc[4] == 0.0 and np.signbit(fast["prompt_tps"].iloc[4])
    assert np.isnan(fast["prefix_hit_pct"].iloc[4]) and fast["gen_tps"].iloc[7] == 123456789012.25


def test_fixed_width_numbers_equal_float():
    """Digits -> int64 -> one division by a power of ten rounds like float(text)."""
    from kvtier.production.vllmlog import _fixed_numbers
    rng = np.random.default_rng(7)
    for width, frac in ((1, 0), (4, 1), (6, 1), (9, 3), (15, 7), (16, 2)):
        texts = [("-" if rng.random() < 0.2 else "") + "".join(rng.choice(list("0123456789"), width)) for _ in range(300)]
        texts = [t[: len(t) - frac] + "." + t[len(t) - frac:] if frac else t for t in texts]
        for layout in {t.translate(str.maketrans("123456789", "000000000")) for t in texts}:
            group = [t for t in texts if t.translate(str.maketrans("123456789", "000000000")) == layout]
            field = np.frombuffer("".join(group).encode(), np.uint8).reshape(len(group), -1)
            assert _fixed_numbers(field, layout.encode()).tolist() == [float(t) for t in group]


@pytest.mark.parametrize("value, error", [
    ("1e999", r"server.log:3: vllm:kv_offload_load_bytes is 1e999: reports must be finite"),
    ("NaN", r"server.log:3: vllm:kv_offload_load_bytes is NaN: reports must be finite"),
    ("null", r"server.log:3: vllm:kv_offload_load_bytes: not a number: 'null'"),
    ("true", r"server.log:3: vllm:kv_offload_load_bytes: not a number: 'true'"),
    ("12, vllm:kv_offload_load_bytes=13", r"server.log:3: key 'vllm:kv_offload_load_bytes' appears twice"),
])
def test_transfer_values_json_would_take_are_refused_with_their_line(tmp_path, value, error):
    """The bulk json.loads must not accept what parse_transfer refuses (JSON reads null, NaN, 1e999)."""
    bad = FLAT.replace("vllm:kv_offload_load_bytes=94371840", "vllm:kv_offload_load_bytes=" + value)
    with pytest.raises(RawRecordError, match=error):
        read_server_log(write(tmp_path, [V025, FLAT, bad, FLAT]), 2026)


def test_escaped_key_and_generations_mixed_across_lines(tmp_path):
    escaped = LEGACY.replace("GPU_to_CPU_total_bytes", "GPU_to_CPU_total_byte\\u0073")
    with pytest.raises(RawRecordError, match=r"server.log:2: KV Transfer item 'GPU_to_CPU_total_byte\\\\u0073=.* is neither"):
        read_server_log(write(tmp_path, [V025, escaped]), 2026)
    with pytest.raises(RawRecordError, match=r"server.log:4: KV Transfer reports mix key generations"):
        read_server_log(write(tmp_path, [V025, FLAT, V029, LEGACY]), 2026)


def test_impossible_dates_and_non_ascii_digits_name_the_line(tmp_path):
    feb30 = V029.replace("07-14 21:37:02", "02-30 21:37:02")
    with pytest.raises(RawRecordError, match=r"server.log:2: bad timestamp '02-30 21:37:02'"):
        read_server_log(write(tmp_path, [V025, feb30]), 2026)
    arabic = V029.replace("Running: 6 reqs", "Running: \u0666 reqs")
    with pytest.raises(RawRecordError, match=r"server.log:2: stats line in no known vLLM format"):
        read_server_log(write(tmp_path, [V025, arabic]), 2026)


@pytest.mark.parametrize("prefix", ["(APIServer pid=5150) INFO 07-14 21:36:42 [metrics.py:108] x",
                                    "(APIServer pid=5150 INFO 07-14 21:36:42 [metrics.py:108",
                                    "INFO 7-14 21:36:42 [metrics.py:108"])
def test_transfer_line_with_a_bad_prefix_names_the_line(tmp_path, prefix):
    """Transfer prefixes are checked once per digit layout; a bad one is still found and named."""
    bad = prefix + LEGACY[LEGACY.index("] KV Transfer metrics: "):]
    with pytest.raises(RawRecordError, match=r"server.log:3: KV Transfer line without the vLLM prefix"):
        read_server_log(write(tmp_path, [V025, LEGACY, bad]), 2026)


def test_bulk_transfer_reading_equals_parse_transfer_bit_for_bit():
    """The CSV bulk read of the bodies against the reference reading (parse_transfer: float(text)),
    on every report of the replica and on random float reprs, exponents and long mantissas included."""
    from kvtier.production.vllmlog import XFER_MARKER, _transfer_bulk, _transfer_by_line
    text = REPLICA_LOG.read_bytes()
    bodies = [line.split(XFER_MARKER, 1)[1] for line in text.splitlines() if XFER_MARKER in line]
    rng = np.random.default_rng(12)
    floats = [repr(float(x)) for x in rng.random(2000) * 10.0 ** rng.integers(-12, 13, 2000)]
    bodies += [f"vllm:kv_offload_load_time={v}, vllm:kv_offload_load_bytes={rng.integers(0, 2**62)}".encode() for v in floats]
    fast, gens = _transfer_bulk(bodies)
    slow, gens_slow = _transfer_by_line(bodies, np.arange(1, len(bodies) + 1), "x")
    assert gens == gens_slow == {"flat"} and set(fast) == set(slow)
    for col in slow:
        assert np.array_equal(fast[col], slow[col], equal_nan=True), col
