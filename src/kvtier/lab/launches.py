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
from ..records.labrun import read_lab_run, read_run
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


def launch_table(root: str | Path, pinned: Iterable[str] | None = None) -> pd.DataFrame:
    """Every request of every launch: measured and predicted tokens by source, the launch beside it."""
    frames = []
    for k, d in enumerate(launch_dirs(root, pinned), 1):
        load = read_lab_run(d).meta.get("load") or {}
        t = live.predict(d, live.request_sources(d))
        frames.append(t.assign(launch=d.name, launch_index=k, load_start=(load.get("start") or [None])[0],
                               load_end=(load.get("end") or [None])[0]))
    return pd.concat(frames, ignore_index=True)


def _per_launch(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (setup, launch, pass) of the document requests: token sums and the median TTFT."""
    docs = table[table.phase == "doc"]
    return (docs.groupby(["setup", "launch", "pass"], sort=False)
                .agg(gpu_tokens=("gpu_tokens", "sum"), cpu_tokens=("cpu_tokens", "sum"),
                     computed_tokens=("computed_tokens", "sum"), pred_gpu_tokens=("pred_gpu_tokens", "sum"),
                     pred_cpu_tokens=("pred_cpu_tokens", "sum"), pred_computed_tokens=("pred_computed_tokens", "sum"),
                     ttft_p50=("ttft_ms", "median"), docs_from_cpu=("cpu_tokens", lambda s: int((s > 0).sum())))
                .reset_index())


def register_numbers(writer: Any, table: pd.DataFrame) -> None:
    """lablm.*: per setup its launches, and per pass the tokens by source (measured, predicted, and
    how many launches repeat the first launch's), the median TTFT over launches with min and max;
    agreement with the simulator over every request of every launch; the host's load."""
    per = _per_launch(table)
    writer.add("lablm.launches", int(table.launch.nunique()), "count")
    writer.add("lablm.requests", len(table), "requests")
    writer.add("lablm.agree", int(table.agrees.sum()), "requests")
    writer.add("lablm.disagree", int((~table.agrees).sum()), "requests")
    writer.add("lablm.load_start_max", float(table.load_start.max()), "load")
    writer.add("lablm.load_end_max", float(table.load_end.max()), "load")
    for setup, g in table.groupby("setup", sort=False):
        p = f"lablm.{setup}."
        first = g[g.launch == g.launch.iloc[0]]
        shape = first.iloc[0]
        writer.add(p + "launches", int(g.launch.nunique()), "count")
        writer.add(p + "kv_cache_tokens", int(shape["kv_blocks"]) * int(shape["block_tokens"]), "tokens")
        if pd.notna(shape["cpu_chunks"]):
            writer.add(p + "cpu_chunks", int(shape["cpu_chunks"]), "count")
            writer.add(p + "chunk_tokens", int(shape["chunk_blocks"]) * int(shape["block_tokens"]), "tokens")
            writer.add(p + "cpu_tokens_capacity", int(shape["cpu_chunks"]) * int(shape["chunk_blocks"]) * int(shape["block_tokens"]), "tokens")
        writer.add(p + "requests", len(g), "requests")
        writer.add(p + "agree", int(g.agrees.sum()), "requests")
        writer.add(p + "usage_agrees", int(g.usage_agrees.sum()), "requests")
        # per request position: in how many launches the counters matched the first launch and the simulator
        key = ["pass", "order"]
        ref = first.set_index(key)[list(TOKEN_COLUMNS)]
        same = g.join(ref, on=key, rsuffix="_first")
        repeat = (same[[c for c in TOKEN_COLUMNS]].to_numpy() == same[[c + "_first" for c in TOKEN_COLUMNS]].to_numpy()).all(axis=1)
        writer.add(p + "requests_repeating", int(repeat.sum()), "requests")
        for pass_name, q in per[per.setup == setup].groupby("pass", sort=False):
            for col in TOKEN_COLUMNS + tuple("pred_" + c for c in TOKEN_COLUMNS):
                writer.add(p + f"{pass_name}.{col}", float(q[col].median()), "tokens")
            writer.add(p + f"{pass_name}.tokens_spread", float(max(q[c].max() - q[c].min() for c in TOKEN_COLUMNS)), "tokens")
            writer.add(p + f"{pass_name}.docs_from_cpu", int(q.docs_from_cpu.median()), "count")
            writer.add(p + f"{pass_name}.ttft_p50", float(q.ttft_p50.median()), "ms")
            writer.add(p + f"{pass_name}.ttft_p50_min", float(q.ttft_p50.min()), "ms")
            writer.add(p + f"{pass_name}.ttft_p50_max", float(q.ttft_p50.max()), "ms")
        misses = g[~g.agrees]
        writer.add(p + "disagree", len(misses), "requests")
        listed = misses.drop_duplicates(key).head(12)   # each request position once, at most 12
        writer.add(p + "miss_listed", len(listed), "count")
        for i, r in enumerate(listed.to_dict("records")):
            q = p + f"miss.{i}."
            writer.add(q + "pass_index", PASS_NAMES.index(r["pass"]), "count")
            writer.add(q + "doc", int(r["doc"]) if pd.notna(r["doc"]) else -1, "count")
            for col in TOKEN_COLUMNS:
                writer.add(q + col, float(r[col]), "tokens")
                writer.add(q + "pred_" + col, float(r["pred_" + col]), "tokens")
