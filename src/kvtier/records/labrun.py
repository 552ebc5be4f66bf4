"""The lab run (raw/lab/<run>/, layout in kvtier.records.labwriter): its reader.

`read_lab_run(root)` reads run.yaml, requests.csv, and per setup its server log (the startup
line of its KV cache, LMCache's own lines) and its /metrics snapshots before and after each pass,
and runs the record's contract on them: the columns and values of every request, every pass
reading each document once at the length run.yaml gives, the snapshots one server whose counters
never go down, the server's block and KV cache the same in cache_config_info and the startup line
(kvtier.records.geometry). It returns a `LabRun`, immutable, with the paths and sha256 of what it
read; its data touches the file it comes from when it is read (kvtier.records.touch), so a number
computed from it names exactly those files. Errors name the file and the line.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..errors import RawRecordError, capped_lines
from ..yamlio import load_yaml
from . import vllm as V
from .geometry import ServerCache, logged_kv_cache_tokens, server_cache, server_block_tokens
from .labwriter import METRICS_AFTER, PASSES, REQUEST_COLUMNS, SNAPSHOTS, snapshot_path
from .prometheus import Snapshot
from .runcontract_counters import check_prompt_sources
from .touch import quiet, touch

__all__ = ["LabRun", "LabSetup", "PassMetrics", "read_lab_run", "read_requests", "read_run", "read_lmcache_log",
           "metrics_by_pass", "gpu_cache_tokens", "block_tokens", "PASSES"]

COLUMN_TYPES: dict[str, Any] = {"setup": str, "pass": str, "phase": str, "order": int, "doc": "Int64", "prompt_tokens": int,
                                "cached_tokens": int, "start_s": float, "ttft_ms": float, "e2e_ms": float, "output_tokens": int}
assert tuple(COLUMN_TYPES) == REQUEST_COLUMNS
PHASES = ("doc", "check")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LMCACHE_LINE = re.compile(r"\[(?P<time>[\d\- :,]+)\] LMCache (?P<level>\w+): (?P<msg>.*) \((?P<where>[^()]*)\)\s*$")
SCHEDULER = re.compile(r"Reqid: (?P<req>\S+), Total tokens (?P<total>\d+), (?:Inference Engine computed tokens: "
                       r"(?P<computed>-?\d+), )?LMCache hit tokens: (?P<hit>-?\d+), need to load: (?P<load>-?\d+)")
RETRIEVED = re.compile(r"\[req_id=(?P<req>[^\]]+)\] Retrieved (?P<got>\d+) out of (?P<required>\d+) required tokens "
                       r"\(from (?P<total>\d+) total tokens\)\. size: (?P<gb>[\d.]+) gb, cost (?P<ms>[\d.]+) ms")
STORED = re.compile(r"\[req_id=(?P<req>[^\]]+)\] Stored (?P<stored>\d+) out of total (?P<total>\d+) tokens\. "
                    r"size: (?P<gb>[\d.]+) GB, cost (?P<ms>[\d.]+) ms")
LMCACHE_COLUMNS = ["line", "kind", "total", "computed", "hit", "load", "tokens", "required", "ms"]
# what each pass added, from the counters (records.vllm's names)
PASS_COUNTERS = {"prefix_queries": V.PREFIX_QUERIES, "prefix_hits": V.PREFIX_HITS, "external_queries": V.EXTERNAL_PREFIX_QUERIES,
                 "external_hits": V.EXTERNAL_PREFIX_HITS, "prompt_tokens": V.PROMPT_TOTAL, "requests": V.REQUEST_SUCCESS}


# ---------------------------------------------------------------- one file each

def read_requests(path: str | Path) -> pd.DataFrame:
    """requests.csv -> DataFrame (metrics_after kept where the run has it); a missing column or
    a bad value names the file and CSV line."""
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
    missing = [c for c in COLUMN_TYPES if c not in df.columns]
    if missing:
        raise RawRecordError(path, f"missing column(s) {', '.join(missing)}", line=1)
    out = pd.DataFrame(index=df.index)
    for col, kind in COLUMN_TYPES.items():
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
        (out["prompt_tokens"] < 1, "a request of no prompt tokens"),
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
    if METRICS_AFTER in df.columns:
        out[METRICS_AFTER] = df[METRICS_AFTER]
    return out


def read_run(path: str | Path) -> dict:
    """run.yaml, with the keys every lab run has."""
    path = Path(path)
    run = load_yaml(path.read_text(encoding="utf-8")) or {}
    for key in ("documents", "setups", "concurrency", "passes"):
        if key not in run:
            raise RawRecordError(path, f"run record lacks {key!r}")
    if list(run["passes"]) != list(PASSES):
        raise RawRecordError(path, f"passes must be {list(PASSES)}, found {run['passes']}", record="passes")
    return run


def gpu_cache_tokens(path: str | Path) -> int:
    """The first-tier KV cache size the server logged at startup (records.geometry)."""
    return logged_kv_cache_tokens(Path(path))[0]


def read_lmcache_log(path: str | Path) -> pd.DataFrame:
    """LMCache's scheduler, retrieve and store lines, in log order (ANSI colours stripped)."""
    path = Path(path)
    rows = []
    for i, raw, _ in capped_lines(path):
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
        _plausible_lmcache(path, i, line, row)
        rows.append(row)
    return pd.DataFrame(rows, columns=LMCACHE_COLUMNS)


