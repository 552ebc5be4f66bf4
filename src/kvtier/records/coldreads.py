"""Cold reads (coldreads.csv): prompts read cold on the production setup, and their first-token times.

A handful of rows, read with the csv module (no pandas, so the rule that only prints them starts
fast), each checked; errors name the file and the line. The model built on them (seconds to read
N tokens cold) is the domain's: kvtier.coldread.ColdReadModel.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ..errors import RawRecordError, csv_rows
from .touch import PathTouching, touch

COLUMNS = ["prompt_tokens", "ttft_s", "timed_on", "host", "model", "source"]


@dataclass(frozen=True)
class TimedRead:
    """One row of coldreads.csv: a prompt read cold, and how long its first token took."""

    prompt_tokens: int
    ttft_s: float
    timed_on: date
    host: str
    model: str
    source: str = ""


@dataclass(frozen=True)
class ColdReads(PathTouching):  # its data touches its file (records.touch)
    """The table as read: its rows in increasing prompt size, and the file."""

    path: str
    reads: tuple[TimedRead, ...]


def read_coldreads_record(path: str | Path) -> ColdReads:
    """Read and check coldreads.csv: the columns, each row's values (positive, finite, an ISO
    date), at least one row, prompt sizes strictly increasing."""
    path = Path(path)
    touch(path)
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv_rows(f, path))  # a csv.Error (a field over the module's limit) names its line
    if not rows or rows[0][1] != COLUMNS:
        raise RawRecordError(path, f"columns must be {COLUMNS}, found {rows[0][1] if rows else []}", line=1)
    out = []
    for i, row in rows[1:]:
        if not row:
            continue
        if len(row) != len(COLUMNS):
            raise RawRecordError(path, f"{len(row)} fields, expected {len(COLUMNS)}", line=i, record=",".join(row))
        rec = dict(zip(COLUMNS, row))
        try:
            tokens = int(rec["prompt_tokens"])
            secs = float(rec["ttft_s"])
            day = date.fromisoformat(rec["timed_on"])
        except ValueError as e:
            raise RawRecordError(path, f"bad value ({e})", line=i, record=",".join(row)) from None
        if tokens <= 0 or not math.isfinite(secs) or secs <= 0:
            raise RawRecordError(path, "prompt_tokens and ttft_s must be positive and finite", line=i, record=",".join(row))
        out.append(TimedRead(tokens, secs, day, rec["host"], rec["model"], rec["source"]))
    if not out:
        raise RawRecordError(path, "no timed cold reads")
    if any(b.prompt_tokens <= a.prompt_tokens for a, b in zip(out, out[1:])):
        raise RawRecordError(path, "rows must be sorted by strictly increasing prompt_tokens")
    return ColdReads(str(path), tuple(out))


def read_coldreads(path: str | Path) -> list[TimedRead]:
    """The rows of coldreads.csv (read_coldreads_record), as a list."""
    return list(read_coldreads_record(path).reads)


def coldreads_csv(reads: list[TimedRead] | tuple[TimedRead, ...]) -> str:
    """coldreads.csv's text for these rows (fields quoted only where they must be)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in reads:
        w.writerow([r.prompt_tokens, repr(float(r.ttft_s)), r.timed_on.isoformat(), r.host, r.model, r.source])
    return buf.getvalue()
