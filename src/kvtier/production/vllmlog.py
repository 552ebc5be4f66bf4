"""The vLLM server log: startup facts, the ten-second stats line and the KV-transfer report.

Formats (reference/vllm-telemetry.md): the record prefix `(Proc pid=N) LEVEL MM-DD HH:MM:SS
[file:line] message` (0.11 adds it through a stdout wrapper, 0.33 through the formatter), the
stats line of 0.11 to 0.33 ("GPU"/"CPU"/device KV cache usage; Deferred, KV fetch, Preemptions,
External prefix cache hit rate only when present), and "KV Transfer metrics:" in both key
generations (GPU_to_CPU_total_bytes... up to 0.21, vllm:kv_offload_* from 0.25).

The file is read in large byte chunks. Each chunk is split into lines once, the report lines are
picked out by substring tests, and then parsed in bulk: one regex findall for all stats lines,
one json.loads for all transfer reports (a 'k=v, k=v' report is JSON once quoted); only when a
bulk parse fails are lines re-read one by one to name the bad one. Timestamps carry no year: it comes from the run's metadata, and a step from
December to January moves to the next year. Restarts (a new "non-default args" line) open a
new segment; the ten-second reports are per-interval deltas, so segments add up directly.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import RawRecordError

ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
NUM = r"-?\d+(?:\.\d+)?|nan|inf"  # %.1f of a float; nan/inf are parsed, then refused with their line
STATS = re.compile(
    r"^(?:Engine (?P<engine>\d+)|(?P<engines>\d+) Engines Aggregated): "
    rf"Avg prompt throughput: (?P<prompt_tps>{NUM}) tokens/s, Avg generation throughput: (?P<gen_tps>{NUM}) tokens/s, "
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs"
    r"(?:, Deferred: (?P<deferred>\d+) reqs)?"
    r"(?:, KV fetch: (?P<fetch_waiting>\d+) waiting to start, (?P<fetch_in_progress>\d+) in progress, (?P<fetch_completed>\d+) completed waiting)?"
    r"(?:, Preemptions: (?P<preemptions>\d+))?"
    rf", (?P<device>[A-Z]+) KV cache usage: (?P<kv_usage_pct>{NUM})%"
    rf"(?:, Prefix cache hit rate: (?P<prefix_hit_pct>{NUM})%)?"
    r"(?:, Corrupted: (?P<corrupted>\d+) reqs)?"
    rf"(?:, External prefix cache hit rate: (?P<external_hit_pct>{NUM})%)?"
    rf"(?:, MM cache hit rate: (?P<mm_hit_pct>{NUM})%)?$"
)
PREFIX_TEXT = (r"(?:\((?P<proc>[^)\n]*?) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
               r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[(?P<src>[^\]\n]*)\] ")
PREFIX = re.compile(PREFIX_TEXT)
STATS_LINE = re.compile("^" + PREFIX_TEXT + STATS.pattern[1:], re.M)  # whole lines, a chunk's worth at once
STATS_LINE_GROUPS = sorted(STATS_LINE.groupindex, key=STATS_LINE.groupindex.get)
XFER_LINE = re.compile(rb"^(?:\([^)\n]*? pid=\d+\) )?[A-Z]+ (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[[^\]\n]*\] "
                       rb"KV Transfer metrics: ([^\n]*)$", re.M)
FACT_MARKERS = (b"non-default args: ", b" KV cache size: ", b"Available KV cache memory: ", b"Model loading took ",
                b"Created mmap file ", b"Using max model len ", b"vLLM API server version ")
STATS_COLUMNS = ["prompt_tps", "gen_tps", "running", "waiting", "deferred", "preemptions", "kv_usage_pct",
                 "prefix_hit_pct", "external_hit_pct"]

# Both generations of the transfer report, mapped onto one vocabulary.
LEGACY_KEYS = {
    "GPU_to_CPU_total_bytes": "store_bytes", "GPU_to_CPU_total_time": "store_time",
    "CPU_to_GPU_total_bytes": "load_bytes", "CPU_to_GPU_total_time": "load_time",
}
FLAT_KEYS = {
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
KEYS = {**{k: (v, "legacy") for k, v in LEGACY_KEYS.items()}, **{k: (v, "flat") for k, v in FLAT_KEYS.items()}}
TRANSFER_COLUMNS = ["load_bytes", "load_time", "load_count", "store_bytes", "store_time", "store_count",
                    "lookup_count", "lookup_time", "deferred_count", "deferred_time", "pool_usage"]


@dataclass
class Segment:
    """One server run inside the log: from its startup lines to the next restart."""

    index: int
    first_line: int
    pid: int | None
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class ServerLog:
    """A parsed log: tidy tables of the reports (each row with its line), and the server runs."""

    path: str
    stats: pd.DataFrame      # one row per ten-second stats line
    transfers: pd.DataFrame  # one row per "KV Transfer metrics" line
    segments: list[Segment]
    key_generation: str      # "flat" (0.25+), "legacy" (<=0.21) or "none"
    bytes_read: int = 0

    def facts(self) -> dict[str, Any]:
        """Startup facts of the last segment that printed them (the server the snapshot read)."""
        out: dict[str, Any] = {}
        for seg in self.segments:
            out.update(seg.facts)
        return out


def parse_transfer(message: str, path: str, line: int) -> tuple[str, dict[str, float]]:
    """'KV Transfer metrics: k=v, ...' -> (generation, values in the common vocabulary)."""
    values: dict[str, float] = {}
    gens = set()
    for item in message[21:].split(", "):  # len("KV Transfer metrics: ") == 21
        key, sep, raw = item.partition("=")
        hit = KEYS.get(key)
        if hit is None:
            if sep and key.startswith("vllm:"):
                continue  # other offload series (allocation sizes, read/write usage): not used
            what = "is not key=value (truncated line?)" if not sep else "is neither a <=0.21 nor a 0.25+ key"
            raise RawRecordError(path, f"KV Transfer item {item!r} {what}", line=line, record=message)
        name, gen = hit
        try:
            v = float(raw)
        except ValueError:
            raise RawRecordError(path, f"{key}: not a number: {raw!r} (truncated line?)", line=line, record=message) from None
        if not math.isfinite(v):
            raise RawRecordError(path, f"{key} is {raw}: reports must be finite", line=line, record=message)
        if name in values:
            raise RawRecordError(path, f"key {key!r} appears twice", line=line, record=message)
        values[name] = v
        gens.add(gen)
    if len(gens) > 1:
        raise RawRecordError(path, "KV Transfer line mixes the <=0.21 and 0.25+ key generations", line=line, record=message)
    return (gens.pop() if gens else "flat"), values


def _facts(message: str, path: str, line: int) -> dict[str, Any]:
    if message.startswith("non-default args: "):
        try:
            args = ast.literal_eval(message[len("non-default args: "):])
        except (ValueError, SyntaxError):
            raise RawRecordError(path, "non-default args is not a Python dict literal (truncated line?)", line=line,
                                 record=message) from None
        return {"args": args}
    m = re.match(r"([A-Z]+) KV cache size: ([\d,]+) tokens", message)
    if m:
        return {"kv_device": m.group(1), "kv_cache_tokens": int(m.group(2).replace(",", ""))}
    m = re.match(r"Available KV cache memory: ([\d.]+) GiB", message)
    if m:
        return {"kv_cache_gib": float(m.group(1))}
    m = re.match(r"Model loading took ([\d.]+) GiB memory", message)
    if m:
        return {"model_gib": float(m.group(1))}
    m = re.match(r"Created mmap file (\S+) \(([\d.]+) GB\)", message)
    if m:
        return {"mmap_path": m.group(1), "mmap_gb": float(m.group(2))}
    m = re.match(r"Using max model len (\d+)", message)
    if m:
        return {"max_model_len": int(m.group(1))}
    m = re.match(r"vLLM API server version (\S+)", message)
    if m:
        return {"version": m.group(1)}
    raise RawRecordError(path, "startup line not in a known format (truncated?)", line=line, record=message)


def _times(ts: list[bytes] | list[str], lines: list[int], year: int, path: str) -> np.ndarray:
    """'MM-DD HH:MM:SS' -> datetime64[s], the year from metadata; December -> January rolls over."""
    if not ts:
        return np.array([], dtype="datetime64[s]")
    text = pd.Series(ts)
    if isinstance(ts[0], bytes):
        text = text.str.decode("ascii")
    months = pd.to_numeric(text.str[:2], errors="coerce").to_numpy()
    roll = np.concatenate([[0], np.cumsum((months[:-1] == 12) & (months[1:] == 1))])
    years = (year + roll).astype(str)
    parsed = pd.to_datetime(pd.Series(years) + "-" + text, format="%Y-%m-%d %H:%M:%S", errors="coerce")
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RawRecordError(path, f"bad timestamp {text.iloc[i]!r}", line=lines[i])
    return parsed.to_numpy().astype("datetime64[s]")


CHUNK = 1 << 26          # bytes a worker parses at once
PARALLEL_FROM = 1 << 28  # files this large are parsed by a process pool, one chunk per task


def _spans(path: Path, size: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges of about `size` that end at a newline (the last one at the end of file)."""
    size = size or CHUNK
    total = path.stat().st_size
    spans, start = [], 0
    with open(path, "rb") as f:
        while start < total:
            end = start + size
            if end >= total:
                spans.append((start, total))
                break
            f.seek(end)
            while True:
                block = f.read(1 << 16)
                cut = block.find(b"\n")
                if cut >= 0 or not block:
                    end += cut + 1 if cut >= 0 else len(block)
                    break
                end += len(block)
            spans.append((start, end))
            start = end
    return spans


