"""What kvtier knows about vLLM's telemetry, by version, in one table.

Metric names and their renames, and which series exist from which version. A reader that meets
a new vLLM telemetry format gets its new names here and nowhere else; domains ask the records
(kvtier.records.prometheus) for values by these names.
"""

from __future__ import annotations

# -- /metrics series ------------------------------------------------------------------------------
PROMPT_TOTAL = "vllm:prompt_tokens_total"
GENERATION_TOTAL = "vllm:generation_tokens_total"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
SOURCES = ("local_cache_hit", "external_kv_transfer", "local_compute")
# vLLM 0.33 also splits cached prompt tokens by tier: source="device" (GPU) and "host" (CPU pool)
CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
CACHE_CONFIG_INFO = "vllm:cache_config_info"
OFFLOAD_CONFIG_INFO = "vllm:kv_offload_config_info"  # vLLM 0.33; 0.32 has none (worker startup line instead)

# Offload transfers. vLLM 0.17-0.24 exports them only under legacy names split by
# `transfer_type`; 0.25+ adds flat names (vllm PR #35669) and 0.33 still sends both. The analyses
# read the flat names; a scrape that lacks them gets them from the legacy series (same counts).
LEGACY_OFFLOAD = {"GPU_to_CPU": "store", "CPU_to_GPU": "load"}
LEGACY_FAMILIES = {"vllm:kv_offload_total_bytes": "bytes", "vllm:kv_offload_total_time": "time",
                   "vllm:kv_offload_size": "size"}
LOAD_BYTES = "vllm:kv_offload_load_bytes_total"
LOAD_TIME = "vllm:kv_offload_load_time_total"
STORE_BYTES = "vllm:kv_offload_store_bytes_total"
STORE_TIME = "vllm:kv_offload_store_time_total"


def flat_offload_name(legacy_family: str, transfer_type: str) -> str | None:
    """The 0.25+ flat family of a legacy (family, transfer_type) pair, or None if it is not one."""
    what, direction = LEGACY_FAMILIES.get(legacy_family), LEGACY_OFFLOAD.get(transfer_type)
    return None if what is None or direction is None else f"vllm:kv_offload_{direction}_{what}"


def legacy_of_flat(name: str) -> tuple[str, str, str] | None:
    """(legacy family, transfer_type, sample suffix) a flat offload sample name is copied from."""
    for fam, what in LEGACY_FAMILIES.items():
        for tt, direction in LEGACY_OFFLOAD.items():
            flat = f"vllm:kv_offload_{direction}_{what}"
            if name == flat or name.startswith(flat + "_"):
                return fam, tt, name[len(flat):]
    return None

# The prefix cache's counters (the lab's per-pass deltas); `_total` is prometheus_client's suffix
# for a counter, so a writer that declares the counter names it without (counter_base).
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
EXTERNAL_PREFIX_QUERIES = "vllm:external_prefix_cache_queries_total"  # a KV connector's lookups (LMCache)
EXTERNAL_PREFIX_HITS = "vllm:external_prefix_cache_hits_total"
REQUEST_SUCCESS = "vllm:request_success_total"
PREEMPTIONS = "vllm:num_preemptions_total"
TTFT_SECONDS = "vllm:time_to_first_token_seconds"

# -- startup lines --------------------------------------------------------------------------------
# The first tier's size as the engine logs it: "GPU KV cache size: 21,520 tokens" (CPU on the CPU
# build; vLLM 0.17 on, the same words in every release since).
KV_CACHE_SIZE_LINE = r"(?P<device>GPU|CPU|XPU) KV cache size: (?P<tokens>[\d,]+) tokens"


def counter_base(name: str) -> str:
    """A counter's name as prometheus_client declares it (it adds `_total` when it prints)."""
    return name[: -len("_total")] if name.endswith("_total") else name

# -- what a replay run reads and keeps (kvtier.records.replayrun, kvtier.replay.monitor) -------------
# the families kvtier replay samples every second into metrics_series.csv.gz: what the cache did
CACHE_SERIES = (PROMPT_BY_SOURCE, PROMPT_TOTAL, GENERATION_TOTAL, REQUEST_SUCCESS, "vllm:num_requests_running",
                "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", PREEMPTIONS, PREFIX_QUERIES,
                PREFIX_HITS, STORE_BYTES, LOAD_BYTES)
