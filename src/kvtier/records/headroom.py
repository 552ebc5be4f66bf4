"""Headroom tests (headroom.csv): offload-pool sizes tried on a host, the RAM and /dev/shm left, and
whether the server started.

One row per attempt; read into typed rows (and the table the production analysis takes), and
written by the replica generator through `headroom_csv`. Errors name the file and the line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import RawRecordError
from .touch import PathTouching, touch

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ["host", "date", "pool_gib", "free_ram_gib", "shm_total_gib", "started", "note"]


@dataclass(frozen=True)
class HeadroomTest:
    """One attempt: a pool of `pool_gib` on `host`; free RAM and /dev/shm where measured (else None)."""

    host: str
    date: str
    pool_gib: float
    free_ram_gib: float | None
    shm_total_gib: float | None
    started: bool
    note: str = ""


@dataclass(frozen=True, eq=False)
class Headroom(PathTouching):  # its data touches its file (records.touch)
    """headroom.csv as read: the table (the analysis's view) and the file."""

    path: str
    table: "pd.DataFrame"

    def tests(self) -> list[HeadroomTest]:
        """The rows, typed."""
        def opt(v: float) -> float | None:
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

        t = self.table
        return [HeadroomTest(str(r.host), str(r.date), float(r.pool_gib), opt(r.free_ram_gib), opt(r.shm_total_gib),
                             r.started == "yes", "" if not isinstance(r.note, str) else r.note)
                for r in t.itertuples(index=False)]


def read_headroom_record(path: str | Path) -> Headroom:
    """Read and check headroom.csv: its columns, `started` yes or no, every pool positive."""
    import pandas as pd

    touch(path)
    try:
        df = pd.read_csv(path, dtype={"host": str, "note": str}, keep_default_na=True)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:  # pandas names the line, not the file
        raise RawRecordError(path, f"not a CSV table ({e})") from None
    if list(df.columns) != COLUMNS:
        raise RawRecordError(path, f"columns must be {COLUMNS}, found {list(df.columns)}", line=1)
    bad = ~df["started"].isin(["yes", "no"])
    if bad.any():
        raise RawRecordError(path, "started must be yes or no", line=int(np.flatnonzero(bad)[0]) + 2)
    if (df["pool_gib"] <= 0).any() or df["pool_gib"].isna().any():
        raise RawRecordError(path, "pool_gib must be positive", line=int(np.flatnonzero(~(df["pool_gib"] > 0))[0]) + 2)
    return Headroom(str(path), df)


def read_headroom(path: str | Path) -> "pd.DataFrame":
    """headroom.csv as the table the production analysis takes (read_headroom_record)."""
    return read_headroom_record(path).table


def headroom_csv(tests: list[HeadroomTest]) -> str:
    """headroom.csv's text: numbers in their shortest form (%g), an absent one empty."""
    def num(v: float | None) -> str:
        return "" if v is None else f"{v:g}"

    rows = [",".join(COLUMNS)]
    for t in tests:
        rows.append(",".join([t.host, t.date, num(t.pool_gib), num(t.free_ram_gib), num(t.shm_total_gib),
                              "yes" if t.started else "no", t.note]))
    return "\n".join(rows) + "\n"