# The counts each kind of LMCache line gives, each at most its line's prompt (`total`): LMCache
# cannot find, hold or move more tokens of a request than the request has.
_LMCACHE_WITHIN_TOTAL = {"lookup": ("computed", "hit", "load"), "retrieve": ("tokens", "required"), "store": ("tokens",)}


def _plausible_lmcache(path: Path, lineno: int, line: str, row: dict[str, Any]) -> None:
    """An LMCache line's counts within its prompt and its time >= 0, or an error naming the line."""
    total = row["total"]
    for key in _LMCACHE_WITHIN_TOTAL[row["kind"]]:
        if row[key] > total:
            what = {"computed": "tokens the inference engine (the GPU) holds", "hit": "LMCache hit tokens",
                    "load": "tokens to load", "tokens": "tokens", "required": "tokens required"}[key]
            raise RawRecordError(path, f"{row[key]:,} {what}, more than the prompt's {total:,} tokens", line=lineno, record=line)
    if not (row["ms"] >= 0 or math.isnan(row["ms"])):
        raise RawRecordError(path, f"a time of {row['ms']} ms: times are never negative", line=lineno, record=line)


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


def _pass_snapshots(metrics_dir: Path) -> list[Path]:
    files = sorted(metrics_dir.glob("*.prom"), key=lambda p: int(p.name.split("_")[0]) if p.name.split("_")[0].isdigit() else -1)
    if [p.stem.split("_", 1)[-1] for p in files] != list(SNAPSHOTS):
        raise RawRecordError(metrics_dir, f"expected snapshots 0_start, 1_first, 2_second, 3_reverse; found {[p.name for p in files]}")
    return files


def _delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
    return {k: after.total(name) - before.total(name) for k, name in PASS_COUNTERS.items()}


def _check_series(paths: list[Path], snaps: list[Snapshot]) -> None:
    """One server (the counters' _created stamps), its counters never lower than before, and in
    each snapshot the prompt tokens by source adding up to the prompt tokens (the run contract's)."""
    with quiet():
        for snap in snaps:
            check_prompt_sources(snap)
        if len({s.server_instance() for s in snaps}) != 1:
            raise RawRecordError(paths[0].parent, "snapshots come from different server processes (counters restarted)")
        for path, before, after in zip(paths[1:], snaps, snaps[1:]):
            if min(_delta(before, after).values()) < 0:
                raise RawRecordError(path, "a counter went down between snapshots")


def metrics_by_pass(metrics_dir: str | Path, setup: str) -> list[PassMetrics]:
    """Counter deltas between consecutive snapshots: what each pass added."""
    paths = _pass_snapshots(Path(metrics_dir))
    snaps = [Snapshot.read(p) for p in paths]
    _check_series(paths, snaps)
    return [PassMetrics(setup, p, **_delta(b, a)) for p, b, a in zip(PASSES, snaps, snaps[1:])]


def block_tokens(metrics_dir: str | Path) -> int:
    """The server's block size (records.geometry) from the setup's first snapshot."""
    try:
        return server_block_tokens(Snapshot.read(_pass_snapshots(Path(metrics_dir))[0]))
    except RawRecordError:
        raise RawRecordError(metrics_dir, "no vllm:cache_config_info with block_size in the first snapshot") from None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- the record

@dataclass(frozen=True)
class LabSetup:
    """One setup's server: its log and its snapshots; each value touches the file it is read from."""

    name: str
    folder: Path
    log: Path
    snapshot_paths: tuple[Path, ...]  # 0_start, then after each pass
    _snaps: tuple[Snapshot, ...]
    _cache: ServerCache

    @cached_property
    def _lmcache(self) -> pd.DataFrame:
        # parsed when first asked for: the lab reads LMCache 0.5.6's lines; a live run's log on the
        # CPU build also names LMCache in vLLM's own lines (its arguments), which no one reads
        return read_lmcache_log(self.log)

    def snapshot(self, k: int) -> Snapshot:
        """/metrics after pass k (0: before the first); its series touch its file when read."""
        return self._snaps[k]

    @property
    def block_tokens(self) -> int:
        """The server's block (cache_config_info of the first snapshot, the same in every one)."""
        touch(self.snapshot_paths[0])
        return self._cache.block_tokens

    @property
    def kv_blocks(self) -> int:
        touch(self.snapshot_paths[0])
        return self._cache.kv_blocks

    @property
    def kv_cache_tokens(self) -> int:
        """The first tier's size as the startup line logged it (equal to cache_config_info's)."""
        touch(self.log)
        return self._cache.tokens

    @property
    def lmcache_lines(self) -> pd.DataFrame:
        """LMCache's lookup, retrieve and store lines of the log (none for a server without it)."""
        touch(self.log)
        return self._lmcache.copy()

    def pass_counters(self, pass_: str) -> dict[str, float]:
        """What the pass added to the counters (the snapshots before and after it)."""
        k = PASSES.index(pass_) + 1
        return _delta(self._snaps[k - 1], self._snaps[k])

    def pass_metrics(self) -> list[PassMetrics]:
        return [PassMetrics(self.name, p, **self.pass_counters(p)) for p in PASSES]

    def request_snapshot(self, name: str) -> Path:
        """The per-request snapshot requests.csv's metrics_after names (a path under the setup's folder)."""
        path = self.folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts or not path.is_file():
            raise FileNotFoundError(path)
        return path


