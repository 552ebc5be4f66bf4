"""Provenance read off the records: which raw files a computation touched.

A record touches its files when its data is read (a Snapshot's series, a server log's
reports, a host fact, a CSV reader's rows); `scope()` collects what is touched inside it. A
value computed in a scope (`traced`, `NumbersWriter.compute`) carries the files it came from:
a number, a dict, a list or a tuple of them, whose items carry the same files, and arithmetic
between traced numbers carries the union. The numbers writer gives each number the files its
value carries, so its provenance is what its computation read, not a list written beside it.
Checks that only refuse a record (the data contract) run `quiet()`: they read without touching.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

_SCOPES: ContextVar[tuple[set[str], ...]] = ContextVar("kvtier_touch_scopes", default=())
_QUIET: ContextVar[bool] = ContextVar("kvtier_touch_quiet", default=False)


@lru_cache(maxsize=None)
def _posix(path: str | Path) -> str:
    """A path as the scopes record it; once per path (a record's fields touch the same few files
    thousands of times, and the name depends on the text alone, never on the file system)."""
    return Path(path).as_posix()


def norm_paths(paths: Iterable[str | Path]) -> set[str]:
    """The paths as the scopes record them (POSIX text, empty ones left out): what a traced value's
    files are compared and joined as (kvtier.records.traced's cells too)."""
    return {_posix(p) for p in paths if p}


def touch(*paths: str | Path) -> None:
    """Record that the files' data was read, in every open scope."""
    scopes = _SCOPES.get()
    if scopes and not _QUIET.get():
        found = norm_paths(paths)
        for s in scopes:
            s |= found


@contextmanager
def scope() -> Iterator[set[str]]:
    """The set of files touched inside the block (nested scopes see the inner ones' too)."""
    mine: set[str] = set()
    token = _SCOPES.set(_SCOPES.get() + (mine,))
    try:
        yield mine
    finally:
        _SCOPES.reset(token)


@contextmanager
def quiet() -> Iterator[None]:
    """Read without touching: checks that can refuse a record but do not make a value."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def is_quiet() -> bool:
    """Whether reads are quiet here (inside `quiet()`): a touch would record nothing, so a reader
    that notes what it reads for a later touch (kvtier.records.traced) need not note it."""
    return _QUIET.get()


def sources_of(value: Any) -> frozenset[str]:
    """The files a traced value carries (an untraced value: none; a record: its own files; a
    table: those in its attrs)."""
    attrs = getattr(value, "attrs", None)
    if isinstance(attrs, dict) and "kvtier_sources" in attrs:
        return frozenset(attrs["kvtier_sources"])
    try:
        return frozenset(object.__getattribute__(value, "_kvtier_sources"))
    except AttributeError:
        return frozenset()


class TracedFloat(float):
    _kvtier_sources: frozenset[str]

    def __new__(cls, value: float, sources: frozenset[str]) -> "TracedFloat":
        x = super().__new__(cls, value)
        x._kvtier_sources = sources
        return x


class TracedInt(int):
    _kvtier_sources: frozenset[str]

    def __new__(cls, value: int, sources: frozenset[str]) -> "TracedInt":
        x = super().__new__(cls, value)
        x._kvtier_sources = sources
        return x


def _arith(name: str) -> Callable[..., Any]:
    def op(self: Any, other: Any) -> Any:
        out = getattr(float if isinstance(self, float) else int, name)(self, other)
        if out is NotImplemented or isinstance(out, bool) or not isinstance(out, (int, float)):
            return out
        return wrap(out, self._kvtier_sources | sources_of(other))
    return op


for _cls in (TracedFloat, TracedInt):
    for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
                  "__floordiv__", "__rfloordiv__", "__mod__", "__pow__"):
        setattr(_cls, _name, _arith(_name))
    _cls.__neg__ = lambda self: wrap(-(float(self) if isinstance(self, float) else int(self)), self._kvtier_sources)  # type: ignore[method-assign]
    _cls.__abs__ = lambda self: wrap(abs(float(self) if isinstance(self, float) else int(self)), self._kvtier_sources)  # type: ignore[method-assign]
    _cls.__reduce__ = lambda self: ((float if isinstance(self, float) else int), (float(self) if isinstance(self, float) else int(self),))  # type: ignore[method-assign]


class TracedDict(dict):
    """A dict whose items carry the files it was computed from."""

    _kvtier_sources: frozenset[str] = frozenset()

    def __getitem__(self, key: Any) -> Any:
        return wrap(super().__getitem__(key), self._kvtier_sources)

    def __iter__(self) -> Iterator[Any]:  # defined here, so {**d} and dict(d) read items through __getitem__
        return super().__iter__()

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def items(self):  # type: ignore[override]
        return [(k, self[k]) for k in self.keys()]

    def values(self):  # type: ignore[override]
        return [self[k] for k in self.keys()]


class TracedList(list):
    """A list whose items carry the files it was computed from, and so does the list (a number
    whose value is a list, empty or not, names them)."""

    _kvtier_sources: frozenset[str] = frozenset()


def wrap(value: Any, sources: Iterable[str] | frozenset[str]) -> Any:
    """`value`, carrying `sources` (added to any it carries already). Numbers, dicts, lists and
    tuples of them are traced; anything else (a table, a string, None, a bool) is returned as is."""
    src = frozenset(sources) | sources_of(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()  # numpy scalar
        if isinstance(value, bool):
            return value
    if isinstance(value, float):
        return TracedFloat(value, src)
    if isinstance(value, int):
        return TracedInt(value, src)
    if isinstance(value, dict):
        d = TracedDict(value)
        d._kvtier_sources = src
        return d
    if isinstance(value, list):
        out = TracedList(wrap(v, src) for v in value)
        out._kvtier_sources = src
        return out
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return type(value)(wrap(v, src) for v in value)
    attrs = getattr(value, "attrs", None)
    if isinstance(attrs, dict):  # a pandas table: its files go in its attrs (kept by its copies)
        attrs["kvtier_sources"] = sorted(src)
    elif src and hasattr(value, "__dict__") and not isinstance(value, type):  # a model, a derived record
        try:
            object.__setattr__(value, "_kvtier_sources", src)
        except (AttributeError, TypeError):
            pass
    return value


def traced(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), its result carrying the files touched by the call and those its
    traced arguments carry."""
    with scope() as seen:
        out = fn(*args, **kwargs)
    carried = frozenset(seen).union(*(sources_of(a) for a in (*args, *kwargs.values())))
    return wrap(out, carried)


class Touching:
    """A record (or a value derived from records) whose public attributes touch its files."""

    _kvtier_sources: frozenset[str] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and _SCOPES.get():
            touch(*object.__getattribute__(self, "_kvtier_sources"))
        return object.__getattribute__(self, name)


def carry(obj: Any, *paths: str | Path) -> Any:
    """Give a Touching object (a frozen dataclass too) the files it was derived from."""
    object.__setattr__(obj, "_kvtier_sources", frozenset(norm_paths(paths)))
    return obj


class PathTouching(Touching):
    """A record read from one file, named by its `path` attribute."""

    @property
    def _kvtier_sources(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(norm_paths([object.__getattribute__(self, "path")]))


class TouchingDict(dict):
    """A dict whose items touch the files they were computed from when read (`files`: key ->
    paths; `default`: paths of any other key), so a value derived from a record keeps naming it."""

    def __init__(self, data: Any = (), files: dict[Any, Iterable[str | Path]] | None = None,
                 default: Iterable[str | Path] = ()):
        super().__init__(data)
        self._files = {k: tuple(norm_paths(v)) for k, v in (files or {}).items()}
        self._default = tuple(norm_paths(default))

    def __getitem__(self, key: Any) -> Any:
        touch(*self._files.get(key, self._default))
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default


class RowSources:
    """A table's files by row key (touching_rows), never changed once made. pandas deep-copies a
    table's attrs into every table derived from it (each selection, each column read); being
    read-only, this one is shared by the copies instead of copied file name by file name."""

    __slots__ = ("key", "sources")

    def __init__(self, key: str, sources: dict[Any, frozenset[str]]):
        self.key = key
        self.sources = sources

    def __deepcopy__(self, memo: dict[int, Any]) -> "RowSources":
        return self

    def __eq__(self, other: object) -> bool:  # pandas' concat keeps attrs that are equal across its inputs
        return isinstance(other, RowSources) and (self.key, self.sources) == (other.key, other.sources)

    __hash__ = None  # type: ignore[assignment]


def touching_rows(table: Any, key: str, sources: dict[Any, frozenset[str]]) -> Any:
    """A table whose rows by `key` were computed from different files: their files in its attrs
    (`kvtier_row_sources`), read back by `rows_of`."""
    table.attrs["kvtier_row_sources"] = RowSources(key, {k: frozenset(v) for k, v in sources.items()})
    return table


def rows_of(table: Any, *values: Any) -> Any:
    """The rows of `table` whose key is one of `values` (all rows: none given), touching their files."""
    meta = table.attrs.get("kvtier_row_sources") or RowSources(None, {})  # type: ignore[arg-type]
    wanted = list(values) or list(meta.sources)
    for v in wanted:
        touch(*meta.sources.get(v, ()))
    return table if not values else table[table[meta.key].isin(wanted)]
