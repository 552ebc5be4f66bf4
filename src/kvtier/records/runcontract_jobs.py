"""The run contract's job-line check: each job once, in order, of a possible size, adding up to the counters."""

from __future__ import annotations

import math

from ..errors import RawRecordError
from . import vllm as V
from .prometheus import Snapshot
from .serverlog_facts import LogFacts

JOB_COUNTERS = {"load": (V.LOAD_BYTES, V.LOAD_COUNT), "store": (V.STORE_BYTES, V.STORE_COUNT)}



def check_jobs(log: LogFacts, start: Snapshot | None, end: Snapshot) -> None:
    """Each job once and in order (the worker numbers them as it takes them), of a possible size
    (at least one block, bytes = blocks x the worker's bytes per server block, no more blocks than
    the pool holds, a finite, non-negative time), and per kind (load, store) as many jobs and as
    many bytes as the offload counters grew by over the run."""
    if not log.jobs:
        return
    w = log.worker or {}
    per_dev, capacity = w.get("bytes_per_device_block"), None
    if "host_chunks" in w and "blocks_per_chunk" in w:
        capacity = w["host_chunks"] * w["blocks_per_chunk"]
    seen: dict[int, int] = {}
    last = -1
    for line, kind, job, blocks, nbytes, seconds in log.jobs:
        if job in seen:
            raise RawRecordError(log.path, f"{kind} job {job} logged twice (first on line {seen[job]})", line=line)
        if job < last:
            raise RawRecordError(log.path, f"{kind} job {job} after job {last}: job lines out of order", line=line)
        seen[job], last = line, job
        if blocks <= 0 or (capacity is not None and blocks > capacity):
            raise RawRecordError(log.path, f"{kind} job {job} of {blocks} blocks: impossible (the pool holds "
                                           f"{capacity if capacity is not None else 'an unknown number of'} blocks)", line=line)
        if per_dev is not None and nbytes != blocks * per_dev:
            raise RawRecordError(log.path, f"{kind} job {job}: {nbytes} bytes for {blocks} blocks of {per_dev} bytes "
                                           "(the offload worker's bytes_per_device_block)", line=line)
        if not math.isfinite(seconds) or seconds < 0:
            raise RawRecordError(log.path, f"{kind} job {job} took {seconds} s: impossible", line=line)
    for kind, (bytes_name, count_name) in JOB_COUNTERS.items():
        mine = [j for j in log.jobs if j[1] == kind]
        for name, got in ((bytes_name, float(sum(j[4] for j in mine))), (count_name, float(len(mine)))):
            if not end.has(name):
                continue
            grew = end.value(name) - (start.value(name) if start is not None and start.has(name) else 0.0)
            if got != grew:
                what = "bytes" if name == bytes_name else "jobs"
                raise RawRecordError(log.path, f"the {kind} job lines add up to {got:,.0f} {what}, but {name} grew by "
                                               f"{grew:,.0f} over the run ({end.path}:{end.first_line(name)}): a job line "
                                               "lost, repeated, or from another run", line=mine[-1][0] if mine else None)
