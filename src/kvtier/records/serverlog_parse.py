"""The vLLM server log's lines, parsed in bulk: the ten-second stats line, the KV-transfer report,
the startup lines.

Formats (reference/vllm-telemetry.md; the patterns and names are in kvtier.records.vllm, the
one table of vLLM versions): the record prefix `(Proc pid=N) LEVEL MM-DD HH:MM:SS [file:line]
message`, the stats line of 0.11 to 0.33, and "KV Transfer metrics:" in both key generations
(GPU_to_CPU_total_bytes... up to 0.21, vllm:kv_offload_* from 0.25).

No Python object is made for a line the analysis skips: numpy finds the newlines and the report
markers (each begins with the ']' closing a record prefix), and only report lines are cut out.
Stats lines and transfer prefixes are checked once per digit layout (the line with its digits
turned to '0', see _stats_columns) and their fields read column-wise with numpy; the transfer
bodies go through pandas' C CSV reader (one 'key,value' row per item). Where a bulk step
cannot vouch for its input, lines are re-read one by one to name the bad one. Timestamps carry
no year: it comes from the run's metadata, and a step from December to January moves to the
next year. The reader that cuts a file into chunks and carries state across them is
serverlog_read.
"""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from ..errors import MAX_LINE, RawRecordError, line_too_long
from . import vllm as V
from . import workerlog
from .startup_args import ReprError, python_repr

WORKER_MARKER = workerlog.MARKER.encode()  # kvtier's CPU offload worker, at startup
ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
NUM = V.STATS_NUM
STATS = re.compile(V.STATS_MESSAGE)
PREFIX_TEXT = V.LOG_PREFIX
PREFIX = re.compile(PREFIX_TEXT)
STATS_LINE = re.compile("^" + PREFIX_TEXT + STATS.pattern[1:], re.M)  # whole lines, a chunk's worth at once
STATS_LINE_GROUPS = sorted(STATS_LINE.groupindex, key=STATS_LINE.groupindex.get)
XFER_PREFIX = re.compile(rb"(?:\([^)\n]*? pid=\d+\) )?[A-Z]+ (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[[^\]\n]*")
XFER_MARKER = b"] " + V.TRANSFER_MARKER.encode()
XFER_LINE = re.compile(b"^" + XFER_PREFIX.pattern + re.escape(XFER_MARKER) + rb"([^\n]*)$", re.M)
STARTUP = [(re.compile(pattern), fields) for _, _, pattern, fields, _ in V.STARTUP_LINES]
FACT_MARKERS = (V.ARGS_MARKER.encode(), *(marker.encode() for _, marker, _, _, _ in V.STARTUP_LINES), WORKER_MARKER)
STATS_COLUMNS = ["prompt_tps", "gen_tps", "running", "waiting", "deferred", "preemptions", "kv_usage_pct",
                 "prefix_hit_pct", "external_hit_pct"]

# Both generations of the transfer report, mapped onto one vocabulary (kvtier.records.vllm).
LEGACY_KEYS = V.LOG_LEGACY_KEYS
FLAT_KEYS = V.LOG_FLAT_KEYS
KEYS = {**{k: (v, "legacy") for k, v in LEGACY_KEYS.items()}, **{k: (v, "flat") for k, v in FLAT_KEYS.items()}}
TRANSFER_COLUMNS = ["load_bytes", "load_time", "load_count", "store_bytes", "store_time", "store_count",
                    "lookup_count", "lookup_time", "deferred_count", "deferred_time", "pool_usage"]


def parse_transfer(message: str, path: str, line: int) -> tuple[str, dict[str, float]]:
    """'KV Transfer metrics: k=v, ...' -> (generation, values in the common vocabulary)."""
    values: dict[str, float] = {}
    gens = set()
    for item in message[len(V.TRANSFER_MARKER):].split(", "):
        key, sep, raw = item.partition("=")
        hit = KEYS.get(key)
        if hit is None:
            if sep and key.startswith(V.LOG_SERIES_PREFIX):
                continue  # other offload series (allocation sizes, read/write usage): not used
            what = "is not key=value (truncated line?)" if not sep else "is neither a <=0.21 nor a 0.25+ key"
            raise RawRecordError(path, f"KV Transfer item {item!r} {what}", line=line, record=message)
        name, gen = hit
        try:
            v = float(raw)
        except ValueError:
            raise RawRecordError(path, f"{key}: not a number: {raw!r} (truncated line?)", line=line, record=message) from None
        if not math.isfinite(v):
            raise RawRecordError(path, f"{key} is {raw}: reports must be finite", line=line, record=message)
        if name in values:
            raise RawRecordError(path, f"key {key!r} appears twice", line=line, record=message)
        values[name] = v
        gens.add(gen)
    if len(gens) > 1:
        raise RawRecordError(path, "KV Transfer line mixes the <=0.21 and 0.25+ key generations", line=line, record=message)
    return (gens.pop() if gens else "flat"), values



