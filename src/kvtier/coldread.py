"""The cold-read model: seconds to read a prompt of N tokens cold, from four timed reads.

The production analysis calls it for every restore to express restored tokens as the
prefill time they stood in for. Rules (stated in the note):
- between timed points: linear interpolation;
- below the first point: a line through the origin and the first point (extrapolated);
- above the last point: the last segment's slope continued (extrapolated).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from .errors import RawRecordError
from .records.touch import touch
from .observation import read_host

COLUMNS = ["prompt_tokens", "ttft_s", "timed_on", "host", "model", "source"]
ABOVE_LAST_RULES = ("extend_last_segment", "hold_last_rate")


@dataclass(frozen=True)
class ColdReadModel:
    tokens: np.ndarray  # increasing
    seconds: np.ndarray
    above_last: str = "extend_last_segment"

    def __post_init__(self) -> None:
        if len(self.tokens) < 2:
            raise ValueError("the cold-read model needs at least two timed points")
        if np.any(np.diff(self.tokens) <= 0):
            raise ValueError("timed points must have strictly increasing prompt sizes")
        if self.above_last not in ABOVE_LAST_RULES:
            raise ValueError(f"above_last must be one of {ABOVE_LAST_RULES}, not {self.above_last!r}")

    def predict(self, tokens: np.ndarray | float) -> np.ndarray | float:
        """Modelled cold-read seconds for each prompt size (vectorised; scalars stay scalars)."""
        x = np.asarray(tokens, dtype=float)
        xs = np.concatenate([[0.0], self.tokens.astype(float)])
        ys = np.concatenate([[0.0], self.seconds.astype(float)])
        y = np.interp(x, xs, ys)
        hi = x > xs[-1]
        if np.any(hi):
            if self.above_last == "extend_last_segment":
                slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            else:
                slope = ys[-1] / xs[-1]
            y = np.where(hi, ys[-1] + (x - xs[-1]) * slope, y)
        if np.any(x < 0):
            raise ValueError("negative prompt size")
        return float(y) if np.ndim(tokens) == 0 else y

    def extrapolated(self, tokens: np.ndarray | float) -> np.ndarray | bool:
        """True where the model leaves the timed range (below the first or above the last point)."""
        x = np.asarray(tokens, dtype=float)
        out = (x < self.tokens[0]) | (x > self.tokens[-1])
        return bool(out) if np.ndim(tokens) == 0 else out


@dataclass(frozen=True)
class TimedRead:
    """One row of coldreads.csv: a prompt read cold, and how long its first token took."""

    prompt_tokens: int
    ttft_s: float
    timed_on: date
    host: str
    model: str


def read_coldreads(path: str | Path) -> list[TimedRead]:
    """Read and check coldreads.csv (a handful of rows: the csv module, no pandas, so the rule that
    only prints them starts fast); errors name the file and the line."""
    path = Path(path)
    touch(path)
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != COLUMNS:
        raise RawRecordError(path, f"columns must be {COLUMNS}, found {rows[0] if rows else []}", line=1)
    out = []
    for i, row in enumerate(rows[1:], start=2):
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
        out.append(TimedRead(tokens, secs, day, rec["host"], rec["model"]))
    if not out:
        raise RawRecordError(path, "no timed cold reads")
    if any(b.prompt_tokens <= a.prompt_tokens for a, b in zip(out, out[1:])):
        raise RawRecordError(path, "rows must be sorted by strictly increasing prompt_tokens")
    return out


def _model(reads: list[TimedRead], above_last: str) -> ColdReadModel:
    return ColdReadModel(np.array([r.prompt_tokens for r in reads]), np.array([r.ttft_s for r in reads]), above_last)


def model_from_csv(path: str | Path, above_last: str = "extend_last_segment") -> ColdReadModel:
    return _model(read_coldreads(path), above_last)


def coldread_numbers(table: str | Path, host_yaml: str | Path, above_last: str, writer) -> ColdReadModel:
    """Register the timed points as printed and how long before the period they were timed."""
    t = read_coldreads(table)
    model = _model(t, above_last)
    if hasattr(writer, "reading"):
        writer.reading(table)  # the timed points come from the table alone
    writer.add("coldread.count", len(t), "count")
    for i, row in enumerate(t, start=1):
        writer.add(f"coldread.p{i}.tokens", int(row.prompt_tokens), "tokens")
        writer.add(f"coldread.p{i}.seconds", float(row.ttft_s), "s")
    start = read_host(host_yaml)[1].date()
    days = {(start - r.timed_on).days for r in t}
    if len(days) != 1:
        raise RawRecordError(table, f"cold reads were timed on different days ({sorted(days)} days before the period)")
    if hasattr(writer, "reading"):
        writer.reading(table, host_yaml)
    writer.add("coldread.days_before_period", days.pop(), "days")
    if hasattr(writer, "reading"):
        writer.reading(table)
    writer.add("coldread.seconds_per_token_first", t[0].ttft_s / t[0].prompt_tokens, "s",
               note="slope through the origin used below the first timed point")
    return model
