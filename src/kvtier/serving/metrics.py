"""A parsed /metrics snapshot, with the few lookups the analyses need.

Parsing is prometheus_client's; this adds sums over label subsets and the name fallbacks
between vLLM generations (flat offload names from 0.25, legacy `transfer_type` names before).

An analysis reads a handful of series from each scrape, and a scrape is mostly histogram buckets
it never reads, so a Snapshot parses lazily: on reading, every line is checked against the text
format's line shapes (a scrape that is not Prometheus text is an error naming its first bad line,
as before) and indexed by sample name; a series is parsed by prometheus_client, from its own lines,
the first time it is asked for. tests/test_serving_metrics.py checks that every scrape in raw/ gives
the samples a whole-text parse gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

from ..errors import RawRecordError, read_scrape_text

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


# The shapes a line of the text format takes: blank, a comment (# HELP, # TYPE, or any other), or
# a sample: name, optional {labels}, value (a float, Inf or NaN: parsed later), optional timestamp
# (integer milliseconds). The name is group 1.
_LINE = re.compile(r"[ \t]*|#.*|([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{.*\})?[ \t]*[-+.0-9a-zA-Z]+(?:[ \t]+-?[0-9]+)?[ \t]*")


class Snapshot:
    """All samples of one /metrics scrape; `value()` sums the samples matching a label subset."""

    def __init__(self, lines: list[str], index: dict[str, list[int]], source: str = "<metrics>"):
        self._lines = lines    # the scrape's lines
        self._index = index    # sample name -> numbers (0-based) of its lines
        self._parsed: dict[str, list[Sample]] = {}
        self.source = source

    @classmethod
    def parse(cls, text: str, source: str = "<metrics>") -> "Snapshot":
        """Check every line's shape and index the samples by name; no value is parsed yet."""
        lines = text.splitlines()
        index: dict[str, list[int]] = {}
        for i, line in enumerate(lines):
            m = _LINE.fullmatch(line)
            if m is None:
                raise RawRecordError(source, "not Prometheus text (not a sample, a comment or blank)", line=i + 1,
                                     record=line)
            if m.group(1):
                index.setdefault(m.group(1), []).append(i)
        return cls(lines, index, source)

    @classmethod
    def read(cls, path: str | Path) -> "Snapshot":
        return cls.parse(read_scrape_text(path), str(path))  # bounded: errors.MAX_SCRAPE_BYTES, MAX_LINE

    def _samples(self, name: str) -> list[Sample]:
        """The samples named `name`, parsed by prometheus_client from their own lines (once)."""
        if name not in self._parsed:
            rows = self._index.get(name, [])
            text = "".join(self._lines[i] + "\n" for i in rows)
            try:
                found = [Sample(s.name, dict(s.labels), float(s.value))
                         for fam in text_string_to_metric_families(text) for s in fam.samples]
            except ValueError as e:
                line = _bad_line(self._lines[i] for i in rows)
                where = rows[line[0] - 1] + 1 if line[0] is not None else None
                raise RawRecordError(self.source, f"not Prometheus text ({e})", line=where, record=line[1]) from None
            self._parsed[name] = found
        return self._parsed[name]

    def lines_of(self, name: str) -> list[tuple[Sample, int]]:
        """The samples named `name`, each with its line (1-based): one sample per sample line."""
        found = self._samples(name)
        rows = self._index.get(name, [])
        return list(zip(found, (i + 1 for i in rows))) if len(found) == len(rows) else [(s, None) for s in found]  # type: ignore[misc]

    @property
    def names(self) -> set[str]:
        """Every sample name of the scrape."""
        return set(self._index)

    def has(self, name: str) -> bool:
        return name in self._index

    def value(self, name: str, **labels: str) -> float:
        """Sum over samples of `name` whose labels include `labels`; 0 if the series is absent."""
        return sum(s.value for s in self._samples(name) if all(s.labels.get(k) == v for k, v in labels.items()))

    def labels_of(self, name: str) -> dict[str, str]:
        """Labels of the first sample of an info-style gauge (cache_config_info, ...)."""
        found = self._samples(name)
        return found[0].labels if found else {}

    def first(self, *candidates: str | tuple[str, dict[str, str]]) -> float | None:
        """Value of the first candidate series present (name, or (name, labels))."""
        for c in candidates:
            name, labels = (c, {}) if isinstance(c, str) else c
            if self.has(name):
                return self.value(name, **labels)
        return None

    def server_instance(self) -> str:
        """Identity of the server process: counters' `_created` stamps are set at its start."""
        created = [s.value for name in self._index if name.endswith("_created") for s in self._samples(name)]
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


def _bad_line(lines: Iterable[str]) -> tuple[int | None, str | None]:
    """Locate (1-based) the first of `lines` prometheus_client rejects, for the error message."""
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            return i, line
    return None, None
