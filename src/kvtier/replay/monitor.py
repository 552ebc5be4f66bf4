"""Series kept through a run: the host's load and CPU steal, and the server's /metrics.

A shared two-core machine is part of what a CPU run measures; its load is recorded beside the
run so that a run on a busy host can be flagged (kvtier.production.curve), not silently mixed in.

- host_series.csv: every `interval_s` the 1/5/15-minute load averages (/proc/loadavg) and, over
  the interval, the share of CPU time that was busy and that was stolen by the hypervisor
  (/proc/stat's first line: user nice system idle iowait irq softirq steal ...).
- metrics_series.csv.gz: every `interval_s` (1 s by default), the /metrics families that say what
  the cache did (`SERIES_FAMILIES`), one row per sample: t_s, name, labels, value. Compressed and
  filtered so a run folder stays small; the full text is kept at the start and the end.
"""

from __future__ import annotations

import csv
import gzip
import io
import threading
import time
from pathlib import Path
from typing import Callable

from ..records.prometheus import family_samples
from ..records.replayrun import HOST_FIELDS, HOST_SERIES, METRICS_SERIES  # noqa: F401 (re-exported)
from ..records.replaywrite import HostSeriesWriter
from ..records.vllm import CACHE_SERIES as SERIES_FAMILIES


def read_loadavg(path: str | Path = "/proc/loadavg") -> tuple[float, float, float]:
    parts = Path(path).read_text().split()
    return float(parts[0]), float(parts[1]), float(parts[2])


def read_cpu_times(path: str | Path = "/proc/stat") -> list[int]:
    """The aggregate `cpu` line's jiffies: user nice system idle iowait irq softirq steal (guest
    time is already inside user and nice)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith("cpu "):
            return [int(x) for x in line.split()[1:9]]
    raise ValueError(f"{path}: no aggregate cpu line")


def cpu_shares(before: list[int], after: list[int]) -> tuple[float, float]:
    """(busy, steal) shares of the CPU time between two /proc/stat readings."""
    d = [b - a for a, b in zip(before, after)]
    total = sum(d)
    if total <= 0:
        return 0.0, 0.0
    idle = d[3] + d[4]
    return (total - idle) / total, d[7] / total


class _Sampler(threading.Thread):
    """Calls `step(t_s)` every `interval_s` until stopped (and once more at the stop)."""

    def __init__(self, interval_s: float, step: Callable[[float], None]):
        super().__init__(daemon=True)
        self.interval_s, self.step, self.halt, self.t0 = interval_s, step, threading.Event(), time.monotonic()
        self.errors = 0

    def run(self) -> None:
        while True:
            try:
                self.step(round(time.monotonic() - self.t0, 3))
            except Exception:  # a missed sample is a gap in the series, never a failed run
                self.errors += 1
            if self.halt.wait(self.interval_s):
                break

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


class HostSeries:
    """host_series.csv in `out`, sampled every `interval_s`; `summary()` for host.yaml."""

    def __init__(self, out: Path, interval_s: float = 2.0, proc: Path = Path("/proc")):
        self.proc = proc
        self.rows: list[dict[str, float]] = []
        self.w = HostSeriesWriter(out)
        self.path = self.w.path
        self.last = read_cpu_times(proc / "stat")
        self.thread = _Sampler(interval_s, self._step)

    def _step(self, t_s: float) -> None:
        load = read_loadavg(self.proc / "loadavg")
        now = read_cpu_times(self.proc / "stat")
        busy, steal = cpu_shares(self.last, now)
        self.last = now
        row = dict(zip(HOST_FIELDS, (t_s, *load, round(busy, 4), round(steal, 4))))
        self.rows.append(row)
        self.w.write(row)

    def start(self) -> "HostSeries":
        self.thread.start()
        return self

    def stop(self) -> dict[str, float | int]:
        self.thread.stop()
        self.w.close()
        return self.summary()

    def summary(self) -> dict[str, float | int]:
        rows = self.rows[1:] or self.rows  # the first sample's shares cover no interval
        if not rows:
            return {"samples": 0}
        n = len(rows)
        return {"samples": len(self.rows), "interval_s": self.thread.interval_s,
                "load1_mean": round(sum(r["load1"] for r in rows) / n, 3), "load1_max": max(r["load1"] for r in rows),
                "busy_share_mean": round(sum(r["busy_share"] for r in rows) / n, 4),
                "steal_share_mean": round(sum(r["steal_share"] for r in rows) / n, 4),
                "steal_share_max": max(r["steal_share"] for r in rows)}


def series_rows(text: str, t_s: float, families: tuple[str, ...] = SERIES_FAMILIES) -> list[tuple[float, str, str, float]]:
    """(t_s, name, labels, value) of every sample of `families` in one /metrics text (parsed by
    kvtier.records.prometheus); labels as k=v pairs, sorted, without engine and model_name."""
    return [(t_s, s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("engine", "model_name")),
             s.value) for s in family_samples(text, families)]


class MetricsSeries:
    """metrics_series.csv.gz in `out`: `fetch()` (the /metrics text) every `interval_s`."""

    def __init__(self, out: Path, fetch: Callable[[], str], interval_s: float = 1.0):
        self.path, self.fetch = out / METRICS_SERIES, fetch
        self.buf = io.StringIO()
        self.w = csv.writer(self.buf)
        self.w.writerow(("t_s", "name", "labels", "value"))
        self.samples = 0
        self.thread = _Sampler(interval_s, self._step)

    def _step(self, t_s: float) -> None:
        rows = series_rows(self.fetch(), t_s)
        self.w.writerows(rows)
        self.samples += 1

    def start(self) -> "MetricsSeries":
        self.thread.start()
        return self

    def stop(self) -> dict[str, float | int]:
        self.thread.stop()
        with gzip.open(self.path, "wt", encoding="utf-8", newline="") as f:
            f.write(self.buf.getvalue())
        return {"samples": self.samples, "interval_s": self.thread.interval_s, "missed": self.thread.errors}
