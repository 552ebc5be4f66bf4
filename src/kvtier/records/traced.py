"""Record data that touches its file when read, and tables whose cells remember their files.

A YAML or JSON Lines record is a tree of dicts and lists: `TouchingMapping` wraps it so that
reading an item touches the file it came from (records.touch), as a Snapshot's series do.
Structure (which keys exist, how many items) does not touch: it says what the record is, not
what a value is. `cell(fn, *args)` computes one value and gives it the files its reading touched
(records.touch.traced). `TracedFrame` is a pandas table built from rows of such cells: each
column keeps its cells' files beside it (hidden `__src__<column>` columns that follow every
selection, sort and concat), and reading a column touches the files of the rows selected. So a
number computed from a table's rows inside `NumbersWriter.compute` names exactly the files of
those rows and columns it read: a selection made before the computation is a check, not a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd

from .touch import is_quiet, norm_paths, scope, sources_of, touch, traced, wrap

SRC = "__src__"


def _wrap(value: Any, path: str) -> Any:
    if isinstance(value, dict):
        return TouchingMapping(value, path)
    if isinstance(value, list):
        return TouchingList(value, path)
    return value


class _View:
    """A read-only view of part of a record read from `path`."""

    __slots__ = ("_data", "_path")

    def __init__(self, data: Any, path: str | Path):
        self._data = data
        self._path = Path(path).as_posix()

    def __eq__(self, other: object) -> bool:
        return plain(self) == plain(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r}, {self._path!r})"


class TouchingMapping(_View, Mapping):
    """A record's dict: reading an item touches its file."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        value = self._data[key]
        touch(self._path)
        return _wrap(value, self._path)

    def __contains__(self, key: object) -> bool:  # structure: does not touch
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    __eq__ = _View.__eq__
    __hash__ = None  # type: ignore[assignment]


class TouchingList(_View, Sequence):
    """A record's list: reading an item (or iterating, or counting them) touches its file."""

    __slots__ = ()

    def __getitem__(self, i: Any) -> Any:
        touch(self._path)
        if isinstance(i, slice):
            return TouchingList(self._data[i], self._path)
        return _wrap(self._data[i], self._path)

    def __len__(self) -> int:
        touch(self._path)  # how many codes, conversations: a count read off the record
        return len(self._data)

    __eq__ = _View.__eq__
    __hash__ = None  # type: ignore[assignment]


def plain(value: Any) -> Any:
    """The record's own dicts and lists behind a touching view (for writing and comparing); does not touch."""
    if isinstance(value, (TouchingMapping, TouchingList)):
        return value._data
    return value


