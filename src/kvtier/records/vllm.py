"""What kvtier knows about vLLM's telemetry, by version, in one table.

Metric names and their renames, and which series exist from which version. A reader that meets
a new vLLM telemetry format gets its new names here and nowhere else; domains ask the records
(kvtier.records.prometheus) for values by these names.
"""

from __future__ import annotations

from typing import Any, Callable

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
# build; vLLM 0.17 on, the same words in every release since). The one pattern of that line: the
# log reader's startup fact `kv_size` (STARTUP_LINES) and the searches for it in a log as it is
# written (serving.server, records.geometry); the device as the stats line's, any capitals.
KV_CACHE_SIZE_LINE = r"(?P<device>[A-Z]+) KV cache size: (?P<tokens>[\d,]+) tokens"


def counter_base(name: str) -> str:
    """A counter's name as prometheus_client declares it (it adds `_total` when it prints)."""
    return name[: -len("_total")] if name.endswith("_total") else name

# -- what a replay run reads and keeps (kvtier.records.replayrun, kvtier.replay.monitor) -------------
# the families kvtier replay samples every second into metrics_series.csv.gz: what the cache did
CACHE_SERIES = (PROMPT_BY_SOURCE, PROMPT_TOTAL, GENERATION_TOTAL, REQUEST_SUCCESS, "vllm:num_requests_running",
                "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", PREEMPTIONS, PREFIX_QUERIES,
                PREFIX_HITS, STORE_BYTES, LOAD_BYTES)

# -- more /metrics series the production analysis and its checks read -----------------------------
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"          # histogram family
LOAD_SIZE = "vllm:kv_offload_load_size"                       # histogram family (0.25+)
STORE_SIZE = "vllm:kv_offload_store_size"
LOAD_COUNT, STORE_COUNT = LOAD_SIZE + "_count", STORE_SIZE + "_count"  # operations
LOOKUP_SYNC = "vllm:kv_offload_lookup_sync_delay_seconds"     # histogram family (0.29+)
LOOKUP_ASYNC = "vllm:kv_offload_lookup_async_delay_seconds"   # deferred lookups: 0.33+ only
CPU_CACHE_USAGE = "vllm:kv_offload_cpu_cache_usage_perc"
PROMPT_BY_SOURCE_CREATED = "vllm:prompt_tokens_by_source_created"
LEGACY_BYTES_TOTAL, LEGACY_TIME_TOTAL, LEGACY_SIZE_COUNT = (
    "vllm:kv_offload_total_bytes_total", "vllm:kv_offload_total_time_total", "vllm:kv_offload_size_count")
# the pool's tokens counted twice by 0.32/0.33: by source, and cached by source (tier)
CACHED_AS = {"local_cache_hit": "device", "external_kv_transfer": "host"}


def offload_series(kind: str) -> tuple[str, str, str]:
    """(bytes, time, operation count) counters of the 0.25+ flat names, kind "load" or "store"."""
    return (f"vllm:kv_offload_{kind}_bytes_total", f"vllm:kv_offload_{kind}_time_total", f"vllm:kv_offload_{kind}_size_count")


# -- the server log -------------------------------------------------------------------------------
# "KV Transfer metrics:" report items, both key generations, onto one vocabulary: up to 0.21 the
# GPU_to_CPU/CPU_to_GPU keys, from 0.25 the /metrics family names without their _total.
LOG_LEGACY_KEYS = {
    "GPU_to_CPU_total_bytes": "store_bytes", "GPU_to_CPU_total_time": "store_time",
    "CPU_to_GPU_total_bytes": "load_bytes", "CPU_to_GPU_total_time": "load_time",
}
LOG_FLAT_KEYS = {
    "vllm:kv_offload_load_bytes": "load_bytes", "vllm:kv_offload_load_time": "load_time",
    "vllm:kv_offload_load_size_count": "load_count", "vllm:kv_offload_load_size_sum": "load_size_sum",
    "vllm:kv_offload_store_bytes": "store_bytes", "vllm:kv_offload_store_time": "store_time",
    "vllm:kv_offload_store_size_count": "store_count", "vllm:kv_offload_store_size_sum": "store_size_sum",
    "vllm:kv_offload_lookup_sync_delay_seconds_count": "lookup_count",
    "vllm:kv_offload_lookup_sync_delay_seconds_sum": "lookup_time",
    "vllm:kv_offload_lookup_async_delay_seconds_count": "deferred_count",
    "vllm:kv_offload_lookup_async_delay_seconds_sum": "deferred_time",
    "vllm:kv_offload_cpu_cache_usage_perc": "pool_usage",
}
LOG_SERIES_PREFIX = "vllm:"  # other offload series in a report (allocation sizes, read/write usage): skipped
TRANSFER_MARKER = "KV Transfer metrics: "

