"""Reading the lab's measurement records into tidy tables, with errors that name file and line.

Layout of one run (live or replica), under raw/lab/<run>/:
  run.yaml                         setups, model, documents, concurrency, LMCache settings
  requests.csv                     one row per request: setup, pass, phase, order, doc, tokens, TTFT
  <setup>/server.log               vLLM startup lines; for LMCache also its own log lines
  <setup>/metrics/<k>_<label>.prom /metrics after pass k (0_start before the first)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import RawRecordError, capped_lines
from ..records.geometry import server_block_tokens
from ..records.prometheus import Snapshot
from . import PASSES
from ..yamlio import load_yaml

REQUEST_COLUMNS = {"setup": str, "pass": str, "phase": str, "order": int, "doc": "Int64", "prompt_tokens": int,
                   "cached_tokens": int, "start_s": float, "ttft_ms": float, "e2e_ms": float, "output_tokens": int}
PHASES = ("doc", "check")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
GPU_CACHE_LINE = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")
LMCACHE_LINE = re.compile(r"\[(?P<time>[\d\- :,]+)\] LMCache (?P<level>\w+): (?P<msg>.*) \((?P<where>[^()]*)\)\s*$")
SCHEDULER = re.compile(r"Reqid: (?P<req>\S+), Total tokens (?P<total>\d+), (?:Inference Engine computed tokens: "
                       r"(?P<computed>-?\d+), )?LMCache hit tokens: (?P<hit>-?\d+), need to load: (?P<load>-?\d+)")
RETRIEVED = re.compile(r"\[req_id=(?P<req>[^\]]+)\] Retrieved (?P<got>\d+) out of (?P<required>\d+) required tokens "
                       r"\(from (?P<total>\d+) total tokens\)\. size: (?P<gb>[\d.]+) gb, cost (?P<ms>[\d.]+) ms")
STORED = re.compile(r"\[req_id=(?P<req>[^\]]+)\] Stored (?P<stored>\d+) out of total (?P<total>\d+) tokens\. "
                    r"size: (?P<gb>[\d.]+) GB, cost (?P<ms>[\d.]+) ms")


def read_requests(path: str | Path) -> pd.DataFrame:
    """requests.csv -> DataFrame; a missing column or bad value names the file and CSV line."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:  # a copy cut mid-row can still parse: its last line lacks the newline
        f.seek(max(size - 1, 0))
        cut = size > 0 and f.read(1) != b"\n"
    if cut:
        n = sum(1 for _ in capped_lines(path, errors="replace"))
        raise RawRecordError(path, "the last line has no newline: the table was cut while it was written "
                                       "(copy it again once the run has ended)", line=n)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise RawRecordError(path, f"not a CSV table ({e})") from None
    missing = [c for c in REQUEST_COLUMNS if c not in df.columns]
    if missing:
        raise RawRecordError(path, f"missing column(s) {', '.join(missing)}", line=1)
    out = pd.DataFrame(index=df.index)
    for col, kind in REQUEST_COLUMNS.items():
        raw = df[col].str.strip()
        if kind is str:
            out[col] = raw
            continue
        num = pd.to_numeric(raw.replace("", pd.NA), errors="coerce")
        bad = num.isna() & (raw != "" if kind == "Int64" else True)
        if bad.any():
            i = int(bad.idxmax())
            raise RawRecordError(path, f"column {col!r}: {raw[i]!r} is not a number", line=i + 2, record=",".join(df.loc[i]))
        out[col] = num.astype("Int64") if kind == "Int64" else num.astype(kind)
    for col, allowed in (("pass", PASSES), ("phase", PHASES)):
        bad = ~out[col].isin(allowed)
        if bad.any():
            i = int(bad.idxmax())
            raise RawRecordError(path, f"{col} {out[col][i]!r} is not one of {allowed}", line=i + 2, record=",".join(df.loc[i]))
    checks = [
        (out["phase"].eq("doc") & out["doc"].isna(), "a document request without a doc id"),
        (~np.isfinite(out[["start_s", "ttft_ms", "e2e_ms"]].to_numpy(float)).all(axis=1), "a time that is not finite"),
        (out["start_s"] < 0, "a negative start time"),
        (out["ttft_ms"] <= 0, "TTFT must be positive"),
        (out["e2e_ms"] < out["ttft_ms"], "end-to-end time shorter than TTFT"),
        (out["cached_tokens"] > out["prompt_tokens"], "more cached tokens than prompt tokens"),
        (out["cached_tokens"] < 0, "negative cached tokens"),
    ]
    for mask, why in checks:
        if mask.any():
            i = int(mask.idxmax())
            raise RawRecordError(path, why, line=i + 2, record=",".join(df.loc[i]))
    key = ["setup", "pass", "phase", "order"]
    twice = out.duplicated(key, keep="first")
    if twice.any():
        i = int(twice.idxmax())
        first = int(out.index[(out[key] == out.loc[i, key]).all(axis=1)][0])
        raise RawRecordError(path, f"request {out.order[i]} of {out.setup[i]}'s {out['pass'][i]} pass ({out.phase[i]}) "
                                   f"appears twice (first on line {first + 2})",
                             line=i + 2, record=",".join(df.loc[i]))
    return out