@dataclass(frozen=True)
class LabRun:
    """A lab run as read: its files (with sha256), run.yaml, the requests and each setup's server."""

    root: Path
    run_path: Path
    requests_path: Path
    hashes: Mapping[str, str]  # path -> sha256 of every file read
    _meta: Mapping[str, Any]
    _requests: pd.DataFrame
    _setups: Mapping[str, LabSetup]

    @property
    def meta(self) -> dict[str, Any]:
        """run.yaml (a copy)."""
        touch(self.run_path)
        return copy.deepcopy(dict(self._meta))

    @property
    def requests(self) -> pd.DataFrame:
        """requests.csv (a copy), typed."""
        touch(self.requests_path)
        return self._requests.copy()

    @property
    def setup_names(self) -> tuple[str, ...]:
        return tuple(self._setups)

    def setup(self, name: str) -> LabSetup:
        if name not in self._setups:
            raise RawRecordError(self.run_path, f"no setup {name!r} (the run has {', '.join(self._setups)})")
        return self._setups[name]

    @property
    def documents(self) -> int:
        touch(self.run_path)
        return int(self._meta["documents"]["count"])

    @property
    def doc_tokens(self) -> int:
        """Tokens of every document (a run whose documents differ in length has no one value)."""
        touch(self.run_path)
        tokens = self._meta["documents"]["tokens"]
        if isinstance(tokens, list):
            raise RawRecordError(self.run_path, f"documents of {len(set(tokens))} lengths: no one document length")
        return int(tokens)

    @property
    def max_tokens(self) -> int:
        touch(self.run_path)
        return int(self._meta.get("max_tokens", 1))

    @property
    def concurrency(self) -> int:
        touch(self.run_path)
        return int(self._meta["concurrency"])

    @property
    def vllm_version(self) -> str:
        touch(self.run_path)
        version = str((self._meta.get("versions") or {}).get("vllm", ""))
        if not version:
            raise RawRecordError(self.run_path, "versions.vllm is missing: the simulator needs it for vLLM's free order")
        return version

    def setup_env(self, name: str) -> dict[str, str]:
        """The environment a setup's server was given (LMCache's settings)."""
        touch(self.run_path)
        return dict((self._meta["setups"].get(name) or {}).get("env") or {})


def read_lab_run(root: str | Path) -> LabRun:
    """Read and check a lab run (see the module's docstring); nothing is touched while reading."""
    root = Path(root)
    with quiet():
        run_path, requests_path = root / "run.yaml", root / "requests.csv"
        meta = read_run(run_path)
        req = read_requests(requests_path)
        _check_requests(meta, req, run_path, requests_path)
        setups = {}
        read = [run_path, requests_path]
        for name in meta["setups"]:
            folder = root / name
            paths = _pass_snapshots(folder / "metrics")
            snaps = [Snapshot.read(p) for p in paths]
            _check_series(paths, snaps)
            log = folder / "server.log"
            setups[name] = LabSetup(name, folder, log, tuple(paths), tuple(snaps), server_cache(snaps, log))
            read += [log, *paths]
    return LabRun(root, run_path, requests_path, MappingProxyType({p.as_posix(): _sha256(p) for p in read}),
                  MappingProxyType(meta), req, MappingProxyType(setups))


def _check_requests(meta: dict, req: pd.DataFrame, run_path: Path, path: Path) -> None:
    """Every request of a setup run.yaml names; every pass reads each document once, at the length run.yaml gives."""
    unknown = ~req["setup"].isin(list(meta["setups"]))
    if unknown.any():
        i = int(unknown.idxmax())
        raise RawRecordError(path, f"setup {req.setup[i]!r} is not one of run.yaml's ({', '.join(meta['setups'])})", line=i + 2)
    docs = req[req["phase"].eq("doc")]
    n = int(meta["documents"]["count"])
    for (setup, p), g in docs.groupby(["setup", "pass"]):
        if len(g) != n or sorted(g["doc"]) != list(range(n)):
            raise RawRecordError(path, f"{setup}/{p}: expected each of {n} documents once")
    tokens = meta["documents"].get("tokens")
    lengths = set(docs["prompt_tokens"])
    if isinstance(tokens, list) and lengths != set(tokens):
        raise RawRecordError(path, f"document prompts of {sorted(lengths)} tokens, run.yaml says {sorted(tokens)} ({run_path})")
    if isinstance(tokens, int) and lengths != {tokens}:
        raise RawRecordError(path, f"document prompts are not all {tokens} tokens as run.yaml says")
