"""The old import path of the lab run's readers: they live in kvtier.records.labrun (the
records layer), the block size and KV cache in kvtier.records.geometry. Kept for one release."""

from __future__ import annotations

from ..records.labrun import (LMCACHE_LINE, PASSES, PHASES, RETRIEVED, SCHEDULER, STORED, PassMetrics, block_tokens,
                              gpu_cache_tokens, metrics_by_pass, read_lmcache_log, read_requests, read_run)
from ..records.labrun import COLUMN_TYPES as REQUEST_COLUMNS

__all__ = ["LMCACHE_LINE", "PASSES", "PHASES", "REQUEST_COLUMNS", "RETRIEVED", "SCHEDULER", "STORED", "PassMetrics",
           "block_tokens", "gpu_cache_tokens", "metrics_by_pass", "read_lmcache_log", "read_requests", "read_run"]