def read_run(path: str | Path) -> dict:
    path = Path(path)
    run = load_yaml(path.read_text(encoding="utf-8")) or {}
    for key in ("documents", "setups", "concurrency", "passes"):
        if key not in run:
            raise RawRecordError(path, f"run record lacks {key!r}")
    if list(run["passes"]) != list(PASSES):
        raise RawRecordError(path, f"passes must be {list(PASSES)}, found {run['passes']}", record="passes")
    return run


def gpu_cache_tokens(path: str | Path) -> int:
    """The first-tier KV cache size the server logged at startup ('GPU KV cache size: N tokens')."""
    path = Path(path)
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = GPU_CACHE_LINE.search(line)
        if m:
            return int(m.group(1).replace(",", ""))
    raise RawRecordError(path, "no 'KV cache size: N tokens' line: was the log cut before the engine started?")


def read_lmcache_log(path: str | Path) -> pd.DataFrame:
    """LMCache's scheduler, retrieve and store lines, in log order (ANSI colours stripped)."""
    path = Path(path)
    rows = []
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = ANSI.sub("", raw)
        if "LMCache" not in line:
            continue
        m = LMCACHE_LINE.search(line)
        if not m:
            raise RawRecordError(path, "an LMCache line not in LMCache 0.5.6's log format", line=i, record=line)
        msg = m.group("msg")
        row = {"line": i, "kind": "", "total": pd.NA, "computed": pd.NA, "hit": pd.NA, "load": pd.NA,
               "tokens": pd.NA, "required": pd.NA, "ms": float("nan")}
        if s := SCHEDULER.search(msg):
            row.update(kind="lookup", total=int(s["total"]), computed=int(s["computed"] or 0), hit=int(s["hit"]),
                       load=int(s["load"]))
        elif r := RETRIEVED.search(msg):
            row.update(kind="retrieve", tokens=int(r["got"]), required=int(r["required"]), total=int(r["total"]),
                       ms=float(r["ms"]))
        elif s := STORED.search(msg):
            row.update(kind="store", tokens=int(s["stored"]), total=int(s["total"]), ms=float(s["ms"]))
        elif "Retrieved" in msg or "Stored" in msg or "Reqid" in msg:
            raise RawRecordError(path, "an LMCache retrieve/store/lookup line that does not parse", line=i, record=line)
        else:
            continue
        rows.append(row)
    return pd.DataFrame(rows, columns=["line", "kind", "total", "computed", "hit", "load", "tokens", "required", "ms"])


@dataclass(frozen=True)
class PassMetrics:
    setup: str
    pass_: str
    prefix_queries: float
    prefix_hits: float
    external_queries: float
    external_hits: float
    prompt_tokens: float
    requests: float


def metrics_by_pass(metrics_dir: str | Path, setup: str) -> list[PassMetrics]:
    """Counter deltas between consecutive snapshots: what each pass added."""
    metrics_dir = Path(metrics_dir)
    files = sorted(metrics_dir.glob("*.prom"), key=lambda p: int(p.name.split("_")[0]))
    labels = [p.stem.split("_", 1)[1] for p in files]
    if labels != ["start", *PASSES]:
        raise RawRecordError(metrics_dir, f"expected snapshots 0_start, 1_first, 2_second, 3_reverse; found {[p.name for p in files]}")
    snaps = [Snapshot.read(p) for p in files]
    if len({s.server_instance() for s in snaps}) != 1:
        raise RawRecordError(metrics_dir, "snapshots come from different server processes (counters restarted)")
    names = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total",
             "vllm:external_prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:request_success_total")
    out = []
    for p, before, after in zip(PASSES, snaps, snaps[1:]):
        d = [after.total(n) - before.total(n) for n in names]
        if min(d) < 0:
            raise RawRecordError(files[PASSES.index(p) + 1], "a counter went down between snapshots")
        out.append(PassMetrics(setup, p, *d))
    return out


def block_tokens(metrics_dir: str | Path) -> int:
    try:
        return server_block_tokens(Snapshot.read(sorted(Path(metrics_dir).glob("*.prom"))[0]))
    except RawRecordError:
        raise RawRecordError(metrics_dir, "no vllm:cache_config_info with block_size in the first snapshot") from None
