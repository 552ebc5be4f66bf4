"""The host's load over a run, sampled into the run's folder: a measurement on a shared machine
is only as good as the record of what else the machine was doing.

Every `interval_s` a thread appends one line to `host_load.tsv`: the UTC time, the three load
averages (/proc/loadavg) and the cumulative CPU jiffies of /proc/stat's `cpu` line (user, nice,
system, idle, iowait, irq, softirq, steal). Steal is time the hypervisor gave this VM's virtual
CPUs to someone else; a share of it over the run is read from the first and last lines.
`summary` gives what run.yaml records: the start and end lines, the load's median and maximum,
and the steal and busy shares, so the analysis can flag runs above a load threshold.
"""

from __future__ import annotations

import datetime as dt
import statistics
import threading
from pathlib import Path
from typing import Any

FILE = "host_load.tsv"
COLUMNS = ["time", "load1", "load5", "load15", "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def sample(proc: Path = Path("/proc")) -> list[str] | None:
    """One line's fields (as text), or None where /proc is not Linux's."""
    try:
        load = (proc / "loadavg").read_text().split()[:3]
        cpu = next(ln for ln in (proc / "stat").read_text().splitlines() if ln.startswith("cpu "))
    except (OSError, StopIteration):
        return None
    jiffies = (cpu.split()[1:9] + ["0"] * 8)[:8]
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
    return [now, *load, *jiffies]


class LoadSampler:
    """Appends a sample to <run_dir>/host_load.tsv every interval until stopped (a daemon thread)."""

    def __init__(self, run_dir: str | Path, interval_s: float = 5.0, proc: Path = Path("/proc")):
        self.path = Path(run_dir) / FILE
        self.interval_s = interval_s
        self.proc = proc
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kvtier-hostload", daemon=True)

    def _write(self) -> None:
        row = sample(self.proc)
        if row is None:
            return
        new = not self.path.exists()
        with open(self.path, "a", encoding="utf-8") as f:  # the run's own folder only
            if new:
                f.write("\t".join(COLUMNS) + "\n")
            f.write("\t".join(row) + "\n")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._write()

    def start(self) -> "LoadSampler":
        self._write()
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling, take the end sample, and return the summary (None without /proc)."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=self.interval_s + 5)
        self._write()
        return summary(self.path) if self.path.exists() else None


def read_series(path: str | Path) -> list[dict[str, Any]]:
    """host_load.tsv's samples; a line of another shape, or a load average or CPU-time counter that
    is negative or not finite (they never are), is a RawRecordError naming the file and line."""
    import math

    from .errors import RawRecordError

    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != COLUMNS:
        raise RawRecordError(path, f"header must be {COLUMNS}", line=1)
    rows = []
    for i, line in enumerate(lines[1:], start=2):
        f = line.split("\t")
        if len(f) != len(COLUMNS):
            raise RawRecordError(path, f"expected {len(COLUMNS)} fields, found {len(f)}", line=i, record=line)
        try:
            row = {"time": f[0], **{c: float(v) for c, v in zip(COLUMNS[1:4], f[1:4])},
                   **{c: int(v) for c, v in zip(COLUMNS[4:], f[4:])}}
        except ValueError as e:
            raise RawRecordError(path, f"not a load sample ({e})", line=i, record=line) from None
        bad = next((c for c in COLUMNS[1:] if not math.isfinite(row[c]) or row[c] < 0), None)
        if bad is not None:
            raise RawRecordError(path, f"{bad} is {row[bad]}: load averages and CPU times are never negative", line=i, record=line)
        rows.append(row)
    return rows


def summary(path: str | Path) -> dict[str, Any]:
    """Start and end load averages, median and maximum 1-minute load over the samples, and the shares
    of CPU time stolen and busy between the first and last samples."""
    rows = read_series(path)
    first, last = rows[0], rows[-1]
    delta = {c: last[c] - first[c] for c in COLUMNS[4:]}
    total = sum(delta.values())
    busy = total - delta["idle"] - delta["iowait"]
    load1 = [r["load1"] for r in rows]
    return {"file": FILE, "samples": len(rows), "start": first["time"], "end": last["time"],
            "load_start": [first[c] for c in ("load1", "load5", "load15")],
            "load_end": [last[c] for c in ("load1", "load5", "load15")],
            "load1_median": round(statistics.median(load1), 2), "load1_max": round(max(load1), 2),
            "steal_share": round(delta["steal"] / total, 4) if total > 0 else None,
            "busy_share": round(busy / total, 4) if total > 0 else None}
