"""The cold-read model: seconds to read a prompt of N tokens cold, from four timed reads.

The production analysis calls it for every restore to express restored tokens as the
prefill time they stood in for. Rules (stated in the note):
- between timed points: linear interpolation;
- below the first point: a line through the origin and the first point (extrapolated);
- above the last point: the last segment's slope continued (extrapolated).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import RawRecordError
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


def read_coldreads(path: str | Path) -> pd.DataFrame:
    """Read and check coldreads.csv; errors name the file and the line."""
    path = Path(path)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if list(df.columns) != COLUMNS:
        raise RawRecordError(path, f"columns must be {COLUMNS}, found {list(df.columns)}", line=1)
    out = []
    for i, row in enumerate(df.itertuples(index=False), start=2):
        try:
            tokens = int(row.prompt_tokens)
            secs = float(row.ttft_s)
            day = date.fromisoformat(row.timed_on)
        except ValueError as e:
            raise RawRecordError(path, f"bad value ({e})", line=i, record=",".join(row)) from None
        if tokens <= 0 or not np.isfinite(secs) or secs <= 0:
            raise RawRecordError(path, "prompt_tokens and ttft_s must be positive and finite", line=i, record=",".join(row))
        out.append({"prompt_tokens": tokens, "ttft_s": secs, "timed_on": day, "host": row.host, "model": row.model})
    table = pd.DataFrame(out)
    if table.empty:
        raise RawRecordError(path, "no timed cold reads")
    if not table["prompt_tokens"].is_monotonic_increasing or table["prompt_tokens"].duplicated().any():
        raise RawRecordError(path, "rows must be sorted by strictly increasing prompt_tokens")
    return table


def model_from_csv(path: str | Path, above_last: str = "extend_last_segment") -> ColdReadModel:
    t = read_coldreads(path)
    return ColdReadModel(t["prompt_tokens"].to_numpy(), t["ttft_s"].to_numpy(), above_last)


def coldread_numbers(table: str | Path, host_yaml: str | Path, above_last: str, writer) -> ColdReadModel:
    """Register the timed points as printed and how long before the period they were timed."""
    t = read_coldreads(table)
    model = ColdReadModel(t["prompt_tokens"].to_numpy(), t["ttft_s"].to_numpy(), above_last)
    if hasattr(writer, "reading"):
        writer.reading(table)  # the timed points come from the table alone
    writer.add("coldread.count", len(t), "count")
    for i, row in enumerate(t.itertuples(index=False), start=1):
        writer.add(f"coldread.p{i}.tokens", int(row.prompt_tokens), "tokens")
        writer.add(f"coldread.p{i}.seconds", float(row.ttft_s), "s")
    start = read_host(host_yaml)[1].date()
    days = {(start - d).days for d in t["timed_on"]}
    if len(days) != 1:
        raise RawRecordError(table, f"cold reads were timed on different days ({sorted(days)} days before the period)")
    if hasattr(writer, "reading"):
        writer.reading(table, host_yaml)
    writer.add("coldread.days_before_period", days.pop(), "days")
    if hasattr(writer, "reading"):
        writer.reading(table)
    writer.add("coldread.seconds_per_token_first", float(t["ttft_s"].iloc[0] / t["prompt_tokens"].iloc[0]), "s",
               note="slope through the origin used below the first timed point")
    return model
