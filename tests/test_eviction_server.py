"""The server launcher: the `vllm serve` command, preflight checks, process-group shutdown."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kvtier.serving import server as srv

GiB = 2**30


def test_native_offload_command():
    spec = srv.ServerSpec(model="/m", served_name="m", tier="native", offload_gib=100, port=8123)
    argv = spec.command()
    cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert cfg["kv_connector"] == "OffloadingConnector" and cfg["kv_role"] == "kv_both"
    # 1,600-token blocks, and 100 GiB = 107,374,182,400 bytes of pool
    assert cfg["kv_connector_extra_config"] == {"block_size": 1600, "cpu_bytes_to_use": 107_374_182_400}
    assert "--enable-prefix-caching" in argv and argv[argv.index("--port") + 1] == "8123"


def test_lmcache_and_no_tier():
    lm = srv.ServerSpec(model="/m", tier="lmcache", offload_gib=5)
    assert json.loads(lm.command()[lm.command().index("--kv-transfer-config") + 1])["kv_connector"] == "LMCacheConnectorV1"
    assert lm.environment()["LMCACHE_LOCAL_CPU"] == "True"
    assert "--kv-transfer-config" not in srv.ServerSpec(model="/m", tier="none").command()




def spec(host, gib):
    return srv.ServerSpec(model="/m", tier="native", offload_gib=gib, vllm_bin=host["bin"], port=1)


def test_preflight_passes_with_headroom(host):
    assert any("free RAM" in line for line in srv.preflight(spec(host, 110)))  # 110 + 8 <= 120


def test_preflight_stops_a_pool_without_headroom(host):
    # the note: a 120 GiB pool left 0.5 GiB of RAM free on the production host
    with pytest.raises(srv.PreflightError, match="free RAM 120.0 GiB is below pool 120 GiB"):
        srv.preflight(spec(host, 120))


def test_preflight_stops_a_pool_larger_than_dev_shm(host):
    # the note: a 120 GiB pool failed to start where /dev/shm held 107 GiB
    host.update(avail=250 * GiB, shm=107 * GiB)
    with pytest.raises(srv.PreflightError, match="107.0 GiB free, less than the 120 GiB pool"):
        srv.preflight(spec(host, 120))


def test_a_memlock_limit_below_the_pool_is_a_warning_not_a_refusal(host):
    """vLLM 0.32+ registers the pool with cudaHostRegister after allocating it and serves unpinned
    where that fails (vllm/v1/kv_offload/cpu/gpu_worker.py, pin_mmap_region): the usual 8 MiB
    default must not stop a host that would work; that log line fails the run instead
    (tests/test_degraded_modes.py)."""
    host["memlock"] = 64 * 2**20
    lines = srv.preflight(spec(host, 10))
    warned = [line for line in lines if isinstance(line, srv.PreflightWarning)]
    assert len(warned) == 1 and "memlock limit 0.062 GiB is below the 10 GiB pool" in warned[0]
    assert "stays pageable" in warned[0] and "fails" in warned[0]
    assert srv.preflight_lines(lines)[-1].startswith("preflight WARNING: memlock")
    host["memlock"] = 11 * GiB
    assert "memlock limit allows the pool" in srv.preflight(spec(host, 10))


def test_the_jobs_memory_limit_is_checked_beside_the_hosts(host):
    """A slurm job with mem_mb 200000 (195.3 GiB, 60 GiB of it in use) on a host with 400 GiB free:
    a 110 GiB pool + 8 GiB headroom does not fit what the job has left."""
    from kvtier.serving.hostmem import JobLimit
    host.update(avail=400 * GiB, job=JobLimit(200000 * 2**20, 60 * GiB, "/sys/fs/cgroup/job_1/memory.max"))
    with pytest.raises(srv.PreflightError, match=r"job's memory limit 195.3 GiB \(/sys/fs/cgroup/job_1/memory.max\) "
                                                 r"leaves 135.3 GiB, below pool 140 GiB"):
        srv.preflight(spec(host, 140))
    assert any(line.startswith("job memory limit 195.3 GiB leaves 135.3 GiB") for line in srv.preflight(spec(host, 110)))


FAKE_SERVE = """#!/bin/bash
# a stand-in for `vllm serve`: a child process like the engine core, then wait
sleep 300 &
echo $! > "{pidfile}"
{exit}
wait
"""


def fake_server(tmp_path: Path, exit_now: bool) -> srv.VllmServer:
    exe = tmp_path / "vllm"
    exe.write_text(FAKE_SERVE.format(pidfile=tmp_path / "child.pid", exit="exit 3" if exit_now else ""))
    exe.chmod(0o755)
    return srv.VllmServer(srv.ServerSpec(model="/m", tier="none", vllm_bin=str(exe), port=1), tmp_path / "server.log")


def test_server_that_dies_at_startup_is_reported(tmp_path):
    s = fake_server(tmp_path, exit_now=True)
    s.start()
    with pytest.raises(srv.ServerDied, match="exited with code 3; see .*server.log"):
        s.wait_healthy(30)
    s.stop()


def test_stop_ends_the_whole_process_group(tmp_path):
    s = fake_server(tmp_path, exit_now=False)
    s.start()
    for _ in range(100):
        if (tmp_path / "child.pid").exists() and (tmp_path / "child.pid").read_text().strip():
            break
        time.sleep(0.05)
    child = int((tmp_path / "child.pid").read_text())
    s.stop(grace_s=5)
    assert s.exit_code() is not None
    time.sleep(0.2)
    status = Path(f"/proc/{child}/status")
    # gone, or a zombie waiting for a PID 1 that does not reap (some containers)
    assert not status.exists() or "State:\tZ" in status.read_text()
