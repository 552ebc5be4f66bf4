"""The lab run's files, written in one place: what the live capture (kvtier.lab.cyclic) and the
replica generator (kvtier.replica.lab) both write, so the replica is the measured format.

Layout of one run, under raw/lab/<run>/ (read back by kvtier.records.labrun):
  run.yaml                         setups, model, documents, concurrency, LMCache settings
  requests.csv                     one row per request: setup, pass, phase, order, doc, tokens, TTFT
  <setup>/server.log               vLLM's startup lines; for LMCache also its own log lines
  <setup>/metrics/<k>_<label>.prom /metrics after pass k (0_start before the first); with a
                                   per-request series also metrics/requests/<k>_<pass>_<i>.prom

Standard library and PyYAML only (prometheus_client for a replica's scrape): the live capture
runs in the vLLM venv, which has no pandas.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from . import vllm as V

PASSES: tuple[str, ...] = ("first", "second", "reverse")
SNAPSHOTS: tuple[str, ...] = ("start", *PASSES)  # /metrics before the first pass and after each
REQUEST_COLUMNS: tuple[str, ...] = ("setup", "pass", "phase", "order", "doc", "prompt_tokens", "cached_tokens", "start_s",
                                    "ttft_ms", "e2e_ms", "output_tokens")
METRICS_AFTER = "metrics_after"  # the per-request snapshot's path under the setup's folder (a live run on the CPU build)


@dataclass(frozen=True)
class RequestRow:
    """One request as requests.csv records it (times in the units of its columns)."""

    setup: str
    pass_: str
    phase: str  # "doc" or "check"
    order: int
    doc: int | None  # None: not a document (the check prompt)
    prompt_tokens: int
    cached_tokens: int
    start_s: float
    ttft_ms: float
    e2e_ms: float
    output_tokens: int
    metrics_after: str = ""

    def cells(self, metrics_after: bool) -> list[str | int]:
        """The row's CSV cells: times to the digits the capture records (0.1 ms start, 10 us latency)."""
        out: list[str | int] = [self.setup, self.pass_, self.phase, self.order, "" if self.doc is None else self.doc,
                                self.prompt_tokens, self.cached_tokens, f"{self.start_s:.4f}", f"{self.ttft_ms:.2f}",
                                f"{self.e2e_ms:.2f}", self.output_tokens]
        return out + [self.metrics_after] if metrics_after else out


def write_requests(path: str | Path, rows: Iterable[RequestRow], metrics_after: bool = False) -> Path:
    """requests.csv: the header, then one row per request in the order sent."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*REQUEST_COLUMNS, *([METRICS_AFTER] if metrics_after else [])])
        w.writerows(r.cells(metrics_after) for r in rows)
    return path


def write_run(root: str | Path, run: dict[str, Any]) -> Path:
    """run.yaml, keys in the order given (the record's reading order)."""
    path = Path(root) / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False), encoding="utf-8")
    return path


def snapshot_path(setup_dir: str | Path, k: int) -> Path:
    """<setup>/metrics/<k>_<label>.prom: /metrics after pass k (0: before the first)."""
    return Path(setup_dir) / "metrics" / f"{k}_{SNAPSHOTS[k]}.prom"


def request_snapshot(k: int, pass_: str, i: int) -> str:
    """The per-request snapshot's path under the setup's folder, as requests.csv's metrics_after names it."""
    return f"metrics/requests/{k}_{pass_}_{i:02d}.prom"


def write_snapshot(path: str | Path, text: str) -> Path:
    """One /metrics scrape, as the server sent it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_log(setup_dir: str | Path, lines: Iterable[str]) -> Path:
    """<setup>/server.log from its lines (the live capture's is the server's own output)."""
    path = Path(setup_dir) / "server.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# -- vLLM's lines and scrape ---------------------------------------------------------------------

def kv_cache_size_line(tokens: int, device: str = "GPU") -> str:
    """The engine's startup line of its first tier's size (records.vllm.KV_CACHE_SIZE_LINE)."""
    return f"{device} KV cache size: {tokens:,} tokens"


@dataclass(frozen=True)
class Served:
    """What one answered request adds to the server's counters."""

    prompt_tokens: int
    gpu_tokens: int  # from the prefix cache
    external_tokens: int  # from the KV connector (LMCache)
    generated_tokens: int
    ttft_s: float  # server-side


HELP = {V.PREFIX_QUERIES: "Prefix cache queries, in terms of number of queried tokens.",
        V.PREFIX_HITS: "Prefix cache hits, in terms of number of cached tokens.",
        V.EXTERNAL_PREFIX_QUERIES: "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
                                   "of number of queried tokens.",
        V.EXTERNAL_PREFIX_HITS: "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
                                "number of cached tokens.",
        V.PROMPT_TOTAL: "Number of prefill tokens processed.",
        V.GENERATION_TOTAL: "Number of generation tokens processed.",
        V.PREEMPTIONS: "Cumulative number of preemption from the engine."}