class _ChunkError(Exception):
    """A RawRecordError raised inside a chunk, with the line counted from the chunk's start."""

    def __init__(self, line: int | None, message: str, record: str | None):
        super().__init__(line, message, record)
        self.line, self.message, self.record = line, message, record


def _parse_span(path: str, start: int, end: int) -> dict[str, Any]:
    """Parse one byte range; line numbers are local (1 = the range's first line).

    Split into lines once; pick the report lines by substring tests; then one regex findall
    for all stats lines and one json.loads for all transfer reports (see _transfer_rows).
    Returns numpy columns, cheap to send back from a worker process.
    """
    with open(path, "rb") as f:
        f.seek(start)
        chunk = f.read(end - start)
    try:
        return _parse_chunk(chunk, path)
    except RawRecordError as e:
        raise _ChunkError(e.line, str(e).split(": ", 1)[1].split("\n    ")[0], e.record) from None


def _parse_chunk(chunk: bytes, path: str) -> dict[str, Any]:
    if b"\x1b" in chunk:
        chunk = ANSI.sub(b"", chunk)
    if b"\r" in chunk:
        chunk = chunk.replace(b"\r\n", b"\n")
    lines = chunk.split(b"\n")
    if b" Engines Aggregated: " in chunk:
        s_idx = [i for i, ln in enumerate(lines) if b"] Engine " in ln or b" Engines Aggregated: " in ln]
    else:
        s_idx = [i for i, ln in enumerate(lines) if b"] Engine " in ln]
    x_idx = [i for i, ln in enumerate(lines) if b"] KV Transfer metrics: " in ln]
    out: dict[str, Any] = {"n_lines": len(lines) - (1 if chunk.endswith(b"\n") else 0), "bytes": len(chunk)}
    s_num = np.array(s_idx, dtype=np.int64) + 1
    rows = _stats_rows([lines[i] for i in s_idx], s_num.tolist(), path) if s_idx else []
    out["stats_line"] = s_num
    cols = list(zip(*rows)) if rows else [[] for _ in STATS_LINE_GROUPS]
    by = dict(zip(STATS_LINE_GROUPS, cols))
    out["stats_ts"] = np.array(by["ts"], dtype="U14")
    out["stats_device"] = np.array(by["device"], dtype="U8")
    out["stats_pid"] = _floats(list(by["pid"])) if rows else np.array([], float)
    for col in STATS_COLUMNS:
        out["stats_" + col] = _floats(list(by[col])) if rows else np.array([], float)
    x_num = np.array(x_idx, dtype=np.int64) + 1
    out["xfer_line"] = x_num
    dicts, gens = _transfer_rows([lines[i] for i in x_idx], x_num.tolist(), path) if x_idx else ([], set())
    out["xfer_gens"] = gens
    frame = pd.DataFrame.from_records(dicts) if dicts else pd.DataFrame({"@ts": []})
    out["xfer_ts"] = frame["@ts"].to_numpy(dtype="U14")
    for key in frame.columns.intersection(list(KEYS)):
        col = frame[key]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            bad = int(np.flatnonzero(~col.map(lambda v: type(v) in (int, float) or v is None).to_numpy())[0])
            raise RawRecordError(path, f"{key}={col.iloc[bad]!r} is not a number", line=int(x_num[bad]))
        out["xfer_" + KEYS[key][0]] = col.to_numpy(dtype=float)
    out["facts"] = _fact_lines(chunk)
    return out


