"""KvtierCPUOffloadingSpec: vLLM's CPUOffloadingSpec with a worker that runs on the CPU build.

Only `get_worker` differs: the scheduler side (CPUOffloadingManager, its LRU policy, chunk sizing)
and the metric definitions are inherited, so /metrics and the log print exactly what the stock
native offload prints. Extra keys in kv_connector_extra_config:
    kvtier_host_pool: "private" (default; a private tensor, what the native worker does off CUDA)
                      or "shm" (vLLM's /dev/shm SharedOffloadRegion, as on CUDA)
    kvtier_fault:     "zero_on_load" makes loads write zeros (tests of the logprob check only)
    kvtier_log_jobs:  true logs one line per transfer job
"""

from __future__ import annotations

from vllm.v1.kv_offload.base import CanonicalKVCaches, OffloadingWorker
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec, _all_workers_barrier

from .worker import TorchCopyWorker

HOST_POOLS = ("private", "shm")


class KvtierCPUOffloadingSpec(CPUOffloadingSpec):
    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if not self._worker:
            pool = self.extra_config.get("kvtier_host_pool", "private")
            if pool not in HOST_POOLS:
                raise ValueError(f"kvtier_host_pool must be one of {HOST_POOLS}, not {pool!r}")
            region = None
            if pool == "shm" and self.num_chunks > 0:
                region = SharedOffloadRegion(engine_id=self.config.engine_id, num_chunks=self.num_chunks,
                                             rank=self.config.parallel.rank, kv_bytes_per_chunk=self.kv_bytes_per_chunk,
                                             cpu_page_size=self.cpu_page_size_per_worker, barrier=_all_workers_barrier)
            self._worker = TorchCopyWorker(  # type: ignore[assignment]
                kv_caches, self.blocks_per_chunk, self.num_chunks, region=region,
                fault=self.extra_config.get("kvtier_fault"), log_jobs=bool(self.extra_config.get("kvtier_log_jobs", False)))
        assert self._worker is not None
        return self._worker
