"""The copy worker: device (the CPU build's KV cache, in host RAM) <-> the offload pool, with torch.

The CPU build has neither vLLM's `swap_blocks_batch` op nor CUDA streams, so each job is copied
synchronously inside `submit_*` and reported done at the next `get_finished()`. Copies go through
int64 views where every page allows it: the CPU index kernels move one element at a time, so
int8 views cost several times more for the same bytes.
"""

from __future__ import annotations

import time

import torch
from vllm.logger import init_logger
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec,
    CanonicalKVCacheRef,
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion

from .plan import copy_plan

logger = init_logger("vllm.kvtier_cpu_offload")  # under "vllm": vLLM's log handler prints it

FAULTS = (None, "zero_on_load")  # zero_on_load: a deliberately wrong copy, to show the logprob check fails


class TorchCopyWorker(OffloadingWorker):
    """Host layout per KV tensor: (chunks, blocks_per_chunk, page) — vLLM's direct layout."""

    def __init__(self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int, num_chunks: int,
                 region: SharedOffloadRegion | None = None, fault: str | None = None, log_jobs: bool = False):
        if fault not in FAULTS:
            raise ValueError(f"kvtier_fault must be one of {FAULTS}, not {fault!r}")
        for group in kv_caches.group_data_refs:
            for ref in group:
                if ref.mapping is not None and ref.mapping.num_writers != 1:
                    raise NotImplementedError("kvtier's CPU offload worker copies whole pages: one worker per page only")
        self.bpc = blocks_per_chunk
        self.refs: list[list[CanonicalKVCacheRef]] = kv_caches.group_data_refs
        self.region = region
        self.fault = fault
        self.log_jobs = log_jobs
        word = 8 if all(t.page_size_bytes % 8 == 0 for t in kv_caches.tensors) and \
            all(r.page_size_bytes % 8 == 0 for g in self.refs for r in g) else 1
        self.dev: list[torch.Tensor] = []
        self.host: list[torch.Tensor] = []
        for t in kv_caches.tensors:
            page = t.page_size_bytes
            dev = t.tensor.view(torch.int8).view(-1, page)
            if dev.device.type != "cpu":
                raise RuntimeError(f"kvtier's CPU offload worker needs KV caches in host memory, not on {dev.device}")
            rows = region.create_next_worker_view(blocks_per_chunk * page) if region is not None else \
                torch.zeros((num_chunks, blocks_per_chunk * page), dtype=torch.int8)
            host = rows.as_strided((num_chunks, blocks_per_chunk, page), (rows.stride(0), page, 1))
            self.dev.append(dev)
            self.host.append(host)
        self.word = word
        if word == 8:
            try:
                self.dev = [d.view(torch.int64) for d in self.dev]
                self.host = [h.view(torch.int64) for h in self.host]
            except RuntimeError as e:  # an odd stride or offset in the shared region
                logger.warning("kvtier_cpu_offload: int64 views not possible (%s); copying bytes", e)
                self.word = 1
        self._finished: list[TransferResult] = []
        per_device_block = [sum(r.page_size_bytes for r in g) for g in self.refs]
        # One line the harness reads back: vLLM's own page sizes give the bytes of an offloaded block.
        logger.info("kvtier_cpu_offload: bytes_per_offloaded_block=%d bytes_per_device_block=%d blocks_per_chunk=%d "
                    "host_chunks=%d host_pool=%s kv_tensors=%d copy_word=%d fault=%s",
                    per_device_block[0] * blocks_per_chunk if per_device_block else 0,
                    per_device_block[0] if per_device_block else 0, blocks_per_chunk, num_chunks,
                    "shm" if region is not None else "private", len(self.dev), self.word, fault)

    def _copy(self, job_id: int, gpu_spec: LoadStoreSpec, host_spec: LoadStoreSpec, store: bool) -> bool:
        if not isinstance(gpu_spec, GPULoadStoreSpec) or not isinstance(host_spec, BlockIDsLoadStoreSpec):
            raise TypeError(f"unexpected transfer specs {type(gpu_spec).__name__}, {type(host_spec).__name__}")
        t0 = time.perf_counter()
        nbytes = nblocks = 0
        for gp in copy_plan(gpu_spec.block_ids, host_spec.block_ids, gpu_spec.group_sizes, gpu_spec.block_indices, self.bpc):
            ids = torch.from_numpy(gp.device_blocks)
            chunks, slots = torch.from_numpy(gp.host_chunks), torch.from_numpy(gp.chunk_slots)
            nblocks += len(ids)
            for ref in self.refs[gp.group]:
                size = ref.page_size_bytes // self.word   # the un-padded page, as vLLM's handler copies
                dev = self.dev[ref.tensor_idx][:, :size]
                host = self.host[ref.tensor_idx][:, :, :size]
                if store:
                    host[chunks, slots] = dev.index_select(0, ids)
                else:
                    data = host[chunks, slots]
                    if self.fault == "zero_on_load":
                        data.zero_()
                    dev.index_copy_(0, ids, data)
                nbytes += len(ids) * ref.page_size_bytes
        dt = time.perf_counter() - t0
        self._finished.append(TransferResult(job_id=job_id, success=True, transfer_size=nbytes, transfer_time=dt))
        if self.log_jobs:
            logger.info("kvtier_cpu_offload: %s job %d: %d blocks, %d bytes, %.6f s", "store" if store else "load",
                        job_id, nblocks, nbytes, dt)
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        return self._copy(job_id, src_spec, dst_spec, store=True)

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec) -> bool:
        return self._copy(job_id, dst_spec, src_spec, store=False)

    def get_finished(self) -> list[TransferResult]:
        done, self._finished = self._finished, []
        return done

    def wait(self, job_ids: set[int]) -> None:
        return None  # every job finished inside submit_*

    def shutdown(self) -> None:
        self._finished.clear()
        self.dev.clear()
        self.host.clear()
        if self.region is not None:
            self.region.cleanup()
            self.region = None
