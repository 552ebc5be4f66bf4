"""TracedFrame.derive gives each derived cell the files fn would touch on that row alone.

derive notes which columns a row-wise fn reads in one call over the whole table and reads each
row's files off those columns' cells; where fn reads a column of other rows (a selection), it
evaluates fn row by row. Both must give exactly what fn(table.iloc[[i]]) touches, row by row.
"""

from __future__ import annotations

import pandas as pd
import pytest

from kvtier.records.touch import quiet, scope, touch
from kvtier.records.traced import SRC, TracedFrame, _read_by


def _table() -> TracedFrame:
    frame = pd.DataFrame({"a": [1, 2, 0, 4], "b": [5, 0, 7, 8], "c": [1, 1, 1, 1]})
    return TracedFrame.of(frame, {"a": [{"a0"}, {"a1"}, {"a2", "./s/a2"}, {"a3"}], "b": {"b.csv"},
                                  "c": [{"c0"}, set(), {"c2"}, {"c3"}]})


def _per_row(t: TracedFrame, fn) -> list[frozenset[str]]:
    return [_read_by(fn, t.iloc[[i]]) for i in range(len(t))]


FNS = {
    "columns": lambda t: t.a + t["b"],
    "attribute and item, read twice": lambda t: (t.a * t.a) > t["c"],
    "a touch besides the table": lambda t: (touch("run.yaml"), t.b)[1] > 0,
    "a column list, then its column": lambda t: t[["a", "c"]].c == 1,
    "a copy of the table": lambda t: t.copy().a > 1,
    "a selection of rows (row by row)": lambda t: t.a + t[t.a > 1].c.reindex(t.index, fill_value=0),
    "a quiet read": lambda t: (lambda q: t.a + q)(_quiet_b(t)),
}


def _quiet_b(t: TracedFrame) -> pd.Series:
    with quiet():
        return t.b


@pytest.mark.parametrize("name", list(FNS))
def test_derived_cells_name_what_each_row_alone_reads(name: str) -> None:
    t, fn = _table(), FNS[name]
    out = t.derive("d", fn)
    assert list(out["d"]) == list(fn(t).to_numpy())
    assert list(out[SRC + "d"]) == _per_row(t, fn)


def test_derive_touches_what_the_value_read_and_quiet_gives_no_files() -> None:
    t = _table()
    with scope() as seen:
        t.derive("d", FNS["a touch besides the table"])
    assert seen == {"b.csv", "run.yaml"}
    with quiet():
        out = t.derive("d", FNS["columns"])
    assert list(out[SRC + "d"]) == [frozenset()] * 4
    assert len(t.iloc[[]].derive("d", FNS["columns"])) == 0