def cell(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), carrying the files its reading touched and those its traced arguments carry."""
    return traced(fn, *args)


def read(fn: Callable[..., Any], *args: Any) -> tuple[Any, frozenset[str]]:
    """fn(*args) and the files it read: those touched, those its arguments and its value carry
    (a verdict, a bool, carries none of its own: its files are returned beside it)."""
    with scope() as seen:
        out = fn(*args)
    return out, frozenset(seen).union(sources_of(out), *(sources_of(a) for a in args))


class Row(dict):
    """One row of a TracedFrame: its values, and beside each (`src`) the files it was read from."""

    def __init__(self) -> None:
        super().__init__()
        self.src: dict[str, frozenset[str]] = {}

    def put(self, key: str, fn: Callable[..., Any], *args: Any, after: tuple[str, ...] = ()) -> Any:
        """row[key] = fn(*args), with the files it read and those of the row's cells `after`
        (verdicts it builds on); returns the value carrying them."""
        value, files = read(fn, *args)
        files = files.union(*(self.src.get(k, frozenset()) for k in after))
        self[key] = value
        self.src[key] = files
        return wrap(value, files)


class TracedFrame(pd.DataFrame):
    """A table whose column reads touch the files of the selected rows' cells (see the module)."""

    _metadata: list[str] = []

    @property
    def _constructor(self) -> Callable[..., "TracedFrame"]:
        return TracedFrame

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]], columns: list[str] | None = None) -> "TracedFrame":
        """Rows of cells (traced values) -> values as pandas makes them, each column's files beside it."""
        rows = list(rows)
        cols = columns or list(dict.fromkeys(k for r in rows for k in r))
        values = pd.DataFrame([{k: _untraced(r.get(k)) for k in cols} for r in rows], columns=cols)
        srcs = {SRC + k: [r.src[k] if isinstance(r, Row) and k in r.src else frozenset(sources_of(r.get(k))) for r in rows]
                for k in cols}
        return cls(pd.concat([values, pd.DataFrame(srcs, index=values.index, dtype=object)], axis=1))

    @classmethod
    def of(cls, frame: pd.DataFrame, files: dict[str, Any]) -> "TracedFrame":
        """`frame`'s values as they are (dtypes kept), each column's files beside them: per column
        one set for every row, or a sequence of sets, one per row (what `read` returned)."""
        out = cls(frame.copy())
        for col, f in files.items():
            cells = [frozenset(f)] * len(frame) if isinstance(f, (set, frozenset)) else [frozenset(x) for x in f]
            out[SRC + col] = pd.Series(cells, index=frame.index, dtype=object)
        return out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and key in self.columns and not key.startswith(SRC):
            src = SRC + key
            if src in self.columns:
                reads = _READS.get()
                if reads is None:
                    touch(*_union(super().__getitem__(src)))
                else:  # derive's files by row: the column is noted, its cells are read off per row
                    reads.note(self, key)
            return super().__getitem__(key)
        if isinstance(key, list) and all(isinstance(k, str) for k in key):  # the cells' files go with them
            key = key + [SRC + k for k in key if SRC + k in self.columns and SRC + k not in key]
        return super().__getitem__(key)

    def files(self, column: str) -> frozenset[str]:
        """The files of a column's cells, without touching them."""
        src = SRC + column
        return frozenset(_union(super().__getitem__(src))) if src in self.columns else frozenset()

    def derive(self, column: str, fn: Callable[["TracedFrame"], Any]) -> "TracedFrame":
        """A copy with `column` = fn(table), each cell carrying the files fn read for its row:
        what fn(that row alone) would touch. fn is row-wise (its value is one per row, in order),
        so it reads the same columns of every row: one more call of fn over the whole table notes
        which, and each row's files are its cells of those columns, with whatever else fn touched.
        Where fn read a column of other rows than the table's (a selection, a regrouping), fn is
        called on each row alone instead."""
        out = self.copy()
        out[column] = fn(self).to_numpy() if len(self) else []
        out[SRC + column] = pd.Series(self._files_by_row(fn), index=self.index, dtype=object)
        return out

    def _files_by_row(self, fn: Callable[["TracedFrame"], Any]) -> list[frozenset[str]]:
        if not len(self):
            return []
        reads = _ColumnReads(self)
        token = _READS.set(reads)
        try:
            with scope() as direct:  # what fn touched besides the table's cells
                fn(self)
        finally:
            _READS.reset(token)
        if reads.other_rows:
            return [_read_by(fn, self.iloc[[i]]) for i in range(len(self))]
        direct = frozenset(direct)
        cells = [super(TracedFrame, self).__getitem__(SRC + c).tolist() for c in reads.columns]
        normed: dict[frozenset[str], frozenset[str]] = {}  # cells repeat (one set per file): normalise each once

        def norm(c: Any) -> frozenset[str]:
            if not isinstance(c, frozenset):
                return frozenset()
            if c not in normed:
                normed[c] = frozenset(norm_paths(c))
            return normed[c]
        return [direct.union(*(norm(col[i]) for col in cells)) for i in range(len(self))]

    def values_only(self) -> pd.DataFrame:
        """The table as plain pandas, without the files (what the tidy CSVs hold)."""
        return pd.DataFrame(super().__getitem__([c for c in self.columns if not str(c).startswith(SRC)]))


class _ColumnReads:
    """The traced columns a derive's fn reads of its table (in the order first read), and whether
    it read a column whose rows or cells are not the table's own (then: row by row)."""

    def __init__(self, table: TracedFrame):
        self.table = table
        self.columns: list[str] = []
        self.other_rows = False

    def note(self, frame: TracedFrame, key: str) -> None:
        if is_quiet():  # read quietly: a touch here would record nothing
            return
        if key not in self.columns:
            self.columns.append(key)
        if frame is self.table:
            return
        src, table = SRC + key, self.table
        mine = pd.DataFrame.__getitem__(table, src) if src in table.columns else None
        theirs = pd.DataFrame.__getitem__(frame, src)
        if mine is None or not frame.index.equals(table.index) or any(a is not b for a, b in zip(theirs.tolist(), mine.tolist())):
            self.other_rows = True


_READS: ContextVar[_ColumnReads | None] = ContextVar("kvtier_traced_reads", default=None)


def _read_by(fn: Callable[[TracedFrame], Any], row: TracedFrame) -> frozenset[str]:
    with scope() as seen:
        fn(row)
    return frozenset(seen)


def _untraced(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, float):
        return float(v)
    if isinstance(v, int):
        return int(v)
    return v


def _union(cells: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for c in cells:
        if isinstance(c, frozenset):
            out |= c
    return out