def _facts(message: str, path: str, line: int) -> dict[str, Any]:
    """The fact a startup line states (kvtier.records.vllm.STARTUP_LINES), by name."""
    if message.startswith(V.ARGS_MARKER):
        try:
            args = python_repr(message[len(V.ARGS_MARKER):])
        except ReprError as e:
            raise RawRecordError(path, f"non-default args is not a Python dict of literals and dataclass reprs ({e}; "
                                       "truncated line?)", line=line, record=message) from None
        if not isinstance(args, dict):
            raise RawRecordError(path, "non-default args is not a dict", line=line, record=message)
        return {"args": args}
    worker = workerlog.worker_facts(message) if message.startswith(workerlog.MARKER) else None
    if worker:
        return {"offload_worker": {**worker, "line": line}}
    for pattern, fields in STARTUP:
        m = pattern.match(message)
        if m:
            return {name: kind(text) for (name, kind), text in zip(fields.items(), m.groups())}  # type: ignore[operator]
    raise RawRecordError(path, "startup line not in a known format (truncated?)", line=line, record=message)


def _times(ts: np.ndarray, lines: np.ndarray, year: int, path: str,
           carry: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, tuple[int, int]]:
    """'MM-DD HH:MM:SS' (bytes, checked by the line regexes) -> datetime64[s], the year from
    metadata; December -> January rolls over (`carry`: the years rolled so far and the month of
    the previous line, so ranges continue where the last one stopped). Computed from the digits
    with numpy; a date that arithmetic cannot vouch for (month 13, 02-30, second 60) goes to
    pandas, which names the line."""
    if not len(ts):
        return np.array([], dtype="datetime64[s]"), carry
    d = np.ascontiguousarray(ts, dtype="S14").view(np.uint8).reshape(-1, 14).astype(np.int64) - 48
    month, day, hour, minute, second = (d[:, i] * 10 + d[:, i + 1] for i in (0, 3, 6, 9, 12))
    prev = np.concatenate([[carry[1]], month[:-1]])
    roll = carry[0] + np.cumsum((prev == 12) & (month == 1))
    after = (int(roll[-1]), int(month[-1]))
    first = ((year + roll - 1970) * 12 + month - 1).astype("datetime64[M]").astype("datetime64[D]")
    days = (((year + roll - 1970) * 12 + month).astype("datetime64[M]").astype("datetime64[D]") - first).astype(np.int64)
    ok = (month >= 1) & (month <= 12) & (day >= 1) & (day <= days) & (hour < 24) & (minute < 60) & (second < 60)
    if not ok.all():
        return _times_by_pandas([t.decode("ascii", "replace") for t in ts.tolist()], lines, year + roll, path), after
    return (first + (day - 1)).astype("datetime64[s]") + (hour * 3600 + minute * 60 + second), after


def _times_by_pandas(ts: list[str], lines: np.ndarray, years: np.ndarray, path: str) -> np.ndarray:
    """The reference conversion: pandas parses each 'YYYY-MM-DD HH:MM:SS' and names a bad one."""
    text = pd.Series(ts)
    parsed = pd.to_datetime(pd.Series(years.astype(str)) + "-" + text, format="%Y-%m-%d %H:%M:%S", errors="coerce")
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RawRecordError(path, f"bad timestamp {text.iloc[i]!r}", line=int(lines[i]))
    return parsed.to_numpy().astype("datetime64[s]")


