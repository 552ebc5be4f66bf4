"""The data contract of the vLLM server log, folded over its chunks as the reader streams them.

A violation that would move a number is an error naming the file and the line. What can be
repaired without guessing (reports lost from the log during traffic) is repaired the one
documented way and listed (Repair), so the note's appendix can report it. The log is also
checked against the snapshot of the same run: its reports may not add up to more than the
counters (counter_limits), it holds one server run (check_runs) and the counters' engines
(check_engines).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from . import vllm as V
from .prometheus import Snapshot
from .serverlog_read import LogChunk, ServerLog, v0_stats_line

if TYPE_CHECKING:
    from .serverlog import LogSummary


@dataclass(frozen=True)
class Repair:
    """One documented repair: which file, which lines, what was wrong and what the analysis does."""

    path: str
    first_line: int
    last_line: int
    kind: str
    seconds: float
    detail: str


def check_log(log: ServerLog, interval_s: float = 10.0, slack_s: float = 1.0) -> list[Repair]:
    """check_log on a parsed log held in memory (tests, small logs); the pipeline streams the
    same checks chunk by chunk (LogChecker, through serverlog.summarize_server_log)."""
    checker = LogChecker(log.path, interval_s, slack_s, log.key_generation)
    checker.add(LogChunk({c: log.stats[c].to_numpy() for c in log.stats.columns},
                         {c: log.transfers[c].to_numpy() for c in log.transfers.columns}))
    return checker.finish()


class LogChecker:
    """The log's data contract, folded over its chunks in file order (bounded memory).

    Stats reports ten seconds apart, time never going back and no line twice within a server
    run; the same process id throughout a run (a new pid without a startup block is a restart
    the log does not show); one run after the other in time (a log concatenated with itself
    starts over); a longer silence is fine after an idle report (vLLM stops logging when idle),
    and otherwise a gap of lost reports, returned as a documented repair: the restores in it
    are counted only by the counters. Transfer reports: no negative amounts, loads with their
    count, each after a stats line and at most one per stats interval (a duplicated line would
    add phantom restores); summed, never more than the counters (`limits`), which a doubled log
    would exceed.
    """

    def __init__(self, path: str, interval_s: float = 10.0, slack_s: float = 1.0, key_generation: str = "flat",
                 limits: dict[str, tuple[float, str, int | None]] | None = None):
        self.path, self.interval_s, self.slack_s = path, interval_s, slack_s
        self.key_generation = key_generation
        self.limits = limits or {}  # column -> (counter value, counter name, its line in the snapshot)
        self.sums = {c: 0.0 for c in self.limits}
        self.repairs: list[Repair] = []
        self.n_stats = 0
        self.prev: tuple[int, int, bool, int, float] | None = None  # time, segment, busy, line, pid
        self.prev_xfer: tuple[int, int] | None = None  # stats line, line of the last transfer report

    def add(self, chunk: LogChunk) -> None:
        self._stats(chunk.stats)
        self._transfers(chunk.transfers)

    def _stats(self, st: dict[str, np.ndarray]) -> None:
        n = len(st["line"])
        if not n:
            return
        self.n_stats += n
        t = st["time"].astype("datetime64[s]").astype("int64")
        seg = st["segment"].astype(np.int64)
        lines = st["line"].astype(np.int64)
        busy = (st["prompt_tps"].astype(float) > 0) | (st["gen_tps"].astype(float) > 0)
        pid = st["pid"].astype(float)
        if self.prev is not None:  # the last row of the previous chunk leads this one
            t0, s0, b0, l0, p0 = self.prev
            t, seg, busy, lines, pid = (np.concatenate([[v0], v]) for v0, v in
                                        ((t0, t), (s0, seg), (b0, busy), (l0, lines), (p0, pid)))
        self.prev = (int(t[-1]), int(seg[-1]), bool(busy[-1]), int(lines[-1]), float(pid[-1]))
        same = seg[1:] == seg[:-1]
        dt = np.diff(t)
        for k in np.flatnonzero(~same):  # a new server run starts: it must start after the last one ended
            if dt[k] < 0:
                raise RawRecordError(self.path, f"a server run (startup block before this line) reports from "
                                                f"{np.datetime64(int(t[k + 1]), 's')}, before the previous run's last "
                                                f"report at line {lines[k]} ({np.datetime64(int(t[k]), 's')}): a log "
                                                "concatenated with itself, or runs out of order", line=int(lines[k + 1]))
        back = np.flatnonzero(same & (dt < 0))
        if back.size:
            i = back[0] + 1
            raise RawRecordError(self.path, f"clock goes back {-dt[i - 1]} s from line {lines[i - 1]}", line=int(lines[i]))
        dup = np.flatnonzero(same & (dt == 0))
        if dup.size:
            i = dup[0] + 1
            raise RawRecordError(self.path, f"report repeated at the same second as line {lines[i - 1]} (duplicated line?)",
                                 line=int(lines[i]))
        short = np.flatnonzero(same & (dt < self.interval_s - self.slack_s))
        if short.size:
            i = short[0] + 1
            raise RawRecordError(self.path, f"reports {dt[i - 1]} s apart (line {lines[i - 1]}): the stats interval is "
                                            f"{self.interval_s:g} s", line=int(lines[i]))
        new_pid = np.flatnonzero(same & (pid[1:] != pid[:-1]) & np.isfinite(pid[1:]) & np.isfinite(pid[:-1]))
        if new_pid.size:
            i = new_pid[0] + 1
            raise RawRecordError(self.path, f"stats lines change from pid {pid[i - 1]:.0f} (line {lines[i - 1]}) to pid "
                                            f"{pid[i]:.0f} with no startup block between: the server restarted (its "
                                            "counters reset) where the log does not show it", line=int(lines[i]))
        long_ = np.flatnonzero(same & (dt > self.interval_s + self.slack_s) & busy[:-1])
        for j in long_:
            self.repairs.append(Repair(self.path, int(lines[j]), int(lines[j + 1]), "missing_reports",
                                       float(dt[j] - self.interval_s),
                                       f"{int(round(dt[j] / self.interval_s)) - 1} ten-second reports missing during traffic"))

    def _transfers(self, x: dict[str, np.ndarray]) -> None:
        lines = x["line"].astype(np.int64)
        if not len(lines):
            return
        orphan = x["stats_line"] < 0
        if orphan.any():
            raise RawRecordError(self.path, "KV Transfer report before any stats line", line=int(lines[np.flatnonzero(orphan)[0]]))
        owner = x["stats_line"].astype(np.int64)
        prev_owner = np.concatenate([[self.prev_xfer[0] if self.prev_xfer else -1], owner[:-1]])
        prev_line = np.concatenate([[self.prev_xfer[1] if self.prev_xfer else -1], lines[:-1]])
        twice = np.flatnonzero(owner == prev_owner)
        if twice.size:
            i = twice[0]
            raise RawRecordError(self.path, f"a second KV Transfer report for the interval of the stats line {owner[i]} "
                                            f"(the first is line {prev_line[i]}): vLLM writes one per interval, so a "
                                            "duplicated line would count its transfers twice", line=int(lines[i]))
        self.prev_xfer = (int(owner[-1]), int(lines[-1]))
        for col, (limit, counter, where) in self.limits.items():
            running = self.sums[col] + np.cumsum(np.nan_to_num(x[col].astype(float)))
            over = np.flatnonzero(running > limit * (1 + 1e-9) + 1e-6)
            if over.size:
                raise RawRecordError(self.path, f"the KV Transfer reports up to this line add up to {running[over[0]]:,.0f} "
                                                f"{col}, more than the counter {counter} ({limit:,.0f}, line {where} of the "
                                                "snapshot) that covers the whole run: a duplicated or concatenated log, or "
                                                "the log of another server", line=int(lines[over[0]]))
            self.sums[col] = float(running[-1])
        if self.key_generation == "legacy":
            return
        for col in ("load_bytes", "load_time", "load_count", "store_bytes", "store_time", "store_count"):
            neg = np.flatnonzero(x[col].astype(float) < 0)
            if neg.size:
                raise RawRecordError(self.path, f"negative {col} in a KV Transfer report", line=int(lines[neg[0]]))
        loads = np.isnan(x["load_bytes"].astype(float)) != np.isnan(x["load_count"].astype(float))
        if loads.any():
            raise RawRecordError(self.path, "KV Transfer report has load bytes without a load count (or the reverse)",
                                 line=int(lines[np.flatnonzero(loads)[0]]))

    def finish(self) -> list[Repair]:
        if not self.n_stats:
            v0 = v0_stats_line(self.path)
            if v0 is not None:
                raise RawRecordError(self.path, "a stats line of vLLM's V0 engine (Running/Swapped/Pending, no 'Engine N:'): "
                                                "this parser reads the V1 engine's reports (vLLM 0.11 to 0.33); V0 logs "
                                                "carry no offload transfer reports", line=v0[0], record=v0[1])
            raise RawRecordError(self.path, "no ten-second stats lines: was the server started with --disable-log-stats?")
        return self.repairs


def counter_limits(snap: Snapshot) -> dict[str, tuple[float, str, int | None]]:
    """What the log's reports may add up to at most: the counters over the same run."""
    names = {"load_bytes": V.LOAD_BYTES, "store_bytes": V.STORE_BYTES, "load_count": V.LOAD_COUNT}
    return {col: (snap.value(name), name, snap.first_line(name)) for col, name in names.items() if snap.has(name)}


