"""The store-bytes counters come in whole chunks of the pool (records.geometry.check_whole_chunks).

vLLM's offloading scheduler stores a full-attention model's KV chunk by chunk, each chunk all
its blocks_per_chunk server blocks, and the worker counts the bytes of the blocks it copied; so
every store-bytes counter is a whole number of chunks. Every pinned record with the counters
passes; an edited copy with a fraction of a chunk is refused, naming the scrape and the line (and
where the chunk's size is stated). Loads are not checked: a load that begins inside a chunk
copies only the rest of it (most pinned eviction loads are 4.96 chunks).
"""

from __future__ import annotations

import re
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.records import replayrun
from kvtier.records.geometry import check_whole_chunks
from kvtier.records.prometheus import read_prometheus
from kvtier.records.serverlog_facts import LogFacts, read_log_facts
from kvtier.records.touch import quiet

REPO = Path(__file__).resolve().parents[1]
CURVE_RUN = REPO / "raw" / "production" / "cpu-curve" / "r1-pool-0.03125"  # no job lines: only the counters state the bytes
GPU_RUN = REPO / "raw" / "eviction" / "A" / "2026-10-13T15-30-10Z"  # vLLM 0.33+: the pool in kv_offload_config_info
STORE = re.compile(r"kv_offload_store_bytes_total\{|kv_offload_total_bytes_total\{[^}]*GPU_to_CPU")


def line_of(path: Path, needle: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if needle in l)


@lru_cache(maxsize=None)
def _facts(log: Path | None) -> LogFacts:
    return read_log_facts(log) if log is not None else LogFacts(Path("server.log"), None, None, None, [])


def _server_log(snap: Path) -> Path | None:
    """The server log of the run a snapshot belongs to (its folder or one above: metrics/, requests/)."""
    return next((d / "server.log" for d in list(snap.parents)[:3] if (d / "server.log").is_file()), None)


def test_every_pinned_store_counter_is_whole_chunks() -> None:
    """All pinned scrapes with store counters (replay runs, eviction runs on the CPU build and on
    GPUs, the CPU lab, the production capture): each counter a whole number of chunks."""
    snaps = sorted(p for p in (REPO / "raw").rglob("*.prom") if STORE.search(p.read_text(errors="replace")))
    kinds = {p.relative_to(REPO / "raw").parts[:2] for p in snaps}
    assert {("production", "cpu-curve"), ("production", "cpu-sweep"), ("production", "cpu"), ("production", "C"),
            ("eviction", "cpu"), ("eviction", "longctx"), ("eviction", "A"), ("eviction", "C"), ("lab", "cyclic-cpu")} <= kinds
    with quiet():
        for p in snaps:
            check_whole_chunks(_facts(_server_log(p)), [read_prometheus(p)])


def test_store_bytes_in_part_chunks_are_refused_where_no_job_line_counts_them(tmp_path: Path) -> None:
    """A curve run logs no job lines, so before this check nothing else stated the stored bytes:
    half a chunk (12.5 server blocks) more in both store counters read through."""
    d = tmp_path / CURVE_RUN.name
    shutil.copytree(CURVE_RUN, d)
    replayrun.read(d)  # the copy reads
    prom = d / "metrics.prom"
    text = prom.read_text()
    assert text.count(" 1.736704e+08\n") == 4  # the flat and the legacy counter, and each one's size histogram sum
    prom.write_text(text.replace(" 1.736704e+08\n", " 175308800.0\n"))
    with pytest.raises(RawRecordError, match=r"vllm:kv_offload_store_bytes_total is 175,308,800 bytes, 53\.50 chunks of "
                                             r"3,276,800 bytes \(.*server\.log:\d+\): vLLM stores whole chunks "
                                             r"\(25 server blocks each\)") as e:
        replayrun.read(d)
    assert e.value.path == str(prom) and e.value.line == line_of(prom, "vllm:kv_offload_store_bytes_total{")


def test_the_chunk_of_kv_offload_config_info_is_used_without_a_worker_line(tmp_path: Path) -> None:
    """vLLM 0.33+ (the GPU runs) states the pool in the scrape: its chunk is the unit there."""
    src = GPU_RUN / "metrics" / "000_cold_after.prom"
    prom = tmp_path / src.name
    text = src.read_text()
    old = 'vllm:kv_offload_store_bytes_total{engine="0",model_name="small-moe"} 6.3963136e+09\n'
    assert text.count(old) == 1
    prom.write_text(text.replace(old, old.replace("6.3963136e+09", "6422528000.0")))  # half a chunk (50 server blocks) more
    facts = LogFacts(GPU_RUN / "server.log", None, None, None, [])
    check_whole_chunks(facts, [read_prometheus(src)])
    with pytest.raises(RawRecordError, match=r"vllm:kv_offload_store_bytes_total is 6,422,528,000 bytes, 122\.50 chunks of "
                                             r"52,428,800 bytes \(.*000_cold_after\.prom:\d+\).*\(100 server blocks each\)") as e:
        check_whole_chunks(facts, [read_prometheus(prom)])
    assert e.value.path == str(prom)
    assert e.value.line == next(i for i, l in enumerate(prom.read_text().splitlines(), 1) if "6422528000.0" in l)


def test_parts_of_chunks_are_accepted_where_vllm_stores_them(tmp_path: Path) -> None:
    """Issue 33: for a model with sliding-window or Mamba layers the offloading scheduler stores only
    the blocks those groups kept (vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py,
    _build_store_jobs: a block id of 0 is skipped), so its counters hold parts of chunks. run.yaml's
    server.model_geometry (written by the launcher from config.json) says which; without it, or for a
    full-attention model, half a chunk is still refused."""
    from kvtier.records.geometry import check_geometry, stores_whole_chunks
    from kvtier.yamlio import load_yaml

    src = GPU_RUN / "metrics" / "000_cold_after.prom"
    prom = tmp_path / src.name
    old = 'vllm:kv_offload_store_bytes_total{engine="0",model_name="small-moe"} 6.3963136e+09\n'
    prom.write_text(src.read_text().replace(old, old.replace("6.3963136e+09", "6422528000.0")))
    server = dict(load_yaml((GPU_RUN / "run.yaml").read_text())["server"])
    facts = read_log_facts(GPU_RUN / "server.log")
    with quiet():
        check_geometry(GPU_RUN / "run.yaml", server, facts, [read_prometheus(src)])  # the pinned run reads
        with pytest.raises(RawRecordError, match="vLLM stores whole chunks"):
            check_geometry(GPU_RUN / "run.yaml", server, facts, [read_prometheus(prom)])
        hybrid = {**server, "model_geometry": {"sliding_window_layers": 0, "linear_layers": 48, "stores_whole_chunks": False}}
        check_geometry(GPU_RUN / "run.yaml", hybrid, facts, [read_prometheus(prom)])
        full = {**server, "model_geometry": {"sliding_window_layers": 0, "linear_layers": 0, "stores_whole_chunks": True}}
        with pytest.raises(RawRecordError, match="vLLM stores whole chunks"):
            check_geometry(GPU_RUN / "run.yaml", full, facts, [read_prometheus(prom)])
    assert stores_whole_chunks({}) and not stores_whole_chunks(hybrid) and stores_whole_chunks(full)
