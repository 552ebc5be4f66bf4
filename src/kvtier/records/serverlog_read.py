"""Reading a vLLM server log range by range, in memory bounded by a constant.

The file is cut into ranges of about CHUNK bytes at line ends; each range is parsed in bulk
(serverlog_parse._parse_chunk) in this process, or for a large file in a process pool with a few ranges
in flight, and handed on as a LogChunk with the file's line numbers. What spans ranges (the year
roll-over, the stats line before a transfer report, the server runs and their startup facts) is
carried from one range to the next, so the chunks equal one pass over the file. The production
pipeline folds them as they come (serverlog.summarize_server_log); read_server_log keeps them all as tables.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from ..errors import MAX_LINE, RawRecordError, line_too_long
from . import vllm as V
from .serverlog_parse import PREFIX, STATS_COLUMNS, TRANSFER_COLUMNS, _facts, _parse_chunk, _times
from .touch import PathTouching


@dataclass(frozen=True)
class Segment:
    """One server run inside the log: from its startup lines to the next restart."""

    index: int
    first_line: int
    pid: int | None
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class ServerLog(PathTouching):  # its data touches its file (records.touch)
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


CHUNK = 1 << 23          # bytes parsed at once (8 MB): bounds the memory of one pass, whatever the log size
PARALLEL_FROM = 1 << 28  # files this large are parsed by a process pool, one chunk per task


def _spans(path: Path, size: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges of about `size` that end at a newline (the last one at the end of file). A
    range is at most `size` + MAX_LINE bytes: a line that runs on past MAX_LINE is refused here,
    by its number, before any range is read (serverlog_parse._parse_chunk refuses one inside a range)."""
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
            scanned = 0
            while True:
                block = f.read(1 << 16)
                cut = block.find(b"\n")
                if cut >= 0 or not block:
                    end += cut + 1 if cut >= 0 else len(block)
                    break
                end += len(block)
                scanned += len(block)
                if scanned > MAX_LINE:
                    raise line_too_long(path, _line_at(f, start + size), MAX_LINE)
            spans.append((start, end))
            start = end
    return spans


def _line_at(f: Any, offset: int) -> int:
    """The number of the line holding byte `offset`: newlines before it, counted 1 MB at a time."""
    f.seek(0)
    n, left = 1, offset
    while left > 0:
        block = f.read(min(left, 1 << 20))
        if not block:
            break
        n += block.count(b"\n")
        left -= len(block)
    return n


class _ChunkError(Exception):
    """A RawRecordError raised inside a chunk, with the line counted from the chunk's start."""

    def __init__(self, line: int | None, message: str, record: str | None):
        super().__init__(line, message, record)
        self.line, self.message, self.record = line, message, record


def _parse_span(path: str, start: int, end: int) -> dict[str, Any]:
    """Parse one byte range; line numbers are local (1 = the range's first line).

    Returns numpy columns, cheap to send back from a worker process (see _parse_chunk).
    """
    with open(path, "rb") as f:
        f.seek(start)
        chunk = f.read(end - start)
    try:
        return _parse_chunk(chunk, path)
    except RawRecordError as e:
        raise _ChunkError(e.line, str(e).split(": ", 1)[1].split("\n    ")[0], e.record) from None


@dataclass
class LogChunk:
    """The reports of one byte range, as numpy columns with the file's line numbers; what a
    streaming consumer (serverlog.Summarizer, serverlog_contract.LogChecker) folds before the next range is read."""

    stats: dict[str, np.ndarray]      # line, segment, pid, engine, engines, device, STATS_COLUMNS, time
    transfers: dict[str, np.ndarray]  # line, segment, stats_line, TRANSFER_COLUMNS, time