def check_runs(log: "LogSummary", snap: Snapshot) -> None:
    """One server run feeds the counters (they reset at a restart): a log with reports from a
    second run (a second startup block) cannot be checked against one snapshot."""
    runs = sorted(log.reporting)
    if len(runs) > 1:
        second = log.segments[runs[1]]
        created = datetime.fromtimestamp(snap.created(), tz=timezone.utc).isoformat()
        raise RawRecordError(log.path, f"a second server run starts here (a startup block after reports of an earlier "
                                       f"run; {len(runs)} runs report in all), but the counters of {snap.path} (created "
                                       f"{created}) cover a single run, reset at each restart: give the log of the "
                                       "counted run alone, or a snapshot per run (stitch_counters)", line=second.first_line)


def check_engines(log: "LogSummary", snap: Snapshot) -> None:
    """The counters' `engine` labels are the engines the log reports: the same counters under a
    second engine label would otherwise be summed twice."""
    labelled = snap.samples[snap.samples["labels"].map(lambda ls: any(k == "engine" for k, _ in ls))]
    engine = labelled["labels"].map(lambda ls: dict(ls)["engine"])
    in_snap = sorted(set(engine), key=lambda e: (len(e), e))
    aggregated = [e for e in log.engines if e.endswith(" aggregated")]
    if aggregated:
        n = int(aggregated[0].split()[0])
        if len(in_snap) != n:
            raise RawRecordError(snap.path, f"the counters carry {len(in_snap)} engine label(s) {in_snap}, but the log "
                                            f"{log.path} aggregates {n} engines")
        return
    in_log = {str(int(e)) for e in log.engines}
    extra = [e for e in in_snap if str(int(e)) not in in_log] if all(e.isdigit() for e in in_snap) else in_snap
    if extra:
        line = int(labelled.loc[engine == extra[0], "line"].min())
        raise RawRecordError(snap.path, f"counters under engine=\"{extra[0]}\", but the stats lines of {log.path} come "
                                        f"from engine(s) {sorted(in_log, key=int)} only: a second copy of the series "
                                        "would be summed twice (a merged or relabelled scrape?)", line=line)


def repairs_frame(repairs: list[Repair]) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in repairs],
                        columns=["path", "first_line", "last_line", "kind", "seconds", "detail"])