# The ten-second stats line of the V1 engine, 0.11 to 0.33 ("GPU"/"CPU"/device KV cache usage;
# Deferred (0.33), KV fetch, Preemptions, Corrupted, External and MM hit rates only when present).
STATS_NUM = r"-?\d+(?:\.\d+)?|nan|inf"  # %.1f of a float; nan/inf are parsed, then refused with their line
STATS_MESSAGE = (
    r"^(?:Engine (?P<engine>\d+)|(?P<engines>\d+) Engines Aggregated): "
    rf"Avg prompt throughput: (?P<prompt_tps>{STATS_NUM}) tokens/s, Avg generation throughput: (?P<gen_tps>{STATS_NUM}) tokens/s, "
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs"
    r"(?:, Deferred: (?P<deferred>\d+) reqs)?"
    r"(?:, KV fetch: (?P<fetch_waiting>\d+) waiting to start, (?P<fetch_in_progress>\d+) in progress, (?P<fetch_completed>\d+) completed waiting)?"
    r"(?:, Preemptions: (?P<preemptions>\d+))?"
    rf", (?P<device>[A-Z]+) KV cache usage: (?P<kv_usage_pct>{STATS_NUM})%"
    rf"(?:, Prefix cache hit rate: (?P<prefix_hit_pct>{STATS_NUM})%)?"
    r"(?:, Corrupted: (?P<corrupted>\d+) reqs)?"
    rf"(?:, External prefix cache hit rate: (?P<external_hit_pct>{STATS_NUM})%)?"
    rf"(?:, MM cache hit rate: (?P<mm_hit_pct>{STATS_NUM})%)?$"
)
# The record prefix `(Proc pid=N) LEVEL MM-DD HH:MM:SS [file:line] ` (0.11 adds it through a
# stdout wrapper, 0.33 through the formatter; the process part is absent in some launches).
LOG_PREFIX = (r"(?:\((?P<proc>[^)\n]*?) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
              r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[(?P<src>[^\]\n]*)\] ")
V0_STATS_MARKER = "Avg prompt throughput: "  # the V0 engine's line has no 'Engine N:' before it


def _int_commas(text: str) -> int:
    return int(text.replace(",", ""))


# Startup lines, 0.11 to 0.33: (fact, marker found in the log, message pattern, its fields'
# types, the message as 0.33 writes it). The marker is what the log reader looks for; the
# pattern reads the fact; the format is the writer's (kvtier.records.serverlog_write).
STARTUP_LINES: tuple[tuple[str, str, str, dict[str, Callable[[str], Any]], str], ...] = (
    ("version", "vLLM API server version ", r"vLLM API server version (\S+)", {"version": str},
     "vLLM API server version {version}"),
    ("kv_size", " KV cache size: ", KV_CACHE_SIZE_LINE, {"kv_device": str, "kv_cache_tokens": _int_commas},
     "{kv_device} KV cache size: {kv_cache_tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: "
     "{concurrency:.2f}x"),
    ("kv_memory", "Available KV cache memory: ", r"Available KV cache memory: ([\d.]+) GiB", {"kv_cache_gib": float},
     "Available KV cache memory: {kv_cache_gib} GiB"),
    ("model_loading", "Model loading took ", r"Model loading took ([\d.]+) GiB memory", {"model_gib": float},
     "Model loading took {model_gib} GiB memory and {seconds} seconds"),
    ("mmap", "Created mmap file ", r"Created mmap file (\S+) \(([\d.]+) GB\)", {"mmap_path": str, "mmap_gb": float},
     "Created mmap file {mmap_path} ({mmap_gb:.2f} GB)"),
    ("max_model_len", "Using max model len ", r"Using max model len (\d+)", {"max_model_len": int},
     "Using max model len {max_model_len}"),
)
ARGS_MARKER = "non-default args: "  # the startup arguments, a Python repr (0.32: with dataclass reprs)

# The scheduler's token budget per step (kvtier.step_budget): said by SchedulerConfig's info
# line, given in the args, or vLLM 0.32's CPU default for an OpenAI server (2,048 x world size,
# EngineArgs.get_batch_defaults); the engine's config line says whether chunked prefill is on.
BUDGET_SAID = r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"
BUDGET_GIVEN = r"non-default args: \{[^\n]*?'max_num_batched_tokens': (\d+)"
ENGINE_CONFIG = r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: [^\n]*"
CPU_TOKENS_PER_WORLD = {"0.32.": 2048}  # version prefix -> tokens per (tensor x pipeline) rank, CPU platform
