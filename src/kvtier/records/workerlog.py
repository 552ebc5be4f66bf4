"""The lines kvtier's CPU offload worker writes into the server log: its startup line, its job lines.

The worker (serving/vllm_plugin/kvtier_cpu_offload/worker.py) prints, once per server, the pool
as vLLM's own page sizes give it:

    kvtier_cpu_offload: bytes_per_offloaded_block=3276800 bytes_per_device_block=131072 blocks_per_chunk=25 host_chunks=20

and, when asked to (`kvtier_log_jobs`), one line per copy job as it finishes it:

    kvtier_cpu_offload: load job 17: 124 blocks, 16252928 bytes, 0.004100 s

The harness, the live lab, the production pipeline and the sweep all need some of it; read here,
written here (the replica generators and the tests), and no heavy imports, so the log parser can
import it cheaply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .touch import PathTouching, touch

if TYPE_CHECKING:  # pandas is imported where a table is made
    import pandas as pd

MARKER = "kvtier_cpu_offload: bytes_per_offloaded_block="
LINE = re.compile(re.escape(MARKER) + r"\d+[^\n]*")
FIELD = re.compile(r"(\w+)=(\d+)\b")
STARTUP_FIELDS = ("bytes_per_offloaded_block", "bytes_per_device_block", "blocks_per_chunk", "host_chunks")
# job lines: the run contract's reading (any kind; the time may be cut) and the ground truth's (loads)
JOB = re.compile(r"kvtier_cpu_offload: (load|store) job (\d+): (\d+) blocks, (\d+) bytes, (\S+) s\s*$")
JOB_MARK = re.compile(r"kvtier_cpu_offload: (load|store) job ")
LOAD_JOB = re.compile(r"kvtier_cpu_offload: load job (\d+): (\d+) blocks, (\d+) bytes, ([\d.]+) s")
LOAD_JOB_MARK = "kvtier_cpu_offload: load job "


@dataclass(frozen=True)
class WorkerLine(PathTouching):  # its data touches its file (records.touch)
    """The worker's startup line: its numeric fields, the log and the line it was read from."""

    path: str
    line: int
    fields: dict[str, int]

    @property
    def bytes_per_offloaded_block(self) -> int | None:
        return self.fields.get("bytes_per_offloaded_block")

    @property
    def bytes_per_device_block(self) -> int | None:
        return self.fields.get("bytes_per_device_block")

    @property
    def pool_blocks(self) -> int | None:
        """Server blocks the pool holds (chunks x blocks per chunk), when the line gives both."""
        f = self.fields
        return f["host_chunks"] * f["blocks_per_chunk"] if "host_chunks" in f and "blocks_per_chunk" in f else None


def worker_facts(text: str) -> dict[str, int] | None:
    """The numeric fields of the first startup line in `text` (bytes_per_offloaded_block,
    bytes_per_device_block, blocks_per_chunk, host_chunks: those it prints), by name; None if
    there is no such line."""
    m = LINE.search(text)
    return {k: int(v) for k, v in FIELD.findall(m.group(0))} if m else None


def read_worker_line(path: str | Path) -> WorkerLine | None:
    """The first startup line of a server log as a record; None for a log without one (or not
    written yet, or unreadable: the harness asks while the server starts)."""
    from ..errors import RawRecordError, capped_lines

    try:
        for lineno, text, _ in capped_lines(path, errors="replace"):  # lines capped: errors.MAX_LINE
            if MARKER in text:
                found = worker_facts(text)
                if found is not None:
                    return WorkerLine(str(path), lineno, found)
    except (OSError, RawRecordError):
        return None
    return None


def worker_facts_from_log(path: str | Path) -> dict[str, int] | None:
    """worker_facts of a server log; None for a log without the line (or not written yet)."""
    rec = read_worker_line(path)
    return None if rec is None else dict(rec.fields)


def read_load_jobs(path: str | Path) -> "pd.DataFrame":
    """Every load job line of a server log, in file order: line, job, blocks, bytes, seconds."""
    import pandas as pd

    from ..errors import RawRecordError, capped_lines

    touch(path)
    rows = []
    for i, text, _ in capped_lines(path, errors="replace"):  # lines capped: errors.MAX_LINE
        if LOAD_JOB_MARK in text:
            m = LOAD_JOB.search(text)
            if m is None:
                raise RawRecordError(path, "a kvtier_cpu_offload load-job line not in the format "
                                           "'load job N: B blocks, BYTES bytes, S s' (truncated?)", line=i)
            rows.append((i, int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))))
    return pd.DataFrame(rows, columns=["line", "job", "blocks", "bytes", "seconds"])


# ---------------------------------------------------------------- writers

def startup_message(fields: dict[str, int | str]) -> str:
    """The startup line's message: STARTUP_FIELDS first, in the worker's order, then the rest."""
    order = [k for k in STARTUP_FIELDS if k in fields] + [k for k in fields if k not in STARTUP_FIELDS]
    return "kvtier_cpu_offload: " + " ".join(f"{k}={fields[k]}" for k in order)


def job_message(kind: str, job: int, blocks: int, nbytes: int, seconds: float) -> str:
    """A job line's message, as the worker writes it (%.6f seconds)."""
    return f"kvtier_cpu_offload: {kind} job {job}: {blocks} blocks, {nbytes} bytes, {seconds:.6f} s"
