"""Writing a vLLM server log's lines as vLLM 0.33 writes them: the record prefix, the startup lines,
the ten-second stats line, the KV-transfer report and the HTTP access line.

The formats come from the one vLLM table (kvtier.records.vllm), the same the reader parses, so a
line written here reads back as the values it was written from (tests/test_records_roundtrip_serverlog.py).
The replica generator writes its server log through these; the offload worker's own lines are
kvtier.records.workerlog's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from . import vllm as V

FORMATS = {fact: fmt for fact, _, _, _, fmt in V.STARTUP_LINES}
TRANSFER_KEY = {**{v: k for k, v in V.LOG_FLAT_KEYS.items()}}  # the common vocabulary -> 0.25+ report keys


def prefix(proc: str | None, pid: int | None, level: str, t: datetime, src: str) -> str:
    """`(Proc pid=N) LEVEL MM-DD HH:MM:SS [file:line] ` (no process part without a pid)."""
    who = f"({proc} pid={pid}) " if pid is not None else ""
    return f"{who}{level} {t.strftime('%m-%d %H:%M:%S')} [{src}] "


def record_line(proc: str | None, pid: int | None, level: str, t: datetime, src: str, message: str) -> str:
    """One log record, with its newline."""
    return prefix(proc, pid, level, t, src) + message + "\n"


def startup_message(fact: str, **values: Any) -> str:
    """A startup line's message (V.STARTUP_LINES: version, kv_size, kv_memory, model_loading,
    mmap, max_model_len), from the values it states."""
    return FORMATS[fact].format(**values)


def args_message(args: dict[str, Any]) -> str:
    """The "non-default args" line: the arguments' Python repr, as vLLM prints them."""
    return V.ARGS_MARKER + repr(args)


@dataclass(frozen=True)
class StatsReport:
    """The values of one ten-second stats line (throughputs in tokens/s, percentages 0-100)."""

    prompt_tps: float
    gen_tps: float
    running: int
    waiting: int
    kv_usage_pct: float
    prefix_hit_pct: float | None = None
    external_hit_pct: float | None = None
    deferred: int | None = None
    preemptions: int | None = None
    engine: int = 0
    device: str = "GPU"


def stats_message(r: StatsReport) -> str:
    """`Engine 000: Avg prompt throughput: ...`: the fields 0.33 prints, in its order, the
    optional ones only when given (numbers %.1f, as vLLM formats them)."""
    parts = [f"Avg prompt throughput: {r.prompt_tps:.1f} tokens/s", f"Avg generation throughput: {r.gen_tps:.1f} tokens/s",
             f"Running: {r.running} reqs", f"Waiting: {r.waiting} reqs"]
    if r.deferred is not None:
        parts.append(f"Deferred: {r.deferred} reqs")
    if r.preemptions is not None:
        parts.append(f"Preemptions: {r.preemptions}")
    parts.append(f"{r.device} KV cache usage: {r.kv_usage_pct:.1f}%")
    if r.prefix_hit_pct is not None:
        parts.append(f"Prefix cache hit rate: {r.prefix_hit_pct:.1f}%")
    if r.external_hit_pct is not None:
        parts.append(f"External prefix cache hit rate: {r.external_hit_pct:.1f}%")
    return f"Engine {r.engine:03d}: " + ", ".join(parts)


def transfer_message(values: Iterable[tuple[str, int | float]]) -> str:
    """`KV Transfer metrics: k=v, ...` from (name, value) in the order given: a name of the
    readers' vocabulary (load_bytes, ..., pool_usage) becomes its 0.25+ key, any other is
    written as it is; values as Python prints them."""
    return V.TRANSFER_MARKER + ", ".join(f"{TRANSFER_KEY.get(k, k)}={v}" for k, v in values)


def access_line(proc: str, pid: int, client: str, port: int, method: str = "POST", path: str = "/v1/chat/completions",
                status: str = "200 OK") -> str:
    """The API server's HTTP access line (uvicorn's format, no vLLM prefix), with its newline."""
    return f"({proc} pid={pid}) INFO:     {client}:{port} - \"{method} {path} HTTP/1.1\" {status}\n"
