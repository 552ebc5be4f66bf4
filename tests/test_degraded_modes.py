"""Every degraded mode of a launched server is a failed run with its reason (issue 33, item 4).

Each log line below is the message as vLLM 0.32.0 and LMCache 0.5.6 write it (the source file
and line are quoted beside it, as installed in .venv-vllm); `test_the_real_code_writes_these_lines`
runs that code itself (vLLM's host registration with a CUDA runtime that refuses, LMCache's CUDA
ops without their compiled extension) and checks that the lines it logs are these and are found.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.eviction.records import RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan
from kvtier.serving import server as srv
from kvtier.serving.client import ServingClient
from kvtier.serving.fieldchecks import CONNECTOR_LINE, degraded_modes, degraded_reason

REPO = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm/bin/vllm")).with_name("python")
sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from fake_vllm import FakeVllm  # noqa: E402

# (kind, tier, log line as the server writes it: vLLM's prefix, then the message of the quoted code)
LINES = [
    # vllm/v1/kv_offload/cpu/host_register.py:54-57 (host_register):
    #   logger.warning("cudaHostRegister failed (code=%d) — transfers will still work "
    #                  "but may be slower (unpinned DMA)", result)
    ("pool_pageable", "native", "(EngineCore pid=812) WARNING 12-06 04:10:02 [host_register.py:54] cudaHostRegister failed "
                                "(code=1) — transfers will still work but may be slower (unpinned DMA)"),
    # vllm/v1/kv_offload/cpu/gpu_worker.py:221-226 (pin_mmap_region):
    #   logger.warning("host_register failed for rank=%d at %.2f of %.2f GB; "
    #                  "the offload region stays pageable", rank, offset / 1e9, total_size / 1e9)
    ("pool_pageable", "native", "(EngineCore pid=812) WARNING 12-06 04:10:02 [gpu_worker.py:221] host_register failed for "
                                "rank=0 at 0.00 of 118.11 GB; the offload region stays pageable"),
    # vllm/v1/kv_offload/cpu/host_register.py:25-29 (_load_cudart):
    #   logger.warning("Could not load the CUDA runtime for host registration; "
    #                  "the offload region stays pageable", exc_info=True)
    ("pool_pageable", "native", "WARNING 12-06 04:10:02 [host_register.py:25] Could not load the CUDA runtime for host "
                                "registration; the offload region stays pageable"),
    # vllm/platforms/interface.py:1180-1183 (is_pin_memory_available):
    #   logger.warning("Using 'pin_memory=False' as WSL is detected. This may slow down performance.")
    ("pool_pageable", "native", "WARNING 12-06 04:10:01 [interface.py:1180] Using 'pin_memory=False' as WSL is detected. "
                                "This may slow down performance."),
    # lmcache/v1/platform/devices/cuda/device_ops.py:128-131 (CudaDeviceOps.ensure_native):
    #   logger.warning("lmcache.cuda_ops compiled extension not found; "
    #                  "CudaDeviceOps stays on the torch baseline for all ops.")
    ("lmcache_cuda_ops_fallback", "lmcache",
     "[2026-12-06 04:10:03,350] LMCache WARNING: lmcache.cuda_ops compiled extension not found; CudaDeviceOps stays on "
     "the torch baseline for all ops. (device_ops.py:128:lmcache.v1.platform.devices.cuda.device_ops)"),
    # lmcache/v1/manager.py:107-111 (LMCacheManager.__init__):
    #   logger.error("Failed to initialize LMCacheManager components: %s. "
    #                "System will operate in degraded mode (recompute).", self._init_failed_reason)
    ("lmcache_degraded", "lmcache",
     "[2026-12-06 04:10:03,402] LMCache ERROR: Failed to initialize LMCacheManager components: Traceback (most recent "
     "call last): (manager.py:107:lmcache.v1.manager)"),
    # lmcache/v1/manager.py:189: logger.warning("Skipping post_init due to previous initialization failure")
    ("lmcache_degraded", "lmcache",
     "[2026-12-06 04:10:04,001] LMCache WARNING: Skipping post_init due to previous initialization failure "
     "(manager.py:189:lmcache.v1.manager)"),
]
CREATED = {"native": "OffloadingConnector", "lmcache": "LMCacheConnectorV1"}


def _created(connector: str) -> str:
    # vllm/distributed/kv_transfer/kv_connector/factory.py:62-66 (create_connector):
    #   logger.info("Creating v1 connector with name: %s and engine_id: %s", connector_cls.__name__, ...)
    return f"(EngineCore pid=812) INFO 12-06 04:10:00 [factory.py:62] {CONNECTOR_LINE}{connector} and engine_id: 5f0c\n"


def _log(tmp_path: Path, tier: str, *lines: str, created: bool = True) -> Path:
    log = tmp_path / "server.log"
    head = _created(CREATED[tier]) if created and tier in CREATED else ""
    log.write_text("INFO 12-06 04:09:58 [api_server.py:1] vLLM API server version 0.33.0\n" + head
                   + "".join(line + "\n" for line in lines) + "INFO:     Application startup complete.\n")
    return log


def _spec(tier: str, platform: str = "cuda") -> srv.ServerSpec:
    return srv.ServerSpec(model="/m", tier=tier, offload_gib=1, platform=platform, port=1)


@pytest.mark.parametrize("kind, tier, line", LINES)
def test_each_degraded_line_is_found_with_its_line(tmp_path, kind, tier, line):
    log = _log(tmp_path, tier, line)
    found = degraded_modes(log, tier, "cuda", CREATED[tier])
    assert [(f.kind, f.line) for f in found] == [(kind, 3)]
    assert line.strip()[:60] in found[0].message
    reason = degraded_reason(found)
    assert reason and kind in reason and f"{log}:3" in reason
    assert degraded_modes(_log(tmp_path, tier), tier, "cuda", CREATED[tier]) == []  # the same log without it: clean


@pytest.mark.parametrize("kind, tier, line", LINES)
def test_a_healthy_server_with_a_degraded_log_is_a_failed_start(tmp_path, kind, tier, line):
    log = _log(tmp_path, tier, line)
    with pytest.raises(srv.DegradedStart, match=kind if tier == "native" else "degraded|torch"):
        srv.VllmServer(_spec(tier), log).check_tier()


def test_the_pageable_lines_count_only_where_vllm_pins():
    # vLLM's CPU build pins nothing (kvtier's CPU worker): an unpinned pool is the design there,
    # and a server without a pool has nothing to pin
    for kind, tier, line in LINES[:4]:
        assert not [f for f in _found(line, "native", "cpu")]
        assert not [f for f in _found(line, "none", "cuda")]


def _found(line: str, tier: str, platform: str) -> list:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "server.log"
        log.write_text(line + "\n")
        return degraded_modes(log, tier, platform, None)


def test_a_connector_that_did_not_load_is_a_failed_start(tmp_path):
    log = _log(tmp_path, "native", created=False)
    found = degraded_modes(log, "native", "cuda", "OffloadingConnector")
    assert [f.kind for f in found] == ["connector_not_loaded"]
    with pytest.raises(srv.DegradedStart, match="connector_not_loaded"):
        srv.VllmServer(_spec("native"), log).check_tier()
    # another connector's line is not this one's
    log.write_text(_created("LMCacheConnectorV1"))
    assert [f.kind for f in degraded_modes(log, "native", "cuda", "OffloadingConnector")] == ["connector_not_loaded"]
    srv.VllmServer(_spec("none"), _log(tmp_path, "none")).check_tier()  # no second tier, no connector asked for
    assert _spec("lmcache", "cpu").connector == "KvtierLMCacheCPUConnectorV1"


def test_a_run_whose_server_degraded_is_a_failed_run_with_its_reason(tmp_path):
    """The harness checks the log again at the end: a line logged during the run fails it too."""
    log = _log(tmp_path, "native", LINES[1][2])
    server = srv.VllmServer(_spec("native"), log)
    static = {"host": {"hostname": "test"}, "model": {"path": "fake", "served_name": "fake", "params": None},
              "server": {"mode": "launched", "url": "http://fake", "tier": "native", "offload_block_tokens": 1600},
              "versions": {"python": "3"}}
    client = ServingClient("http://fake", transport=FakeVllm(answer="").transport())
    h = Harness(client, RunWriter(tmp_path / "r"), "test", Plan(target_tokens=200, warmup_tokens=0), static,
                server=server, progress=False)
    with pytest.raises(HarnessFailed, match="stays pageable"):
        h.run()
    meta = read_run(tmp_path / "r").meta
    assert meta["status"] == "failed" and meta["failure"]["phase"] == "finish"
    assert "pool_pageable" in meta["failure"]["reason"] and "stays pageable" in meta["failure"]["reason"]


# ---------------------------------------------------------------- the real code's own lines
GENERATE = r'''
import types
from vllm.v1.kv_offload.cpu import gpu_worker as gw, host_register as hr

class Cuda:  # a CUDA platform whose runtime refuses to register host memory
    device_name = "cuda"
    def is_cuda_alike(self): return True
    def is_xpu(self): return False

class Refuses:
    def cudaHostRegister(self, ptr, n): return 1
    def cudaGetLastError(self): return 0
    def cudaHostUnregister(self, ptr): return 0

def no_runtime():
    raise OSError("libcudart.so: cannot open shared object file")

hr.current_platform, hr.CudaRTLibrary = Cuda(), Refuses
gw.host_register = hr.host_register
base = types.SimpleNamespace(data_ptr=lambda: 4096)
gw.pin_mmap_region(types.SimpleNamespace(rank=0, _base=base, total_size_bytes=2**20, _row_stride=4096,
                                         pinned_addresses=[], is_pinned=False))
hr.CudaRTLibrary = no_runtime
hr.host_register(4096, 4096)
from lmcache.v1.platform.devices.cuda.device_ops import CudaDeviceOps
ops = CudaDeviceOps.__new__(CudaDeviceOps)
ops._native_bound = False
ops.ensure_native()  # no lmcache.cuda_ops on this machine: LMCache's own warning
'''


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM at {VLLM_PY} (.venv-vllm)")
def test_the_real_code_writes_these_lines(tmp_path):
    done = subprocess.run([str(VLLM_PY), "-c", GENERATE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VLLM_LOGGING_LEVEL": "INFO"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    log = tmp_path / "server.log"
    log.write_text(out)
    native = {f.kind for f in degraded_modes(log, "native", "cuda", None)}
    lmcache = {f.kind for f in degraded_modes(log, "lmcache", "cuda", None)}
    assert native == {"pool_pageable"} and lmcache == {"lmcache_cuda_ops_fallback"}
    assert len([f for f in degraded_modes(log, "native", "cuda", None)]) == 3  # register, pin_mmap_region, no runtime
    for message in ("cudaHostRegister failed (code=1) — transfers will still work but may be slower (unpinned DMA)",
                    "host_register failed for rank=0 at 0.00 of 0.00 GB; the offload region stays pageable",
                    "Could not load the CUDA runtime for host registration; the offload region stays pageable",
                    "lmcache.cuda_ops compiled extension not found; CudaDeviceOps stays on the torch baseline for all ops."):
        assert message in out  # the quoted messages above are the code's, word for word
        assert any(message.split(";")[0][:40] in line for _, _, line in LINES)