def _parse_chunk(chunk: bytes, path: str) -> dict[str, Any]:
    """One chunk in bulk, with no Python object for the lines the analysis skips.

    Newlines and report markers are found by numpy (a marker always begins with the ']' that
    closes the record prefix: those are the only candidates); only report lines are cut out. Stats lines and transfer prefixes are checked once per digit layout
    (_stats_columns, _transfer_columns); transfer bodies go through one CSV read (_transfer_bulk).
    """
    if b"\x1b" in chunk:
        chunk = ANSI.sub(b"", chunk)
    if b"\r" in chunk:
        chunk = chunk.replace(b"\r\n", b"\n")
    a = np.frombuffer(chunk, dtype=np.uint8)
    nl = np.flatnonzero(a == 10)
    starts = np.concatenate([np.zeros(1, np.int64), nl + 1])  # line i is chunk[starts[i]:ends[i]]
    ends = np.append(nl, len(chunk))
    long = np.flatnonzero(ends - starts > MAX_LINE)
    if len(long):  # the readers' line cap (errors.MAX_LINE); a longer line is no record line
        raise line_too_long(path, int(long[0]) + 1, MAX_LINE)
    close = np.flatnonzero(a == 93)  # ']': every report marker starts with the one closing the prefix
    s_idx = _lines_of(_followed_by(a, close, b"] Engine "), nl)[0]
    spaced = _followed_by(a, close, b"] ")
    spaced = spaced[spaced + 2 < len(a)]
    spaced = spaced[(a[spaced + 2] - 48) < 10]  # '] 2 Engines Aggregated': a digit after '] ' (rare otherwise)
    agg = [c for c in spaced.tolist() if AGGREGATED.match(chunk, c)]
    if agg:
        s_idx = np.union1d(s_idx, _lines_of(np.array(agg, np.int64), nl)[0])
    x_idx, x_at = _lines_of(_followed_by(a, close, XFER_MARKER), nl)
    out: dict[str, Any] = {"n_lines": len(nl) + (0 if chunk.endswith(b"\n") else 1), "bytes": len(chunk),
                           "last_byte": chunk[-1:]}
    out["stats_line"] = s_idx + 1
    stats = _stats_columns(_cut(chunk, starts, ends, s_idx), s_idx + 1, path)
    out.update({"stats_" + k: v for k, v in stats.items()})
    out["xfer_line"] = x_idx + 1
    xfer, gens = _transfer_columns(chunk, starts[x_idx], x_at, ends[x_idx], x_idx + 1, path)
    out["xfer_gens"] = gens
    out.update({"xfer_" + k: v for k, v in xfer.items()})
    first_report = min([int(starts[idx[0]]) for idx in (s_idx, x_idx) if len(idx)], default=len(chunk))
    args_at = _followed_by(a, close, b"] " + FACT_MARKERS[0]) + 2  # a restart: its args right after the prefix
    out["facts"] = _fact_lines(chunk, nl, first_report, args_at.tolist())
    return out


AGGREGATED = re.compile(rb"\] \d+ Engines Aggregated: ")


def _followed_by(a: np.ndarray, at: np.ndarray, text: bytes) -> np.ndarray:
    """The offsets in `at` where the chunk (as uint8 `a`) holds `text`: one byte compared at a
    time over the candidates still left, so the cost is about one pass over the candidates
    (a regex or split over the chunk made a Python object per hit)."""
    keep = at[at + len(text) <= len(a)]
    for i, byte in enumerate(text):
        if not len(keep):
            break
        keep = keep[a[keep + i] == byte]
    return keep


