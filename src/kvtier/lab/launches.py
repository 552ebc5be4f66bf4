"""The lab on vLLM's CPU build measured as a series of launches: every launch one setup (vLLM alone,
LMCache with room for all documents, LMCache too small) in a folder of its own, the setups
interleaved (kvtier.lab.cyclic --launches). Each launch is read as a live run (kvtier.lab.live):
tokens by source from the counters per request, predicted by the simulator from the server's
configuration alone. Across the launches of a setup the tokens should repeat exactly (the
experiment is deterministic); times vary, so their medians carry the spread beside them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..errors import RawRecordError
from ..numbers import traced_adder
from ..records.labrun import read_lab_run, read_run
from ..records.traced import Row, TracedFrame, read
from . import live

SETUPS = ("vllm", "lmcache", "lmcache-small")
PASS_NAMES = live.PASS_NAMES
TOKEN_COLUMNS = ("gpu_tokens", "cpu_tokens", "computed_tokens")


def launch_dirs(root: str | Path, pinned: Iterable[str] | None = None) -> list[Path]:
    """The launch folders under root (those with a run.yaml), in the order they started. With
    `pinned` (the manifest's files), only launches whose run.yaml is pinned: a launch still
    running, or not yet pinned, is not a record."""
    root = Path(root)
    keep = None if pinned is None else {Path(p).as_posix() for p in pinned}
    found = []
    for d in sorted(p for p in root.iterdir() if (p / "run.yaml").is_file()) if root.is_dir() else []:
        if keep is not None and (d / "run.yaml").as_posix() not in keep:
            continue
        meta = read_run(d / "run.yaml")
        if "started_utc" not in meta:
            raise RawRecordError(d / "run.yaml", "a launch without started_utc: its place in the series is unknown")
        found.append((str(meta["started_utc"]), d))
    if not found:
        raise RawRecordError(root, "no launch folder (with a run.yaml) under it")
    return [d for _, d in sorted(found)]


def launch_table(root: str | Path, pinned: Iterable[str] | None = None) -> TracedFrame:
    """Every request of every launch: measured and predicted tokens by source, the launch beside it
    (its cells naming the launch's run.yaml, as every other cell names the files it was read from)."""
    frames = []
    for k, d in enumerate(launch_dirs(root, pinned), 1):
        run = read_lab_run(d)
        load, files = read(lambda: run.meta.get("load") or {})  # noqa: B023 (called here)
        t = live.predict(d, live.request_sources(d, run), run=run)  # the launch read once
        t = t.assign(launch=d.name, launch_index=k, load_start=(load.get("start") or [None])[0],
                     load_end=(load.get("end") or [None])[0])
        frames.append(TracedFrame.of(t, {c: files for c in LAUNCH_COLUMNS}))
    return pd.concat(frames, ignore_index=True)


LAUNCH_COLUMNS = ("launch", "launch_index", "load_start", "load_end")
PER_LAUNCH = TOKEN_COLUMNS + tuple("pred_" + c for c in TOKEN_COLUMNS)  # summed per launch and pass


def _per_launch(table: TracedFrame) -> TracedFrame:
    """One row per (setup, launch, pass) of the document requests: token sums and the median TTFT,
    each cell naming the files of the cells it was computed from."""
    docs = table[table.phase == "doc"]
    rows = []
    for _, q in docs.groupby(["setup", "launch", "pass"], sort=False):
        r = Row()
        for col in ("setup", "launch", "pass"):
            r.put(col, lambda: q[col].iloc[0])  # noqa: B023
        for col in PER_LAUNCH:
            r.put(col, lambda: q[col].sum())  # noqa: B023
        r.put("ttft_p50", lambda: q["ttft_ms"].median())  # noqa: B023
        r.put("docs_from_cpu", lambda: int((q["cpu_tokens"] > 0).sum()))  # noqa: B023
        rows.append(r)
    return TracedFrame.from_rows(rows)


def _repeating(g: TracedFrame, first: TracedFrame) -> int:
    """Requests of g whose tokens by source equal those of the same request (pass, order) in the first launch."""
    key, cols = ["pass", "order"], list(TOKEN_COLUMNS)
    plain = lambda t: pd.DataFrame({c: t[c] for c in key + cols})  # noqa: E731 (reads each column: touches its cells)
    same = plain(g).join(plain(first).set_index(key), on=key, suffixes=("", "_first"))
    return int((same[cols].to_numpy() == same[[c + "_first" for c in cols]].to_numpy()).all(axis=1).sum())


def _within_setup(add: Any, p: str, per: TracedFrame) -> None:
    """A setup's own first pass over its second and reverse pass, launch by launch (one server, one
    time, one load: the ratio a tier's gain is fairly stated in), the median over launches with
    its range. `per`: _per_launch's rows of one setup."""
    def ratios(later: str) -> pd.Series:
        first = per[per["pass"] == "first"].set_index("launch")["ttft_p50"].astype(float)
        then = per[per["pass"] == later].set_index("launch")["ttft_p50"].astype(float)
        return (first / then).dropna()

    for later in ("second", "reverse"):
        k = p + f"{later}.speedup_within"
        add(k, lambda: float(ratios(later).median()), "x",  # noqa: B023 (called here)
            note=f"the setup's first-pass median TTFT over its {later}-pass median, per launch; median over launches")
        add(k + "_min", lambda: float(ratios(later).min()), "x")  # noqa: B023
        add(k + "_max", lambda: float(ratios(later).max()), "x")  # noqa: B023


def register_cross(writer: Any, table: TracedFrame, base: str = "vllm") -> None:
    """`lablm.first_over.<setup>`: vLLM alone's first-pass median TTFT over each setup's (medians
    over launches). On the first pass no tier can serve anything, so a ratio far from 1 is a
    difference of the servers, not of their tiers: the page prints it beside any comparison across
    setups."""
    add = traced_adder(writer)
    per = _per_launch(table)
    first = per[per["pass"] == "first"]
    for setup in first.setup.unique():
        if setup == base:
            continue
        add(f"lablm.first_over.{setup}",
            lambda: float(first[first.setup == base].ttft_p50.median()) / float(first[first.setup == setup].ttft_p50.median()),  # noqa: B023
            "x", note=f"{base}'s first-pass median TTFT over {setup}'s (medians over launches)")


def register_numbers(writer: Any, table: TracedFrame) -> None:
    """lablm.*: per setup its launches, and per pass the tokens by source (measured, predicted, and
    how many launches repeat the first launch's), the median TTFT over launches with min and max;
    agreement with the simulator over every request of every launch; the host's load. Each number
    is computed through traced_adder from the table's cells: it names the launches, and the files
    of each, that it read."""
    add = traced_adder(writer)
    per = _per_launch(table)
    add("lablm.launches", lambda: int(table.launch.nunique()), "count")
    add("lablm.requests", lambda: len(table["order"]), "requests")
    # the requests of each setup's first launch: the distinct ones, which its other launches repeat
    add("lablm.requests_distinct", lambda: int(sum(len(g[g.launch == g.launch.iloc[0]]["order"])
                                                   for _, g in table.groupby("setup", sort=False))), "requests",
        note="requests of one launch per setup: the distinct requests its other launches send again")
    add("lablm.requests_repeating", lambda: int(sum(_repeating(g, g[g.launch == g.launch.iloc[0]])
                                                    for _, g in table.groupby("setup", sort=False))), "requests",
        note="requests whose counters equal those of the same request in their setup's first launch")
    add("lablm.agree", lambda: int(table.agrees.sum()), "requests")
    add("lablm.disagree", lambda: int((~table.agrees).sum()), "requests")
    add("lablm.load_start_max", lambda: float(table.load_start.max()), "load")
    add("lablm.load_end_max", lambda: float(table.load_end.max()), "load")
    for setup, g in table.groupby("setup", sort=False):
        p = f"lablm.{setup}."
        first = g[g.launch == g.launch.iloc[0]]
        shape = first.iloc[[0]]
        cell = lambda col: int(shape[col].iloc[0])  # noqa: E731, B023
        add(p + "launches", lambda: int(g.launch.nunique()), "count")
        add(p + "kv_cache_tokens", lambda: cell("kv_blocks") * cell("block_tokens"), "tokens")
        if pd.notna(shape["cpu_chunks"].iloc[0]):
            add(p + "cpu_chunks", lambda: cell("cpu_chunks"), "count")
            add(p + "chunk_tokens", lambda: cell("chunk_blocks") * cell("block_tokens"), "tokens")
            add(p + "cpu_tokens_capacity", lambda: cell("cpu_chunks") * cell("chunk_blocks") * cell("block_tokens"), "tokens")
        add(p + "requests", lambda: len(g["order"]), "requests")
        add(p + "agree", lambda: int(g.agrees.sum()), "requests")
        add(p + "usage_agrees", lambda: int(g.usage_agrees.sum()), "requests")
        # per request position: in how many launches the counters matched the first launch and the simulator
        add(p + "requests_repeating", lambda: _repeating(g, first), "requests")
        for pass_name, q in per[per.setup == setup].groupby("pass", sort=False):
            for col in TOKEN_COLUMNS + tuple("pred_" + c for c in TOKEN_COLUMNS):
                add(p + f"{pass_name}.{col}", lambda: float(q[col].median()), "tokens")
            add(p + f"{pass_name}.tokens_spread", lambda: float(max(q[c].max() - q[c].min() for c in TOKEN_COLUMNS)), "tokens")
            add(p + f"{pass_name}.docs_from_cpu", lambda: int(q.docs_from_cpu.median()), "count")
            add(p + f"{pass_name}.ttft_p50", lambda: float(q.ttft_p50.median()), "ms")
            add(p + f"{pass_name}.ttft_p50_min", lambda: float(q.ttft_p50.min()), "ms")
            add(p + f"{pass_name}.ttft_p50_max", lambda: float(q.ttft_p50.max()), "ms")
        _within_setup(add, p, per[per.setup == setup])
        key = ["pass", "order"]
        listed = g[~g.agrees].drop_duplicates(key).head(12)  # each request position once, at most 12
        add(p + "disagree", lambda: int((~g.agrees).sum()), "requests")
        add(p + "miss_listed", lambda: len(g[~g.agrees].drop_duplicates(key).head(12)["order"]), "count")
        for i in range(len(listed)):
            r, k = listed.iloc[[i]], p + f"miss.{i}."
            add(k + "pass_index", lambda: PASS_NAMES.index(r["pass"].iloc[0]), "count")
            add(k + "doc", lambda: int(r["doc"].iloc[0]) if pd.notna(r["doc"].iloc[0]) else -1, "count")
            for col in TOKEN_COLUMNS:
                add(k + col, lambda: float(r[col].iloc[0]), "tokens")
                add(k + "pred_" + col, lambda: float(r["pred_" + col].iloc[0]), "tokens")
    register_cross(writer, table)
