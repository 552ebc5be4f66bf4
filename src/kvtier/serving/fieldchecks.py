"""Checks learned from the field, for a run that has started: they flag a run, never stop it.

Each comes from a failure seen in vLLM and LMCache deployments that the preflight checks
cannot catch, because it shows only once the server holds its pool:
- the native pool's file in /dev/shm can take far more than the configured size: on hybrid
  (attention + Mamba/SWA) models one pool was seen at 1.92 times its size, enough to exhaust
  /dev/shm or host RAM that the preflight found sufficient;
- when the pool cannot take a store, the offloading connector skips it: earlier vLLM releases
  log "Request <id>: cannot store blocks" (reported in field runs by the thousand), 0.29+
  counts it in `vllm:kv_offload_allocation_failure` (0.32 only counts); those blocks will never
  be restored, so a restore-after-eviction result from such a run is not a measure of the tier;
- allocation failures of other kinds (no space in /dev/shm, ENOMEM when pinning, CUDA OOM,
  SIGBUS from an overcommitted /dev/shm) leave the same kind of hole.

The harness is meant to call `shm_growth` once the server is ready (with /dev/shm use read
just before the launch) and `log_failures` / `allocation_failures` after the run, and to record
`summarize(...)` in the run's record; each finding names the file and line it stands on.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import capped_lines
from ..records.prometheus import Snapshot

GiB = 2**30
ALLOCATION_FAILURES = "vllm:kv_offload_allocation_failure_total"
# (kind, pattern) for server-log lines that mean a store or an allocation did not happen
LOG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("store_refused", re.compile(r"cannot store blocks", re.I)),
    ("shm_full", re.compile(r"Insufficient space in \S+ for|No space left on device", re.I)),
    ("allocation_failed", re.compile(r"Cannot allocate memory|Failed to allocate|allocation failed|"
                                     r"OutOfMemoryError|CUDA out of memory|Bus error", re.I)),
)


@dataclass(frozen=True)
class Degraded:
    """A mode in which the server answers but does not measure what the run says: the log line
    that shows it (as the named code writes it), for which tiers and platforms it counts."""

    kind: str
    pattern: re.Pattern[str]
    why: str
    source: str
    tiers: tuple[str, ...]
    platforms: tuple[str, ...] = ("cuda", "cpu")


# Every log line that makes a launched server's run a failed run, with the code that writes it
# (vLLM 0.32.0+cpu and LMCache 0.5.6 as installed in .venv-vllm; tests/test_degraded_modes.py
# reads each message from that code). vLLM 0.32 pins the native pool's shared region with
# cudaHostRegister after allocating it and only warns when that fails: the run would go on and
# measure pageable copies as the native tier's restores.
DEGRADED: tuple[Degraded, ...] = (
    Degraded("pool_pageable", re.compile(r"cudaHostRegister failed \(code=-?\d+\).*may be slower"),
             "the native pool is not pinned (cudaHostRegister failed): restores would be pageable copies",
             "vllm/v1/kv_offload/cpu/host_register.py:55 (host_register)", ("native",), ("cuda",)),
    Degraded("pool_pageable", re.compile(r"the offload region stays pageable"),
             "the native pool is not pinned: restores would be pageable copies",
             "vllm/v1/kv_offload/cpu/gpu_worker.py:222 (pin_mmap_region), host_register.py:26 (_load_cudart)",
             ("native",), ("cuda",)),
    Degraded("pool_pageable", re.compile(r"KV offload transfers will use unpinned host memory"),
             "the platform has no host registration: the native pool is pageable",
             "vllm/v1/kv_offload/cpu/host_register.py:71 (host_register)", ("native",), ("cuda",)),
    Degraded("pool_pageable", re.compile(r"Using 'pin_memory=False'"),
             "vLLM found pinned memory unavailable (WSL): the native pool is pageable",
             "vllm/platforms/interface.py:1181 (is_pin_memory_available)", ("native",), ("cuda",)),
    Degraded("lmcache_cuda_ops_fallback", re.compile(r"stays on the torch baseline"),
             "LMCache's compiled CUDA ops did not load: it serves through its torch fallback, not its kernels",
             "lmcache/v1/platform/devices/cuda/device_ops.py:128 (CudaDeviceOps.ensure_native)", ("lmcache",)),
    Degraded("lmcache_degraded", re.compile(r"No supported \S+ connector found|Skipping post_init|"
                                            r"Failed to initialize LMCacheManager|operate in degraded mode"),
             "LMCache started degraded: it stores and loads nothing and serves as vLLM alone",
             "lmcache/v1/gpu_connector/__init__.py:247, lmcache/v1/manager.py:107 and :189", ("lmcache",)),
)
CONNECTOR_LINE = "Creating v1 connector with name: "  # vllm/distributed/kv_transfer/kv_connector/factory.py:62


def degraded_modes(path: str | Path, tier: str, platform: str, connector: str | None) -> list[Finding]:
    """Every degraded mode a launched server's log shows, each with its file and line: the lines
    of DEGRADED that count for this tier and platform, and a second tier whose connector never
    logged its creation (`connector`: the kv_connector class the command names; the server then
    ran without it)."""
    path = Path(path)
    modes = [d for d in DEGRADED if tier in d.tiers and platform in d.platforms]
    found: list[Finding] = []
    created = False
    for no, line, _ in capped_lines(path, errors="replace"):
        if connector and CONNECTOR_LINE + connector in line:
            created = True
        for d in modes:
            if d.pattern.search(line):
                found.append(Finding(d.kind, f"{d.why}: {line.strip()[:300]}", str(path), no))
                break
    if tier != "none" and connector and not created:
        found.append(Finding("connector_not_loaded", f"the log never says {CONNECTOR_LINE + connector!r}: the {tier} tier's "
                             "connector did not load, so the server ran without its second tier", str(path)))
    return found


def degraded_reason(found: list[Finding]) -> str | None:
    """One failure reason for a run from its degraded modes (None: none)."""
    if not found:
        return None
    return "degraded server: " + "; ".join(summarize(list(found)))


@dataclass(frozen=True)
class Finding:
    """One flagged condition of a run: what, why it matters, and where it shows."""

    kind: str
    message: str
    path: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}: " if self.path and self.line else (f"{self.path}: " if self.path else "")
        return f"{where}{self.kind}: {self.message}"


def shm_used_bytes(shm: str | Path = "/dev/shm") -> int:
    """Bytes in use on the /dev/shm filesystem (what the pool's file adds to once mapped)."""
    return shutil.disk_usage(shm).used


def shm_growth(used_before: int, used_after: int, pool_bytes: int, max_ratio: float = 1.05,
               shm: str = "/dev/shm") -> Finding | None:
    """Compare /dev/shm growth across server start with the configured pool.

    `used_before` is read just before the server starts, `used_after` once it is ready (its
    "Created mmap file" line is logged). Growth above `max_ratio` times the pool is flagged
    with the ratio, so the pool can be resized; growth well below it is normal until the pool
    file is touched, since the file is sparse.
    """
    if pool_bytes <= 0:
        raise ValueError(f"pool size must be positive, not {pool_bytes}")
    grown = used_after - used_before
    ratio = grown / pool_bytes
    if ratio <= max_ratio:
        return None
    return Finding("shm_over_pool",
                   f"{shm} grew by {grown / GiB:.1f} GiB after start, {ratio:.2f} times the configured "
                   f"{pool_bytes / GiB:g} GiB pool (hybrid models can allocate several KV groups per block); "
                   "size /dev/shm and the RAM headroom for the measured footprint", shm)


def log_failures(path: str | Path) -> list[Finding]:
    """Every server-log line that reports a skipped store or a failed allocation, with its line."""
    path = Path(path)
    found: list[Finding] = []
    for no, line, _ in capped_lines(path, errors="replace"):  # lines capped: errors.MAX_LINE
        for kind, pat in LOG_PATTERNS:
            if pat.search(line):
                found.append(Finding(kind, line.strip()[:300], str(path), no))
                break
    return found


def allocation_failures(before: Snapshot | None, after: Snapshot) -> Finding | None:
    """The connector's allocation-failure counter (vLLM 0.29+) between two scrapes."""
    if not after.has(ALLOCATION_FAILURES):
        return None
    n = after.value(ALLOCATION_FAILURES) - (before.total(ALLOCATION_FAILURES) if before is not None else 0.0)
    if n <= 0:
        return None
    return Finding("store_refused", f"{n:.0f} stores refused by the offload pool ({ALLOCATION_FAILURES}); "
                   "blocks that were not stored cannot be restored", after.source)


# The series a measured request needs in every scrape: the prompt tokens by source (GPU hit,
# pool, computed) are how a cold read is verified cold and a restore is seen to come from the pool.
NEEDED_SERIES = ("vllm:prompt_tokens_by_source_total",)


class MetricsUnusable(ValueError):
    """A /metrics answer a measurement cannot rest on: empty, or without a series it needs."""


def usable_metrics(text: str, source: str, needs: tuple[str, ...] = NEEDED_SERIES) -> Snapshot:
    """The scrape, parsed, if a measurement can rest on it; else MetricsUnusable saying why
    (a RawRecordError from the parser, for text that is not Prometheus text, passes through)."""
    if not text.strip():
        raise MetricsUnusable(f"{source}: the /metrics answer is empty: the counters cannot verify the request")
    snap = Snapshot.parse(text, source)
    missing = [n for n in needs if not snap.has(n)]
    if missing:
        raise MetricsUnusable(f"{source}: /metrics lacks {', '.join(missing)}: without it the run cannot verify where a "
                              "request's prompt tokens came from (cold, GPU hit, pool)")
    return snap


def counters_moved(before: Snapshot, after: Snapshot, prompt_tokens: int | None) -> str | None:
    """Why the counters cannot be those of the server that answered (None if they can): over an
    answered request of `prompt_tokens` prompt tokens, the prompt tokens by source did not grow."""
    grew = sum(after.tokens_by_source().values()) - sum(before.tokens_by_source().values())
    if grew <= 0 < (prompt_tokens or 0):
        return (f"the counters did not move over an answered request ({prompt_tokens} prompt tokens, "
                f"vllm:prompt_tokens_by_source_total grew by {grew:.0f}): not the counters of the server that answered "
                "(a proxy, another engine, a cached /metrics)")
    return None


def summarize(findings: list[Finding | None]) -> list[str]:
    """Findings as lines for a run record, one per condition kind and place (a log with
    thousands of refused stores gives its first line and the count)."""
    seen: dict[tuple[str, str | None], tuple[Finding, int]] = {}
    for f in findings:
        if f is None:
            continue
        key = (f.kind, f.path)
        first, n = seen.get(key, (f, 0))
        seen[key] = (first, n + 1)
    return [str(f) + (f" (and {n - 1} more)" if n > 1 else "") for f, n in seen.values()]