def _stats_rows(lines: list[bytes], numbers: list[int], path: str) -> list[tuple]:
    """All stats lines of a chunk matched in one C-level findall; on a mismatch, find the line."""
    found = STATS_LINE.findall(b"\n".join(lines).decode("utf-8", "replace"))
    if len(found) == len(lines):
        return found
    for raw, line in zip(lines, numbers):
        text = raw.decode("utf-8", "replace")
        if STATS_LINE.match(text) is None:
            m = PREFIX.match(text)
            if m is None:
                raise RawRecordError(path, "log record without the vLLM prefix '(Proc pid=N) LEVEL MM-DD HH:MM:SS [file:line]'",
                                     line=line, record=text)
            raise RawRecordError(path, "stats line in no known vLLM format (0.11 to 0.33): truncated, or a field "
                                       "this parser does not know", line=line, record=text[m.end():])
    raise AssertionError("stats lines matched one by one but not together")


def _transfer_rows(lines: list[bytes], numbers: list[int], path: str) -> tuple[list[dict], set[str]]:
    """All transfer reports of a chunk, parsed by one json.loads: a regex substitution turns each
    line into '{"@ts":"MM-DD HH:MM:SS","k=v, k=v}', and 'k=v, ' is JSON once '=' becomes '":'
    and ', ' becomes ',"'. Anything rejected is re-read line by line to name the bad line."""
    joined = b"\n".join(lines)
    subbed, n = XFER_LINE.subn(rb'{"@ts":"\1","\2}', joined)
    if n != len(lines):
        for raw, line in zip(lines, numbers):
            if XFER_LINE.fullmatch(raw) is None:
                raise RawRecordError(path, "KV Transfer line without the vLLM prefix", line=line, record=raw.decode("utf-8", "replace"))
    try:
        text = b"[" + subbed.replace(b"=", b'":').replace(b", ", b',"').replace(b"\n", b",") + b"]"
        dicts = json.loads(text)
        keys = set().union(*dicts) if dicts else set()
        unknown = {k for k in keys if k not in KEYS and k != "@ts" and not k.startswith("vllm:")}
        gens = {KEYS[k][1] for k in keys if k in KEYS}
        if not unknown and len(gens) <= 1 and text.count(b'":') == sum(map(len, dicts)):
            return dicts, gens
    except (ValueError, TypeError):
        pass
    for raw, line in zip(lines, numbers):
        body = XFER_LINE.fullmatch(raw).group(2).decode("utf-8", "replace")  # type: ignore[union-attr]
        parse_transfer("KV Transfer metrics: " + body, path, line)
    raise RawRecordError(path, "KV Transfer reports mix key generations (<=0.21 and 0.25+)", line=numbers[0])


