"""The vLLM server log as a record: what the analyses read, in memory bounded by a constant.

A real log grows by about 40 MB a day; holding every report as a row costs about as much memory
as the file (833 MB for a 1 GB log). The analysis needs few of them row by row: the reports that
carry a load (a restore each, Figure 1b); the rest only as sums and per-clock-hour aggregates.
`summarize_server_log` folds the log's chunks (serverlog_read.LogReader) into those, running the
data contract (serverlog_contract.LogChecker) on each chunk as it passes, so peak memory is one
chunk's worth whatever the size of the file. The reader's parts: serverlog_parse (the lines in
bulk), serverlog_read (ranges, and the whole log as tables: read_server_log), serverlog_facts (the
run contract's one pass for the geometry and the job lines), serverlog_contract (the checks),
serverlog_write (the lines, as vLLM 0.33 writes them). This module gathers their public names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from .serverlog_contract import LogChecker, Repair
from .serverlog_facts import LogFacts, read_log_facts
from .serverlog_parse import TRANSFER_COLUMNS
from .serverlog_read import LogChunk, LogReader, Segment, ServerLog, read_server_log
from .touch import PathTouching

if TYPE_CHECKING:
    from .host import HostRecord
    from .prometheus import Snapshot

__all__ = ["LOAD_COLUMNS", "LogChecker", "LogChunk", "LogFacts", "LogReader", "LogSummary", "Repair", "Segment", "ServerLog",
           "Summarizer", "read_counted_log", "read_log_facts", "read_server_log", "summarize_server_log", "summary_of"]

LOAD_COLUMNS = ["line", "segment", "stats_line", "time", "load_bytes", "load_time", "load_count"]
HOUR = 3600


@dataclass(frozen=True, eq=False)
class LogSummary(PathTouching):  # its data touches its file (records.touch): provenance read off the records
    """What the analysis reads from a server log, the same for any log size."""

    path: str
    segments: list[Segment]
    key_generation: str
    bytes_read: int = 0
    n_lines: int = 0
    n_stats: int = 0
    n_transfers: int = 0
    first_time: pd.Timestamp | None = None
    last_time: pd.Timestamp | None = None
    max_running: float = float("nan")
    busy_hours: set[int] = field(default_factory=set)            # clock hours (s since epoch / 3600) with traffic
    tokens_by_hour: dict[int, float] = field(default_factory=dict)  # (prompt + generation tokens/s) x interval, per clock hour
    engines: set[str] = field(default_factory=set)               # "0", "1", ... or "N aggregated"
    reporting: dict[int, int] = field(default_factory=dict)      # segment -> line of its first stats report
    totals: dict[str, float] = field(default_factory=dict)       # TRANSFER_COLUMNS summed over every report
    loads: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LOAD_COLUMNS))
    repairs: list[Repair] = field(default_factory=list)

    def facts(self) -> dict[str, Any]:
        """Startup facts of the last segment that printed them (the server the snapshot read)."""
        out: dict[str, Any] = {}
        for seg in self.segments:
            out.update(seg.facts)
        return out


class Summarizer:
    """Folds LogChunks, in file order, into a LogSummary."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self.n_stats = self.n_transfers = 0
        self.first: np.datetime64 | None = None
        self.last: np.datetime64 | None = None
        self.max_running = -np.inf
        self.busy_hours: set[int] = set()
        self.tokens_by_hour: dict[int, float] = {}
        self.engines: set[str] = set()
        self.reporting: dict[int, int] = {}
        self.totals = {c: 0.0 for c in TRANSFER_COLUMNS}
        self.loads: list[pd.DataFrame] = []

    def add(self, chunk: LogChunk) -> None:
        st, x = chunk.stats, chunk.transfers
        if len(st["line"]):
            self.n_stats += len(st["line"])
            t = st["time"].astype("datetime64[s]")
            self.first = t.min() if self.first is None else min(self.first, t.min())
            self.last = t.max() if self.last is None else max(self.last, t.max())
            self.max_running = max(self.max_running, float(np.nanmax(st["running"].astype(float))))
            hour = t.astype(np.int64) // HOUR
            prompt, gen = st["prompt_tps"].astype(float), st["gen_tps"].astype(float)
            tokens = (prompt + gen) * self.interval_s
            self.busy_hours.update(np.unique(hour[(prompt > 0) | (gen > 0)]).tolist())
            segs, first = np.unique(st["segment"], return_index=True)
            for seg, i in zip(segs.tolist(), first.tolist()):
                self.reporting.setdefault(int(seg), int(st["line"][i]))
            keys, where = np.unique(hour, return_inverse=True)
            for k, v in zip(keys.tolist(), np.bincount(where, weights=tokens).tolist()):
                self.tokens_by_hour[k] = self.tokens_by_hour.get(k, 0.0) + v
            engine, engines = st["engine"].astype(float), st["engines"].astype(float)
            self.engines.update(f"{e:.0f}" for e in np.unique(engine[np.isfinite(engine)]).tolist())
            self.engines.update(f"{e:.0f} aggregated" for e in np.unique(engines[np.isfinite(engines)]).tolist())
        if len(x["line"]):
            self.n_transfers += len(x["line"])
            for c in TRANSFER_COLUMNS:
                self.totals[c] += float(np.nansum(x[c].astype(float)))
            has_load = (np.nan_to_num(x["load_count"].astype(float)) > 0) | (np.nan_to_num(x["load_bytes"].astype(float)) > 0)
            if has_load.any():
                self.loads.append(pd.DataFrame({c: x[c][has_load] for c in LOAD_COLUMNS}))

    def result(self, path: str, segments: list[Segment], key_generation: str, bytes_read: int, n_lines: int,
               repairs: list[Repair]) -> LogSummary:
        loads = pd.concat(self.loads, ignore_index=True) if self.loads else pd.DataFrame(
            {c: np.array([], "datetime64[s]" if c == "time" else float) for c in LOAD_COLUMNS})
        return LogSummary(path, segments, key_generation, bytes_read, n_lines, self.n_stats, self.n_transfers,
                          None if self.first is None else pd.Timestamp(self.first),
                          None if self.last is None else pd.Timestamp(self.last),
                          float(self.max_running) if self.n_stats else float("nan"), self.busy_hours, self.tokens_by_hour,
                          self.engines, self.reporting, self.totals, loads, repairs)