def vllm_metrics_text(served: Iterable[Served], *, model_name: str, block_size: int, num_gpu_blocks: int, created: float,
                      ttft_buckets: tuple[float, ...], connector: bool) -> str:
    """A /metrics scrape as vLLM 0.17 prints it (single API server, so with _created lines, all at
    `created`) after the `served` requests; `connector`: the external prefix cache counts (a KV
    connector's lookups: the prompt the GPU did not hold)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    lab = ["engine", "model_name"]
    c = {name: Counter(V.counter_base(name), doc, lab, registry=reg) for name, doc in HELP.items()}
    by_source = Counter(V.counter_base(V.PROMPT_BY_SOURCE), "Number of prompt tokens by source.", lab + ["source"], registry=reg)
    success = Counter(V.counter_base(V.REQUEST_SUCCESS), "Count of successfully processed requests.", lab + ["finished_reason"],
                      registry=reg)
    ttft = Histogram(V.TTFT_SECONDS, "Histogram of time to first token in seconds.", lab, buckets=ttft_buckets, registry=reg)
    info = Gauge(V.CACHE_CONFIG_INFO, "Information of the LLMEngine CacheConfig",
                 ["block_size", "cache_dtype", "enable_prefix_caching", "engine", "num_cpu_blocks", "num_gpu_blocks",
                  "prefix_caching_hash_algo"], registry=reg)
    info.labels(str(block_size), "auto", "True", "0", "None", str(num_gpu_blocks), "sha256").set(1)
    labels = {"engine": "0", "model_name": model_name}
    for name in c:
        c[name].labels(**labels)
    for src in ("local_compute", "local_cache_hit", "external_kv_transfer"):
        by_source.labels(source=src, **labels)
    ttft.labels(**labels)
    for r in served:
        c[V.PREFIX_QUERIES].labels(**labels).inc(r.prompt_tokens)
        c[V.PREFIX_HITS].labels(**labels).inc(r.gpu_tokens)
        if connector:
            c[V.EXTERNAL_PREFIX_QUERIES].labels(**labels).inc(r.prompt_tokens - r.gpu_tokens)
            c[V.EXTERNAL_PREFIX_HITS].labels(**labels).inc(r.external_tokens)
        c[V.PROMPT_TOTAL].labels(**labels).inc(r.prompt_tokens)
        c[V.GENERATION_TOTAL].labels(**labels).inc(r.generated_tokens)
        by_source.labels(source="local_cache_hit", **labels).inc(r.gpu_tokens)
        by_source.labels(source="external_kv_transfer", **labels).inc(r.external_tokens)
        by_source.labels(source="local_compute", **labels).inc(r.prompt_tokens - r.gpu_tokens - r.external_tokens)
        success.labels(finished_reason="length", **labels).inc()
        ttft.labels(**labels).observe(r.ttft_s)
    text = generate_latest(reg).decode()
    return re.sub(r"(_created\{[^}]*\}) [0-9.e+]+", lambda m: f"{m.group(1)} {created:.9e}", text)


# -- LMCache 0.5.6's lines (read back by records.labrun.read_lmcache_log) ------------------------

LMCACHE_COLOURS = {"INFO": "\x1b[32m", "WARNING": "\x1b[33m"}


def lmcache_line(prefix: str, stamp: str, level: str, msg: str, where: str) -> str:
    """One LMCache log line: `prefix` (vLLM's process tag), the coloured level, the message, where."""
    return f"{prefix}{LMCACHE_COLOURS[level]}[{stamp}] LMCache {level}:\x1b[0m {msg} ({where})"


def lmcache_lookup(rid: str, total: int, computed: int, hit: int, load: int) -> str:
    """The scheduler's lookup of a request: what the GPU had, what LMCache holds, what it loads."""
    return (f"Reqid: {rid}, Total tokens {total}, Inference Engine computed tokens: {computed}, LMCache hit tokens: {hit}, "
            f"need to load: {load}")


def lmcache_retrieved(rid: str, got: int, required: int, total: int, gb: float, ms: float) -> str:
    return (f"[req_id={rid}] Retrieved {got} out of {required} required tokens (from {total} total tokens). size: "
            f"{gb:.4f} gb, cost {ms:.4f} ms, throughput: {gb / (ms / 1000):.4f} GB/s;")


def lmcache_stored(rid: str, stored: int, total: int, gb: float, ms: float, offload_ms: float, put_ms: float) -> str:
    return (f"[req_id={rid}] Stored {stored} out of total {total} tokens. size: {gb:.4f} GB, cost {ms:.4f} ms, throughput: "
            f"{gb / (ms / 1000):.4f} GB/s; offload_time: {offload_ms:.4f} ms, put_time: {put_ms:.4f} ms")
