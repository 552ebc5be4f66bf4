"""Each analysis step on small inputs whose answers are worked out by hand in the comments."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvtier.coldread import ColdReadModel
from kvtier.errors import RawRecordError
from kvtier.production import analysis as A
from kvtier.production.promtext import parse_prometheus
from kvtier.production.logreader import read_server_log
from test_production_contract import snapshot_text

NOTE_MODEL = ColdReadModel(np.array([200_000, 500_000, 889_000, 981_000]), np.array([11.8, 31.3, 58.9, 66.0]))
GEO = A.PoolGeometry(block_tokens=1600, bytes_per_block=43_929_600, blocks=2688, server_block_tokens=16)


@pytest.fixture()
def snap():
    return parse_prometheus(snapshot_text(), "m.prom")


def test_token_sources(snap):
    # 1000 prompt tokens: 700 GPU, 100 pool, 200 computed -> misses 300, pool share 1/3
    s = A.token_sources(snap)
    assert (s["share_gpu"], s["share_pool"], s["share_computed"]) == pytest.approx((0.7, 0.1, 0.2))
    assert s["missed"] == 300 and s["pool_share_of_misses"] == pytest.approx(1 / 3)


def test_request_stats(snap):
    # 4 requests, sum 1000 -> mean 250; buckets <=200: 2, <=500: 4 -> above 200: 50 %, above 500: 0 %
    r = A.request_stats(snap, (200, 500))
    assert r == {"requests": 4.0, "mean_prompt": 250.0, "share_above_low": 0.5, "share_above_high": 0.0}


def test_ttft_shares(snap):
    # 3 of 4 within 1 s, all 4 within 20 s
    assert A.ttft_shares(snap, 1.0, 20.0) == {"share_under_fast": 0.75, "share_over_slow": 0.0}


def test_store_stats_against_expected_bytes(snap):
    geo = A.PoolGeometry(block_tokens=10, bytes_per_block=40, blocks=4, server_block_tokens=10)  # 4 B a token
    # stored 900 B; expected (200 computed + 40 generated) * 4 = 960 B -> 6.25 % short
    s = A.store_stats(snap, period_s=100.0, geometry=geo, computed=200, generated=40)
    assert s["expected_bytes"] == 960 and s["deviation_from_expected"] == pytest.approx(0.0625)
    assert s["share_of_period"] == pytest.approx(0.002)


def test_pool_geometry_from_config_info(snap, tmp_path):
    log = read_server_log(_log(tmp_path, []), 2026)
    g = A.pool_geometry(snap, log)  # 400 B, 40 tokens, 4 chunks
    assert (g.block_tokens, g.bytes_per_block, g.blocks, g.bytes_per_token) == (10, 100, 4, 10.0)


def test_note_pool_geometry():
    # 110 GiB / 43,929,600 B a block -> 2,688 blocks, 4,300,800 tokens, 2.04x a 2,113,003-token GPU pool
    assert 110 * 2**30 // GEO.bytes_per_block == GEO.blocks
    assert GEO.tokens == 4_300_800 and GEO.tokens / 2_113_003 == pytest.approx(2.035, abs=1e-3)


STATS = ("(APIServer pid=1) INFO 10-05 {t} [loggers.py:335] Engine 000: Avg prompt throughput: {p} tokens/s, "
         "Avg generation throughput: 1.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%")
XFER = ("(APIServer pid=1) INFO 10-05 {t} [metrics.py:108] KV Transfer metrics: vllm:kv_offload_load_bytes={b}, "
        "vllm:kv_offload_load_time={s}, vllm:kv_offload_load_size_count={k}, vllm:kv_offload_load_size_sum={b}")


def _log(tmp_path: Path, reports: list[tuple[str, float, int, int, float, int]]) -> Path:
    lines = []
    for t, p, r, blocks, secs, k in reports:
        lines.append(STATS.format(t=t, p=p, r=r))
        if k:
            lines.append(XFER.format(t=t, b=blocks * GEO.bytes_per_block, s=secs, k=k))
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_size_restores_even_split_and_correction(tmp_path):
    # 131 blocks moved alone -> 127 served (the eviction test); 30 moved by two loads -> 15 each -> 11 served
    log = read_server_log(_log(tmp_path, [("08:00:00", 1.0, 1, 131, 0.12, 1), ("08:00:10", 1.0, 2, 30, 0.04, 2)]), 2026)
    r = A.size_restores(log, GEO, 4)
    assert r["served_blocks"].tolist() == [127, 11, 11]
    assert r["tokens"].tolist() == [203_200, 17_600, 17_600]
    assert r["shared_by"].tolist() == [1, 2, 2] and r["seconds"].tolist() == pytest.approx([0.12, 0.02, 0.02])
    assert r["bytes"].iloc[0] == 131 * 43_929_600


def test_size_restores_rejects_a_partial_block_and_a_too_small_move(tmp_path):
    path = _log(tmp_path, [("08:00:00", 1.0, 1, 3, 0.01, 1)])
    with pytest.raises(RawRecordError, match="moved 3 blocks, not more than the 4"):
        A.size_restores(read_server_log(path, 2026), GEO, 4)
    text = path.read_text().replace(f"load_bytes={3 * GEO.bytes_per_block}", "load_bytes=1000")
    path.write_text(text)
    with pytest.raises(RawRecordError, match="server.log:2: load bytes 1000 are not a whole number"):
        A.size_restores(read_server_log(path, 2026), GEO, 4)


def test_restore_stats_by_hand():
    r = pd.DataFrame({"tokens": [1600.0, 48_000.0, 160_000.0, 800_000.0], "shared_by": [2, 2, 1, 1],
                      "moved_blocks": [5.0, 34.0, 104.0, 504.0], "bytes": [1.0, 2.0, 3.0, 9.0], "seconds": [0.1, 0.1, 0.2, 0.5]})
    s = A.restore_stats(r, counter_count=5, counter_tokens=1_012_000.0, requests=100, large_tokens=100_000, huge_tokens=500_000)
    assert s["visible"] == 4 and s["share_sharing_interval"] == 0.5 and s["share_of_requests"] == 0.05
    assert s["sized_share_of_counter"] == pytest.approx(1_009_600 / 1_012_000)
    assert s["median_tokens"] == 104_000 and s["n_at_least_large"] == 2 and s["n_above_huge"] == 1
    assert s["token_share_at_least_large"] == pytest.approx(960_000 / 1_009_600)
    assert (s["largest_tokens"], s["largest_bytes"], s["largest_time"], s["min_blocks_moved"]) == (800_000, 9.0, 0.5, 5.0)


def test_coldread_stats_with_the_notes_model():
    # 100K: 100K/200K * 11.8 = 5.9 s (extrapolated); 300K: 11.8 + 100K/300K * 19.5 = 18.3 s (timed range)
    r = pd.DataFrame({"tokens": [100_000.0, 300_000.0]})
    s, out = A.coldread_stats(r, NOTE_MODEL)
    assert out["cold_read_s"].tolist() == pytest.approx([5.9, 18.3])
    assert out["extrapolated"].tolist() == [True, False]
    assert s["total"] == pytest.approx(24.2) and s["share_extrapolated"] == pytest.approx(5.9 / 24.2)
    assert s["largest"] == pytest.approx(18.3)


def test_hour_stats(tmp_path):
    # busy reports in clock hours 08 and 10 (the 0.0 line at 09 is idle) -> 2 hours; 6 restores / 2 = 3 per hour
    reports = [("08:10:00", 5.0, 4, 10, 0.1, 1), ("08:10:10", 5.0, 13, 20, 0.1, 1),
               ("09:00:00", 0.0, 0, 0, 0, 0), ("10:00:00", 5.0, 2, 10, 0.1, 1)]
    path = _log(tmp_path, reports)
    path.write_text(path.read_text().replace("throughput: 0.0 tokens/s, Avg generation throughput: 1.0",
                                             "throughput: 0.0 tokens/s, Avg generation throughput: 0.0"))
    log = read_server_log(path, 2026)
    r = A.size_restores(log, GEO, 4)  # served 6, 16, 6 blocks -> hour 08 holds 22 of 28
    h = A.hour_stats(log, r, counter_count=6, top=1)
    assert h == {"with_traffic": 2.0, "restores_per_traffic_hour": 3.0, "top_count": 1.0,
                 "top_restore_share": pytest.approx(22 / 28), "max_running": 13.0}


def test_headroom(tmp_path):
    p = tmp_path / "headroom.csv"
    p.write_text("host,date,pool_gib,free_ram_gib,shm_total_gib,started,note\n"
                 "C,2026-01-01,120,0.5,,yes,\nC,2026-01-02,110,10,,yes,\nC,2026-01-03,108,12,,yes,\n"
                 "B,2026-01-04,120,,107,no,\nC,2026-01-05,1,,,yes,\n")
    h = A.headroom_stats(A.read_headroom(str(p)), "C")
    gib = 2**30
    assert (h["tight.pool"], h["tight.free"]) == (120 * gib, 0.5 * gib)
    assert (h["ok1.pool"], h["ok1.free"], h["ok2.pool"], h["ok2.free"]) == (108 * gib, 12 * gib, 110 * gib, 10 * gib)
    assert (h["failed_pool"], h["shm_capacity"], h["early_pool"]) == (120 * gib, 107 * gib, 1 * gib)