def summarize_server_log(path: str | Path, year: int, interval_s: float = 10.0, workers: int | None = None,
                         limits: dict[str, tuple[float, str, int | None]] | None = None) -> LogSummary:
    """Stream the log once: the data contract on every chunk, then its reduction. `limits`
    (column -> counter value, name, snapshot line) bounds the reports' sums by the counters."""
    reader = LogReader(path, year, workers)
    checker: LogChecker | None = None
    fold = Summarizer(interval_s)
    for chunk in reader:
        if checker is None:  # the key generation is known once the first reports are read
            checker = LogChecker(str(reader.path), interval_s, key_generation=reader.key_generation, limits=limits)
        checker.key_generation = reader.key_generation
        checker.add(chunk)
        fold.add(chunk)
    checker = checker or LogChecker(str(reader.path), interval_s, limits=limits)
    repairs = checker.finish()
    return fold.result(str(reader.path), reader.segments, reader.key_generation, reader.bytes_read, reader.n_lines, repairs)


def summary_of(log: ServerLog | LogSummary, interval_s: float = 10.0) -> LogSummary:
    """A LogSummary of a log already parsed into tables (no checks run): the analysis steps take either."""
    if isinstance(log, LogSummary):
        return log
    fold = Summarizer(interval_s)
    fold.add(_as_chunk(log))
    return fold.result(log.path, log.segments, log.key_generation, log.bytes_read, 0, [])


def _as_chunk(log: ServerLog) -> LogChunk:
    return LogChunk({c: log.stats[c].to_numpy() for c in log.stats.columns},
                    {c: log.transfers[c].to_numpy() for c in log.transfers.columns})


def read_counted_log(path: str | Path, host: "HostRecord", snap: "Snapshot") -> LogSummary:
    """The server log of the run `snap` counted, streamed with the data contract and checked
    against the counters and host.yaml: its reports add up to no more than the counters, it holds
    the counters' one server run and engines (serverlog_contract), and its reports lie inside
    the observation period (the year of its timestamps: host.yaml's log_year)."""
    from .serverlog_contract import check_engines, check_runs, counter_limits

    start, end = host.start, host.end
    server = summarize_server_log(path, host.log_year, host.interval_s, limits=counter_limits(snap))
    check_runs(server, snap)
    check_engines(server, snap)
    first, last = server.first_time, server.last_time
    if first < pd.Timestamp(start.replace(tzinfo=None)) - pd.Timedelta(minutes=5) or last > pd.Timestamp(end.replace(tzinfo=None)):
        raise RawRecordError(path, f"reports run from {first} to {last}, outside the observation period {start}..{end} "
                                   "(wrong log, or wrong observation.log_year)")
    return server
