"""The cold-read model: seconds to read a prompt of N tokens cold, from four timed reads.

The production analysis calls it for every restore to express restored tokens as the
prefill time they stood in for. The table is read by kvtier.records.coldreads (TimedRead and
read_coldreads are re-exported here, their old import path). Rules (stated in the note):
- between timed points: linear interpolation;
- below the first point: a line through the origin and the first point (extrapolated);
- above the last point: the last segment's slope continued (extrapolated).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import RawRecordError
from .records.coldreads import COLUMNS, ColdReads, TimedRead, read_coldreads, read_coldreads_record  # noqa: F401 (old path)
from .records.host import read_host_record
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


def _model(reads: list[TimedRead], above_last: str) -> ColdReadModel:
    return ColdReadModel(np.array([r.prompt_tokens for r in reads]), np.array([r.ttft_s for r in reads]), above_last)


def model_from_csv(path: str | Path, above_last: str = "extend_last_segment") -> ColdReadModel:
    return _model(read_coldreads(path), above_last)


def days_before_period(reads: ColdReads, host_yaml: str | Path) -> int:
    """Whole days from the day the reads were timed to the observation's start (host.yaml); the
    reads must share one day."""
    start = read_host_record(host_yaml).start.date()
    days = {(start - r.timed_on).days for r in reads.reads}
    if len(days) != 1:
        raise RawRecordError(reads.path, f"cold reads were timed on different days ({sorted(days)} days before the period)")
    return days.pop()


def coldread_numbers(table: str | Path, host_yaml: str | Path, above_last: str, writer: Any) -> ColdReadModel:
    """Register the timed points as printed and how long before the period they were timed. Each
    value is computed through writer.compute, so it names the records it read (records.touch)."""
    T = writer.compute
    t = T(read_coldreads_record, table)
    model = _model(list(t.reads), above_last)
    writer.add("coldread.count", T(lambda: len(t.reads)), "count")
    for i in range(len(t.reads)):
        writer.add(f"coldread.p{i + 1}.tokens", T(lambda: int(t.reads[i].prompt_tokens)), "tokens")
        writer.add(f"coldread.p{i + 1}.seconds", T(lambda: float(t.reads[i].ttft_s)), "s")
    writer.add("coldread.days_before_period", T(days_before_period, t, host_yaml), "days")
    writer.add("coldread.seconds_per_token_first", T(lambda: t.reads[0].ttft_s / t.reads[0].prompt_tokens), "s",
               note="slope through the origin used below the first timed point")
    return model
