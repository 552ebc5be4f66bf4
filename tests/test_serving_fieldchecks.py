"""Field checks of a started run, and the metric names of both vLLM generations.

Log messages come from vLLM's own code where it is installed (.venv-vllm): the /dev/shm
refusal is raised by vLLM's check_shm_free_space itself, not typed here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kvtier.production.promtext import parse_prometheus
from kvtier.serving.fieldchecks import GiB, allocation_failures, log_failures, shm_growth, shm_used_bytes, summarize
from kvtier.serving.metrics import Snapshot

REPO = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm/bin/vllm")).with_name("python")


def test_shm_growth_flags_a_pool_that_takes_more_than_configured() -> None:
    # the field case: a 100 GiB pool whose file took 192 GiB of /dev/shm on a hybrid model
    f = shm_growth(used_before=3 * GiB, used_after=195 * GiB, pool_bytes=100 * GiB)
    assert f is not None and f.kind == "shm_over_pool"
    assert "192.0 GiB" in f.message and "1.92 times" in f.message and "100 GiB" in f.message
    assert shm_growth(3 * GiB, 103 * GiB, 100 * GiB) is None  # exactly the pool
    assert shm_growth(3 * GiB, 4 * GiB, 100 * GiB) is None  # sparse file, not touched yet
    with pytest.raises(ValueError):
        shm_growth(0, 1, 0)


def test_shm_used_bytes_reads_the_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic (issue 23): the filesystem's numbers are one mocked statvfs snapshot, so no other
    writer on /tmp can move them between the call and the check (it once failed a clean CI run)."""
    snap = os.statvfs_result((4096, 4096, 1000, 250, 200, 10, 5, 5, 0, 255))  # bsize frsize blocks bfree bavail ...
    seen: list[str] = []
    monkeypatch.setattr(os, "statvfs", lambda p: seen.append(str(p)) or snap)
    assert shm_used_bytes(tmp_path) == (1000 - 250) * 4096
    assert seen == [str(tmp_path)]


def test_ci_names_every_failed_test() -> None:
    """.ci/run's summary lists failures and errors, not only skips (issue 23)."""
    text = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert re.search(r"pytest -q -rfEs\b", text) and " -rs" not in text


LOG = """INFO 10-13 15:30:12 [core.py:95] Initializing a V1 LLM engine
WARNING 10-13 15:41:02 [offloading_connector.py:412] Request chatcmpl-7f3: cannot store blocks
WARNING 10-13 15:41:02 [offloading_connector.py:412] Request chatcmpl-7f3: cannot store blocks
INFO 10-13 15:41:12 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s
ERROR 10-13 15:42:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
"""


def test_log_failures_name_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    found = log_failures(log)
    assert [(f.kind, f.line) for f in found] == [("store_refused", 2), ("store_refused", 3), ("allocation_failed", 5)]
    lines = summarize(found)
    assert lines[0].startswith(f"{log}:2: store_refused:") and lines[0].endswith("(and 1 more)")
    assert len(lines) == 2


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PY.is_file(), reason=f"no vLLM python at {VLLM_PY}")
def test_log_failures_catch_vllms_own_shm_refusal(tmp_path: Path) -> None:
    code = ("import sys\nfrom vllm.distributed.device_communicators.shm_broadcast import check_shm_free_space\n"
            "try:\n    check_shm_free_space(1 << 62, shm_path=sys.argv[1], allocation_name='CPU KV offload shared region')\n"
            "except RuntimeError as e:\n    print('ERROR 10-13 15:30:20 [core.py:1] RuntimeError:', e)\n")
    out = subprocess.run([str(VLLM_PY), "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert "Insufficient space" in out.stdout, out.stderr[-2000:]
    log = tmp_path / "server.log"
    log.write_text(out.stdout)
    assert [f.kind for f in log_failures(log)] == ["shm_full"]


PROM = """# TYPE vllm:kv_offload_allocation_failure counter
vllm:kv_offload_allocation_failure_total{{engine="0",model_name="m"}} {n}
"""


def test_allocation_failures_between_scrapes() -> None:
    before, after = Snapshot.parse(PROM.format(n="2.0"), "before.prom"), Snapshot.parse(PROM.format(n="9.0"), "after.prom")
    f = allocation_failures(before, after)
    assert f is not None and f.message.startswith("7 stores refused") and f.path == "after.prom"
    assert allocation_failures(after, after) is None
    assert allocation_failures(None, Snapshot.parse("# TYPE x counter\nx_total 1.0\n")) is None


LEGACY = """# HELP vllm:kv_offload_total_bytes Number of bytes offloaded by KV connector
# TYPE vllm:kv_offload_total_bytes counter
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 600.0
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="CPU_to_GPU"} 200.0
# TYPE vllm:kv_offload_total_time counter
vllm:kv_offload_total_time_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 1.5
# TYPE vllm:kv_offload_size histogram
vllm:kv_offload_size_bucket{engine="0",le="1e+06",model_name="m",transfer_type="GPU_to_CPU"} 1.0
vllm:kv_offload_size_bucket{engine="0",le="+Inf",model_name="m",transfer_type="GPU_to_CPU"} 3.0
vllm:kv_offload_size_count{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 3.0
vllm:kv_offload_size_sum{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 600.0
"""
FLAT = """# TYPE vllm:kv_offload_store_bytes counter
vllm:kv_offload_store_bytes_total{engine="0",model_name="m"} 600.0
"""


def test_production_reads_legacy_offload_names_as_the_flat_ones() -> None:
    s = parse_prometheus(LEGACY, "old.prom")
    assert s.value("vllm:kv_offload_store_bytes_total") == 600.0
    assert s.value("vllm:kv_offload_load_bytes_total") == 200.0
    assert s.value("vllm:kv_offload_store_time_total") == 1.5
    h = s.histogram("vllm:kv_offload_store_size")
    assert (h.count, h.sum, h.at(1e6)) == (3.0, 600.0, 1.0)
    assert s.first_line("vllm:kv_offload_store_bytes_total") == 3  # errors still name the record's line


def test_production_does_not_double_count_when_both_generations_are_sent() -> None:
    s = parse_prometheus(LEGACY + FLAT, "both.prom")
    assert s.value("vllm:kv_offload_store_bytes_total") == 600.0
    assert s.value("vllm:kv_offload_load_bytes_total") == 200.0  # no flat load family: from legacy


def test_serving_snapshot_store_names_and_host_source() -> None:
    old = Snapshot.parse(LEGACY)
    assert (old.store_bytes(), old.store_time(), old.load_bytes()) == (600.0, 1.5, 200.0)
    new = Snapshot.parse(FLAT + "# TYPE vllm:kv_offload_total_bytes counter\n"
                         'vllm:kv_offload_total_bytes_total{transfer_type="GPU_to_CPU"} 5.0\n')
    assert new.store_bytes() == 600.0  # the flat name wins where both exist
    by_source = ('# TYPE vllm:prompt_tokens_by_source counter\n'
                 'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} 48.0\n')
    cached = ('# TYPE vllm:prompt_tokens_cached_by_source counter\n'
              'vllm:prompt_tokens_cached_by_source_total{source="device"} 64.0\n'
              'vllm:prompt_tokens_cached_by_source_total{source="host"} 40.0\n')
    assert Snapshot.parse(by_source + cached).pool_tokens() == 48.0
    assert Snapshot.parse(cached).pool_tokens() == 40.0
    assert Snapshot.parse(FLAT).pool_tokens() is None