def _lines_of(offsets: np.ndarray, nl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """0-based numbers of the lines that hold the hits at `offsets` (sorted), and the first hit
    in each; the line of each comes from the newline offsets (a marker holds no newline)."""
    lines, first = np.unique(np.searchsorted(nl, offsets), return_index=True)
    return lines, offsets[first]


def _cut(chunk: bytes, starts: np.ndarray, ends: np.ndarray, idx: np.ndarray | None = None) -> list[bytes]:
    """chunk[starts[i]:ends[i]] for each i (in idx): lines, or parts of lines."""
    if idx is not None:
        starts, ends = starts[idx], ends[idx]
    return [chunk[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


ZERO_DIGITS = bytes.maketrans(b"0123456789", b"0000000000")
STATS_LINE_B = re.compile(STATS_LINE.pattern.encode(), re.M)  # bytes: \d is ASCII only
STATS_NUMERIC = ["pid", "engine", "engines", *STATS_COLUMNS]
MAX_LAYOUTS = 4096  # more distinct layouts than this per chunk: the regex over every line is cheaper


def _stats_columns(lines: list[bytes], numbers: np.ndarray, path: str) -> dict[str, np.ndarray]:
    """Stats lines to columns, each distinct layout matched once instead of every line.

    A line's layout is the line with every digit turned to '0'. STATS_LINE has no literal digit
    and every character class in it holds all ten digits or none, so a line matches iff its
    layout does, with the same group spans: one match per layout vouches for all its lines and
    says where each field sits. Fields are then read column-wise with numpy (_fixed_numbers).
    A chunk holds a few dozen layouts (field widths vary little); with very many, each line
    goes through the regex instead (_stats_columns_by_regex).
    """
    n = len(lines)
    out: dict[str, np.ndarray] = {c: np.full(n, np.nan) for c in STATS_NUMERIC}
    out["ts"] = np.zeros(n, dtype="S14")
    out["device"] = np.zeros(n, dtype="U8")
    if not n:
        return out
    grouped = _layout_groups(lines)
    if grouped is None:
        return _stats_columns_by_regex(lines, numbers, path)
    data, begin, groups = grouped
    for layout, rows in groups:
        m = STATS_LINE_B.fullmatch(layout)
        if m is None:
            _raise_stats_error(lines, numbers, path)
        at = begin[rows]
        a, b = m.span("ts")
        out["ts"][rows] = np.ascontiguousarray(data[at[:, None] + np.arange(a, b)]).view("S14").ravel()
        out["device"][rows] = m.group("device").decode()
        for col in STATS_NUMERIC:
            a, b = m.span(col)
            if a >= 0:
                out[col][rows] = _fixed_numbers(data[at[:, None] + np.arange(a, b)], layout[a:b])
    return out


def _layout_groups(lines: list[bytes]) -> tuple[np.ndarray, np.ndarray, list[tuple[bytes, np.ndarray]]] | None:
    """The lines' bytes joined (as uint8), where each line starts in them, and the lines grouped
    by layout (digits turned to '0'): [(layout, row numbers)]. None when there are more than
    MAX_LAYOUTS layouts, where one regex match per line is the cheaper check."""
    joined = b"\n".join(lines)
    layouts: dict[bytes, int] = {}
    codes = np.fromiter((layouts.setdefault(s, len(layouts)) for s in joined.translate(ZERO_DIGITS).split(b"\n")),
                        np.int64, len(lines))
    if len(layouts) > MAX_LAYOUTS:
        return None
    step = np.fromiter(map(len, lines), np.int64, len(lines)) + 1
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(layouts) + 1))
    groups = [(layout, order[bounds[k]:bounds[k + 1]]) for layout, k in layouts.items()]
    return np.frombuffer(joined, dtype=np.uint8), np.cumsum(step) - step, groups


def _fixed_numbers(field: np.ndarray, layout: bytes) -> np.ndarray:
    """Rows of ASCII bytes laid out alike ('-00.0', '000', 'nan') to floats, equal to float(text):
    the digits make an exact int64, and one IEEE division by an exact power of ten rounds once,
    as a correctly rounded decimal parse does."""
    if layout in (b"nan", b"inf"):
        return np.full(len(field), float(layout))
    digits = [i for i, c in enumerate(layout) if c == 48]
    if len(digits) > 15:  # beyond 2**53: let numpy parse the text
        return np.fromstring(b" ".join(bytes(r) for r in field), sep=" ")
    whole = (field[:, digits].astype(np.int64) - 48) @ (10 ** np.arange(len(digits) - 1, -1, -1, dtype=np.int64))
    dot = layout.find(b".")
    value = whole / (10.0 ** (len(layout) - 1 - dot)) if dot >= 0 else whole.astype(float)
    return -value if layout.startswith(b"-") else value


def _stats_columns_by_regex(lines: list[bytes], numbers: np.ndarray, path: str) -> dict[str, np.ndarray]:
    """The general path: all stats lines matched in one C-level findall."""
    found = STATS_LINE_B.findall(b"\n".join(lines))
    if len(found) != len(lines):
        _raise_stats_error(lines, numbers, path)
    by = dict(zip(STATS_LINE_GROUPS, zip(*found)))
    out = {c: _floats([v.decode() for v in by[c]]) for c in STATS_NUMERIC}
    out["ts"] = np.array(by["ts"], dtype="S14")
    out["device"] = np.array([v.decode() for v in by["device"]], dtype="U8")
    return out


def _raise_stats_error(lines: list[bytes], numbers: np.ndarray, path: str) -> None:
    """Name the first stats line that does not match, and why."""
    for raw, line in zip(lines, numbers.tolist()):
        if STATS_LINE_B.fullmatch(raw) is None:
            text = raw.decode("utf-8", "replace")
            m = PREFIX.match(text)
            if m is None:
                raise RawRecordError(path, "log record without the vLLM prefix '(Proc pid=N) LEVEL MM-DD HH:MM:SS [file:line]'",
                                     line=line, record=text)
            raise RawRecordError(path, "stats line in no known vLLM format (0.11 to 0.33): truncated, or a field "
                                       "this parser does not know", line=line, record=text[m.end():])
    raise AssertionError("stats lines matched one by one but not together")




def _transfer_columns(chunk: bytes, starts: np.ndarray, at: np.ndarray, ends: np.ndarray, numbers: np.ndarray,
                      path: str) -> tuple[dict[str, np.ndarray], set[str]]:
    """All transfer reports of a chunk (line i is chunk[starts[i]:ends[i]], its first marker at
    at[i]): the record prefixes are checked once per digit layout (as in _stats_columns), the
    bodies after the marker are read in bulk (_transfer_bulk), or line by line by
    parse_transfer, which names the bad line, when the bulk reading cannot vouch for them."""
    if not len(starts):
        return {"ts": np.zeros(0, dtype="S14")}, set()
    ts = _transfer_times(_cut(chunk, starts, at))
    if ts is None:  # some prefix is not a vLLM one: find and name the line
        lines = _cut(chunk, starts, ends)
        for raw, line in zip(lines, numbers.tolist()):
            if XFER_LINE.fullmatch(raw) is None:
                raise RawRecordError(path, "KV Transfer line without the vLLM prefix", line=line, record=raw.decode("utf-8", "replace"))
        raise AssertionError("transfer lines matched whole but not by their prefixes")
    bodies = _cut(chunk, at + len(XFER_MARKER), ends)
    cols = _transfer_bulk(bodies)
    if cols is None:
        cols = _transfer_by_line(bodies, numbers, path)
    return {"ts": ts, **cols[0]}, cols[1]


def _transfer_times(prefixes: list[bytes]) -> np.ndarray | None:
    """Timestamps of the transfer lines from their prefixes (the text before "] KV Transfer
    metrics: "), or None if a prefix is not `(Proc pid=N) LEVEL MM-DD HH:MM:SS[.fff] [src`.
    Such a prefix allows one parse only, so a line whose prefix matches matches XFER_LINE with
    the same timestamp and the body after its first marker."""
    ts = np.zeros(len(prefixes), dtype="S14")
    grouped = _layout_groups(prefixes)
    if grouped is None:
        for i, prefix in enumerate(prefixes):
            m = XFER_PREFIX.fullmatch(prefix)
            if m is None:
                return None
            ts[i] = m.group(1)
        return ts
    data, begin, groups = grouped
    for layout, rows in groups:
        m = XFER_PREFIX.fullmatch(layout)
        if m is None:
            return None
        a, b = m.span(1)
        ts[rows] = np.ascontiguousarray(data[begin[rows][:, None] + np.arange(a, b)]).view("S14").ravel()
    return ts


def _transfer_bulk(bodies: list[bytes]) -> tuple[dict[str, np.ndarray], set[str]] | None:
    """The report bodies as columns through pandas' C CSV reader, one `key,value` row per item,
    or None where it might read a body otherwise than parse_transfer (then the caller goes line
    by line): a row without its two fields, a value that is not a finite number, a key outside
    both vocabularies (other vllm: series are skipped, as parse_transfer skips them), a key twice
    in one report, or both key generations. Its numbers equal float(text) (pandas 3's parser is
    correctly rounded; tests/test_production_vllmlog.py compares the two)."""
    n = len(bodies)
    joined = b"\n".join(bodies)
    j = np.frombuffer(joined, dtype=np.uint8)
    items = np.bincount(np.searchsorted(np.flatnonzero(j == 10), np.flatnonzero(j == 44)), minlength=n) + 1
    text = joined.replace(b", ", b"\n").replace(b"=", b",")
    del j, joined
    if b"\r" in text:
        return None
    try:
        rows = pd.read_csv(io.BytesIO(text), header=None, names=["key", "value"], index_col=False, engine="c",
                           quoting=csv.QUOTE_NONE, na_filter=False, skip_blank_lines=False,
                           dtype={"key": "category", "value": np.float64})  # keys coded in C
    except (ValueError, pd.errors.ParserError):
        return None
    if len(rows) != int(items.sum()):
        return None
    values = rows["value"].to_numpy()
    if not np.isfinite(values).all():
        return None
    codes = rows["key"].cat.codes.to_numpy()
    keys = rows["key"].cat.categories
    body = np.repeat(np.arange(n), items)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
    columns: dict[str, np.ndarray] = {}
    gens: set[str] = set()
    for u, key in enumerate(keys.tolist()):
        hit = KEYS.get(key)
        if hit is None:
            if key.startswith(V.LOG_SERIES_PREFIX):
                continue  # other offload series (allocation sizes, read/write usage): not used
            return None
        at = order[bounds[u]:bounds[u + 1]]
        where = body[at]
        if len(where) > 1 and (np.diff(where) <= 0).any():  # a key twice in one report
            return None
        out = np.full(n, np.nan)
        out[where] = values[at]
        columns[hit[0]] = out
        gens.add(hit[1])
    if len(gens) > 1:
        return None
    return columns, gens


def _transfer_by_line(bodies: tuple[bytes, ...], numbers: np.ndarray, path: str) -> tuple[dict[str, np.ndarray], set[str]]:
    """parse_transfer on every report: the reference reading, and the error naming the line."""
    rows, gens, first = [], [], {}
    for body, line in zip(bodies, numbers.tolist()):
        gen, values = parse_transfer(V.TRANSFER_MARKER + body.decode("utf-8", "replace"), path, line)
        rows.append(values)
        if values:
            gens.append(gen)
            first.setdefault(gen, line)
    if len(first) > 1:
        raise RawRecordError(path, "KV Transfer reports mix key generations (<=0.21 and 0.25+)", line=max(first.values()))
    names = set().union(*rows)
    return {c: np.array([r.get(c, np.nan) for r in rows], dtype=float) for c in names}, set(first)


def _fact_lines(chunk: bytes, nl: np.ndarray, first_report: int, args_at: list[int]) -> list[tuple[int, bytes]]:
    """Startup lines (local line number, text), once per marker found. They follow a
    "non-default args" line within a few minutes, before the server reports any traffic, so the
    other markers are only looked for in a window after each of those (and at the start of a
    chunk up to its first report, for a startup block that began before the chunk, or a log whose
    first run began before it); overlapping windows are merged so that no byte is searched twice."""
    windows = [(0, min(len(chunk), 1 << 20, first_report))]
    for pos in args_at:  # where each "non-default args" message starts (found by _parse_chunk)
        lo, hi = max(0, pos - 4096), min(len(chunk), pos + (1 << 20))
        if lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(hi, windows[-1][1]))
        else:
            windows.append((lo, hi))
    hits = set()
    for lo, hi in windows:
        for marker in FACT_MARKERS:
            pos = chunk.find(marker, lo, hi)
            while pos >= 0:
                hits.add(pos)
                pos = chunk.find(marker, pos + 1, hi)
    found = np.array(sorted(hits), dtype=np.int64)
    idx = np.searchsorted(nl, found)  # 0-based line of each hit
    starts = np.where(idx > 0, nl[np.clip(idx - 1, 0, None)] + 1, 0) if len(nl) else np.zeros(len(idx), np.int64)
    ends = np.where(idx < len(nl), nl[np.clip(idx, None, len(nl) - 1)], len(chunk)) if len(nl) else np.full(len(idx), len(chunk))
    return [(i + 1, chunk[a:b]) for i, a, b in zip(idx.tolist(), starts.tolist(), ends.tolist())]


def _floats(values: list[str]) -> np.ndarray:
    """Strings of a regex column to floats in one C call; an absent optional field ('') is NaN."""
    text = " ".join(values) if all(values) else " ".join(v or "nan" for v in values)
    out = np.fromstring(text, sep=" ")
    if out.size != len(values):
        raise ValueError("a stats field is not a number")
    return out
