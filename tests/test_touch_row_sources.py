"""A table's row files (records.touch.touching_rows) are read-only: the tables pandas derives
from it share them instead of deep-copying every file name, and still touch them by row."""

import copy
import pickle

import pandas as pd

from kvtier.records.touch import rows_of, scope, touching_rows


def test_derived_tables_share_the_row_files_and_touch_them() -> None:
    t = touching_rows(pd.DataFrame({"size": [1, 2, 2], "v": [0.1, 0.2, 0.3]}), "size",
                      {1: frozenset({"raw/a"}), 2: frozenset({"raw/b", "raw/c"})})
    meta = t.attrs["kvtier_row_sources"]
    assert copy.deepcopy(t.attrs)["kvtier_row_sources"] is meta
    assert t[["v"]].attrs["kvtier_row_sources"] is meta and t.iloc[:1].attrs["kvtier_row_sources"] is meta
    assert pd.concat([t, t]).attrs["kvtier_row_sources"] == meta  # concat keeps attrs equal across its inputs
    assert pickle.loads(pickle.dumps(meta)) == meta
    with scope() as seen:
        got = rows_of(t, 2)
    assert seen == {"raw/b", "raw/c"} and got["v"].tolist() == [0.2, 0.3]
    with scope() as seen:
        assert rows_of(t.iloc[1:]) is not None
    assert seen == {"raw/a", "raw/b", "raw/c"}