class LogReader:
    """Reads a vLLM server log range by range (~CHUNK bytes each) in bounded memory.

    Iterating yields one LogChunk per range, in file order; a large file's ranges are parsed by
    a process pool with at most `workers + 1` ranges in flight. After the last chunk, `segments`,
    `key_generation`, `n_lines` and `bytes_read` describe the whole file. State that spans
    ranges (the year roll-over, the stats line before a transfer line, the server runs) is
    carried from one range to the next, so the chunks equal one pass over the file.
    """

    def __init__(self, path: str | Path, year: int, workers: int | None = None):
        self.path = Path(path)
        self.year = year
        if workers is None:
            workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.workers = workers
        self.segments: list[Segment] = []
        self.gens: set[str] = set()
        self.n_lines = 0
        self.bytes_read = 0
        self._roll = {"stats": (0, 0), "xfer": (0, 0)}
        self._last_stats_line = -1

    @property
    def key_generation(self) -> str:
        return next(iter(self.gens)) if self.gens else "none"

    def _results(self) -> Iterator[dict[str, Any]]:
        p = str(self.path)
        spans = _spans(self.path)
        use_pool = self.workers > 1 and len(spans) > 1 and self.path.stat().st_size >= PARALLEL_FROM
        if not use_pool:
            for a, b in spans:
                yield self._local(lambda a=a, b=b: _parse_span(p, a, b))
            return
        with ProcessPoolExecutor(max_workers=min(self.workers, len(spans))) as pool:
            pending: list[Any] = []
            todo = iter(spans)
            for a, b in itertools.islice(todo, self.workers + 1):
                pending.append(pool.submit(_parse_span, p, a, b))
            while pending:
                fut = pending.pop(0)
                for a, b in itertools.islice(todo, 1):
                    pending.append(pool.submit(_parse_span, p, a, b))
                yield self._local(fut.result)

    def _local(self, get: Any) -> dict[str, Any]:
        try:
            return get()
        except _ChunkError as e:
            _reraise(str(self.path), e, self.n_lines)
            raise AssertionError("unreachable")

    def __iter__(self) -> Iterator[LogChunk]:
        p = str(self.path)
        last_byte = b""
        for r in self._results():
            base = self.n_lines
            self.gens |= r["xfer_gens"]
            if len(self.gens) > 1:
                raise RawRecordError(p, "the log mixes KV Transfer key generations (<=0.21 and 0.25+); one server version per file",
                                     line=base + int(r["xfer_line"][0]) if len(r["xfer_line"]) else None)
            _segments([(base + line, text) for line, text in r["facts"]], p, self.segments)
            self.n_lines += r["n_lines"]
            self.bytes_read += r["bytes"]
            last_byte = r["last_byte"]
            yield self._chunk(r, base)
        if last_byte not in (b"", b"\n"):
            raise RawRecordError(p, "the log ends inside a line (no final newline): a copy taken while the server was "
                                    "writing, or a cut file; its last line would be read short (a number cut in two). "
                                    "Copy the log again, or drop the partial last line", line=self.n_lines)

    def _chunk(self, r: dict[str, Any], base: int) -> LogChunk:
        p = str(self.path)
        starts = np.array([s.first_line for s in self.segments], dtype=np.int64)

        def segment_of(lines: np.ndarray) -> np.ndarray:
            return np.clip(np.searchsorted(starts, lines, side="right") - 1, 0, None)

        s_lines = r["stats_line"] + base
        stats: dict[str, np.ndarray] = {"line": s_lines, "segment": segment_of(s_lines)}
        for col in ("pid", "engine", "engines", "device", *STATS_COLUMNS):
            stats[col] = r["stats_" + col]
        for col in ("prompt_tps", "gen_tps", "kv_usage_pct"):
            bad = ~np.isfinite(stats[col].astype(float))
            if bad.any():
                raise RawRecordError(p, f"non-finite {col} in a stats line", line=int(s_lines[np.flatnonzero(bad)[0]]))
        stats["time"], self._roll["stats"] = _times(r["stats_ts"], s_lines, self.year, p, self._roll["stats"])

        x_lines = r["xfer_line"] + base
        xfers: dict[str, np.ndarray] = {"line": x_lines, "segment": segment_of(x_lines)}
        prev = np.searchsorted(s_lines, x_lines) - 1
        before = s_lines[np.clip(prev, 0, None)] if len(s_lines) else np.zeros(len(x_lines), np.int64)
        xfers["stats_line"] = np.where(prev >= 0, before, self._last_stats_line).astype(np.int64)
        if len(s_lines):
            self._last_stats_line = int(s_lines[-1])
        for name in TRANSFER_COLUMNS:
            xfers[name] = r.get("xfer_" + name, np.full(len(x_lines), np.nan))
        xfers["time"], self._roll["xfer"] = _times(r["xfer_ts"], x_lines, self.year, p, self._roll["xfer"])
        return LogChunk(stats, xfers)


V0_MARKER = V.V0_STATS_MARKER.encode()


def v0_stats_line(path: str | Path) -> tuple[int, str] | None:
    """The first stats line in the format of vLLM's V0 engine (vllm/engine/metrics.py, no
    'Engine N:' before it), as (line, text); looked for only when no V1 stats line was found."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if V0_MARKER in raw and b"Engine" not in raw.split(V0_MARKER, 1)[0][-40:]:
                return number, raw.decode("utf-8", "replace").rstrip("\n")
    return None


def read_server_log(path: str | Path, year: int, workers: int | None = None) -> ServerLog:
    """Parse a vLLM server log into tidy tables of every report; every line the analysis needs
    is checked, the rest is skipped. The tables grow with the log: the production pipeline
    streams instead (serverlog.summarize_server_log); this is for tests and small logs."""
    reader = LogReader(path, year, workers)
    chunks = list(reader)

    def table(part: str, columns: list[str]) -> pd.DataFrame:
        cols = {c: np.concatenate([getattr(ch, part)[c] for ch in chunks]) if chunks else _EMPTY[c] for c in columns}
        return pd.DataFrame(cols)

    stats = table("stats", STATS_TABLE)
    xfers = table("transfers", TRANSFER_TABLE)
    return ServerLog(str(reader.path), stats, xfers, reader.segments, reader.key_generation, reader.bytes_read)


STATS_TABLE = ["line", "segment", "pid", "engine", "engines", "device", *STATS_COLUMNS, "time"]
TRANSFER_TABLE = ["line", "segment", "stats_line", *TRANSFER_COLUMNS, "time"]
_EMPTY = {**{c: np.array([], float) for c in STATS_TABLE + TRANSFER_TABLE},
          "line": np.array([], np.int64), "segment": np.array([], np.int64), "stats_line": np.array([], np.int64),
          "device": np.array([], "U8"), "time": np.array([], "datetime64[s]")}


def _reraise(path: str, e: _ChunkError, base: int) -> None:
    raise RawRecordError(path, e.message, line=None if e.line is None else e.line + base, record=e.record) from None


def _segments(facts_found: list[tuple[int, bytes]], path: str, segments: list[Segment]) -> list[Segment]:
    """Server runs, extended in place: a new one starts where the version or the non-default
    args appear again (a restart)."""
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
