"""A parsed /metrics snapshot, with the few lookups the analyses need.

Parsing is prometheus_client's; this adds sums over label subsets and the name fallbacks
between vLLM generations (flat offload names from 0.25, legacy `transfer_type` names before).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ..errors import RawRecordError

PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
SOURCES = ("local_cache_hit", "external_kv_transfer", "local_compute")
LOAD_BYTES = ("vllm:kv_offload_load_bytes_total", ("vllm:kv_offload_total_bytes_total", {"transfer_type": "CPU_to_GPU"}))
LOAD_TIME = ("vllm:kv_offload_load_time_total", ("vllm:kv_offload_total_time_total", {"transfer_type": "CPU_to_GPU"}))
STORE_BYTES = ("vllm:kv_offload_store_bytes_total", ("vllm:kv_offload_total_bytes_total", {"transfer_type": "GPU_to_CPU"}))
STORE_TIME = ("vllm:kv_offload_store_time_total", ("vllm:kv_offload_total_time_total", {"transfer_type": "GPU_to_CPU"}))
# vLLM 0.33 also splits cached prompt tokens by tier: source="device" (GPU) and "host" (CPU pool)
CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Snapshot:
    """All samples of one /metrics scrape; `value()` sums the samples matching a label subset."""

    def __init__(self, samples: list[Sample], source: str = "<metrics>"):
        self.samples = samples
        self.source = source
        self._names = {s.name for s in samples}

    @classmethod
    def parse(cls, text: str, source: str = "<metrics>") -> "Snapshot":
        try:
            samples = [Sample(s.name, dict(s.labels), float(s.value))
                       for fam in text_string_to_metric_families(text) for s in fam.samples]
        except ValueError as e:
            line = _bad_line(text)
            raise RawRecordError(source, f"not Prometheus text ({e})", line=line[0], record=line[1]) from None
        return cls(samples, source)

    @classmethod
    def read(cls, path: str | Path) -> "Snapshot":
        return cls.parse(Path(path).read_text(encoding="utf-8"), str(path))

    def has(self, name: str) -> bool:
        return name in self._names

    def value(self, name: str, **labels: str) -> float:
        """Sum over samples of `name` whose labels include `labels`; 0 if the series is absent."""
        return sum(s.value for s in self.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def labels_of(self, name: str) -> dict[str, str]:
        """Labels of the first sample of an info-style gauge (cache_config_info, ...)."""
        for s in self.samples:
            if s.name == name:
                return s.labels
        return {}

    def first(self, *candidates: str | tuple[str, dict[str, str]]) -> float | None:
        """Value of the first candidate series present (name, or (name, labels))."""
        for c in candidates:
            name, labels = (c, {}) if isinstance(c, str) else c
            if self.has(name):
                return self.value(name, **labels)
        return None

    def server_instance(self) -> str:
        """Identity of the server process: counters' `_created` stamps are set at its start."""
        created = [s.value for s in self.samples if s.name.endswith("_created")]
        return f"{min(created):.3f}" if created else "unknown"

    def tokens_by_source(self) -> dict[str, float]:
        return {src: self.value(PROMPT_BY_SOURCE, source=src) for src in SOURCES}

    def load_bytes(self) -> float | None:
        return self.first(*LOAD_BYTES)

    def load_time(self) -> float | None:
        return self.first(*LOAD_TIME)

    def store_bytes(self) -> float | None:
        return self.first(*STORE_BYTES)

    def store_time(self) -> float | None:
        return self.first(*STORE_TIME)

    def pool_tokens(self) -> float | None:
        """Prompt tokens served from the CPU pool: `external_kv_transfer` by source, or the
        `host` source of cached tokens on a server that exports only that split."""
        return self.first((PROMPT_BY_SOURCE, {"source": "external_kv_transfer"}), (CACHED_BY_SOURCE, {"source": "host"}))

    def kv_cache_tokens(self) -> int | None:
        """Size of the first-tier (GPU, or CPU on the CPU backend) KV cache, from cache_config_info."""
        info = self.labels_of("vllm:cache_config_info")
        if info.get("kv_cache_size_tokens", "None") not in ("None", ""):
            return int(float(info["kv_cache_size_tokens"]))
        if info.get("num_gpu_blocks", "None") not in ("None", "") and info.get("block_size"):
            return int(info["num_gpu_blocks"]) * int(info["block_size"])
        return None

    def offload_bytes_per_block(self) -> int | None:
        """Bytes of one offloaded block, from kv_offload_config_info (vLLM 0.33)."""
        info = self.labels_of("vllm:kv_offload_config_info")
        try:
            return int(info["cpu_kv_cache_size_bytes"]) // int(info["cpu_num_chunks"])
        except (KeyError, ValueError, ZeroDivisionError):
            return None

    def offload_pool_bytes(self) -> int | None:
        info = self.labels_of("vllm:kv_offload_config_info")
        return int(info["cpu_kv_cache_size_bytes"]) if "cpu_kv_cache_size_bytes" in info else None


def _bad_line(text: str) -> tuple[int | None, str | None]:
    """Locate the first line prometheus_client rejects, for the error message."""
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            return i, line
    return None, None