def _fact_lines(chunk: bytes) -> list[tuple[int, bytes]]:
    """Startup lines (local line number, text). They follow a "non-default args" line within a
    few minutes, so the other markers are only looked for in a window after each of those
    (and at the very start of a chunk, for logs whose first run began before it)."""
    windows = [(0, min(len(chunk), 1 << 20))]
    pos = chunk.find(FACT_MARKERS[0])
    while pos >= 0:
        windows.append((max(0, pos - 4096), min(len(chunk), pos + (1 << 20))))
        pos = chunk.find(FACT_MARKERS[0], pos + 1)
    hits = set()
    for lo, hi in windows:
        for marker in FACT_MARKERS:
            pos = chunk.find(marker, lo, hi)
            while pos >= 0:
                hits.add(pos)
                pos = chunk.find(marker, pos + 1, hi)
    out, prev, line = [], 0, 1
    for pos in sorted(hits):
        start = chunk.rfind(b"\n", 0, pos) + 1
        line += chunk.count(b"\n", prev, start)
        prev = start
        end = chunk.find(b"\n", pos)
        out.append((line, chunk[start: end if end >= 0 else len(chunk)]))
    return out


def read_server_log(path: str | Path, year: int, workers: int | None = None) -> ServerLog:
    """Parse a vLLM server log; every line the analysis needs is checked, the rest is skipped.

    The file is cut into ~64 MB ranges at line ends. A large file's ranges are parsed by a
    process pool (`workers` processes, default: the CPUs this process may use); the results are
    put back in file order with their line numbers shifted to the file's.
    """
    path = Path(path)
    p = str(path)
    spans = _spans(path)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    use_pool = workers > 1 and len(spans) > 1 and path.stat().st_size >= PARALLEL_FROM
    results: list[dict[str, Any]] = []
    base = 0
    if use_pool:
        with ProcessPoolExecutor(max_workers=min(workers, len(spans))) as pool:
            futures = [pool.submit(_parse_span, p, a, b) for a, b in spans]
            for fut in futures:
                try:
                    results.append(fut.result())
                except _ChunkError as e:
                    _reraise(p, e, base)
                base += results[-1]["n_lines"]
    else:
        for a, b in spans:
            try:
                results.append(_parse_span(p, a, b))
            except _ChunkError as e:
                _reraise(p, e, base)
            base += results[-1]["n_lines"]
    bases = np.cumsum([0] + [r["n_lines"] for r in results[:-1]])
    gens: set[str] = set().union(*(r["xfer_gens"] for r in results)) if results else set()
    if len(gens) > 1:
        raise RawRecordError(p, "the log mixes KV Transfer key generations (<=0.21 and 0.25+); one server version per file")
    facts = [(int(b) + line, text) for b, r in zip(bases, results) for line, text in r["facts"]]
    segments = _segments(facts, p)
    starts = np.array([s.first_line for s in segments], dtype=np.int64)

    def cat(key: str, dtype: Any = float) -> np.ndarray:
        parts = [r[key] for r in results if key in r]
        return np.concatenate(parts) if parts else np.array([], dtype=dtype)

    stats = pd.DataFrame({"line": np.concatenate([r["stats_line"] + b for b, r in zip(bases, results)])
                          if results else np.array([], np.int64)})
    stats["segment"] = np.clip(np.searchsorted(starts, stats["line"].to_numpy(), side="right") - 1, 0, None)
    stats["pid"] = cat("stats_pid")
    stats["device"] = cat("stats_device", "U8")
    for col in STATS_COLUMNS:
        stats[col] = cat("stats_" + col)
    for col in ("prompt_tps", "gen_tps", "kv_usage_pct"):
        bad = ~np.isfinite(stats[col].to_numpy(float))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise RawRecordError(p, f"non-finite {col} in a stats line", line=int(stats["line"].iloc[i]))
    stats["time"] = _times(cat("stats_ts", "U14").tolist(), stats["line"].tolist(), year, p)

    xfers = pd.DataFrame({"line": np.concatenate([r["xfer_line"] + b for b, r in zip(bases, results)])
                          if results else np.array([], np.int64)})
    xfers["segment"] = np.clip(np.searchsorted(starts, xfers["line"].to_numpy(), side="right") - 1, 0, None)
    s_lines = stats["line"].to_numpy()
    prev = np.searchsorted(s_lines, xfers["line"].to_numpy()) - 1
    xfers["stats_line"] = s_lines[np.clip(prev, 0, None)] if len(s_lines) else -1
    xfers.loc[prev < 0, "stats_line"] = -1
    for name in TRANSFER_COLUMNS:
        if any("xfer_" + name in r for r in results):
            xfers[name] = np.concatenate([r.get("xfer_" + name, np.full(len(r["xfer_line"]), np.nan)) for r in results])
        else:
            xfers[name] = np.nan
    xfers["time"] = _times(cat("xfer_ts", "U14").tolist(), xfers["line"].tolist(), year, p)
    return ServerLog(p, stats, xfers, segments, gens.pop() if gens else "none", int(sum(r["bytes"] for r in results)))


def _reraise(path: str, e: _ChunkError, base: int) -> None:
    raise RawRecordError(path, e.message, line=None if e.line is None else e.line + base, record=e.record) from None


def _floats(values: list[str]) -> np.ndarray:
    """Strings of a regex column to floats in one C call; an absent optional field ('') is NaN."""
    text = " ".join(values) if all(values) else " ".join(v or "nan" for v in values)
    out = np.fromstring(text, sep=" ")
    if out.size != len(values):
        raise ValueError("a stats field is not a number")
    return out


def _segments(facts_found: list[tuple[int, bytes]], path: str) -> list[Segment]:
    """Server runs: a new one starts where the version or the non-default args appear again."""
    segments: list[Segment] = []
    for line, raw in sorted(facts_found):
        text = raw.decode("utf-8", "replace")
        m = PREFIX.match(text)
        if m is None:
            continue  # the marker appeared inside some other message
        facts = _facts(text[m.end():], path, line)
        starts = {"version", "args"} & facts.keys()
        if not segments or any(k in segments[-1].facts for k in starts):
            segments.append(Segment(len(segments), line, int(m.group("pid")) if m.group("pid") else None))
        segments[-1].facts.update(facts)
    return segments
