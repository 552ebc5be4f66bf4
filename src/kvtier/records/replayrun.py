"""A kvtier replay run folder: the one reader of the record (its writers: records.replaywrite).

One folder per launch of `kvtier replay`: run.yaml (what was replayed, the server), client.jsonl
(records.clientlog), metrics_start.prom and metrics.prom (records.prometheus), server.log (the
offload worker's startup line, the scheduler's budget), sent_blocks.npz (every answered prompt in
the server's blocks), and where kept host.yaml (the observation), host_series.csv (the host's
load) and metrics_series.csv.gz. `read` checks the folder by the run contract (counters, one
server run, one geometry: run.yaml's pool against the worker's line and the connector config,
job lines, the client log) and the counters against the answered requests, quietly; the record's
fields then touch the files they were read from whenever a computation reads them
(records.touch), so a number computed from a run names the files its value came from.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

import numpy as np

from .. import loadrule
from ..errors import ARCHIVE_ERRORS, RawRecordError, archive_error, csv_rows
from . import vllm as V
from .clientlog import client_lines, read_client_log
from .geometry import shape_from
from .prometheus import Snapshot, read_prometheus
from .touch import quiet, touch

if TYPE_CHECKING:  # pandas only where a table is made: the replay client runs in the vLLM venv, which has none
    import pandas as pd

GIB = 2**30
RUN_YAML, CLIENT, METRICS_START, METRICS_END, SERVER_LOG = "run.yaml", "client.jsonl", "metrics_start.prom", "metrics.prom", "server.log"
SENT = "sent_blocks.npz"
HOST_YAML, HOST_SERIES, METRICS_SERIES = "host.yaml", "host_series.csv", "metrics_series.csv.gz"
REQUIRED = (RUN_YAML, CLIENT, METRICS_START, METRICS_END, SERVER_LOG, SENT)
HOST_FIELDS = ("t_s", "load1", "load5", "load15", "busy_share", "steal_share")
SENT_ARRAYS = ("session", "index", "tokens", "offsets", "blocks", "block_tokens")


@lru_cache(maxsize=None)
def _under(root: Path, files: tuple[str, ...]) -> tuple[str, ...]:
    """A field's files under its record's folder, as posix paths (joined once per folder and field:
    a computation reads the same fields thousands of times)."""
    return tuple((root / f).as_posix() for f in files)


class FieldTouching:
    """A record whose public fields touch the files they were read from (FILES: field -> names
    under the record's folder, `_folder()`), when a computation reads them."""

    FILES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __getattribute__(self, name: str) -> Any:
        files = type(self).FILES.get(name)
        if files:
            touch(*_under(object.__getattribute__(self, "_folder")(), files))
        return object.__getattribute__(self, name)

    def _folder(self) -> Path:
        raise NotImplementedError


@dataclass(frozen=True)
class ServerShape(FieldTouching):
    """The server's blocks and pool as the run's records give them: cache_config_info in the first
    snapshot (block_tokens, kv_blocks), the offload worker's startup line (chunk_blocks, cpu_chunks;
    None: no pool) and the scheduler's budget in the log (step_tokens, records.geometry and
    kvtier.step_budget). Read as a mapping too (shape["kv_blocks"]), as the simulator's callers do."""

    FILES: ClassVar[dict[str, tuple[str, ...]]] = {"block_tokens": (METRICS_START,), "kv_blocks": (METRICS_START,),
                                                   "chunk_blocks": (SERVER_LOG,), "cpu_chunks": (SERVER_LOG,),
                                                   "step_tokens": (SERVER_LOG,)}
    block_tokens: int
    kv_blocks: int
    chunk_blocks: int | None
    cpu_chunks: int | None
    step_tokens: int | None
    root: Path = field(default=Path("."), repr=False, compare=False)

    def _folder(self) -> Path:
        return object.__getattribute__(self, "root")

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).FILES:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in type(self).FILES else default

    def keys(self) -> list[str]:
        return list(type(self).FILES)


@dataclass(frozen=True)
class Load(FieldTouching):
    """host_series.csv: the host's load over the run (the first sample's CPU shares cover no interval)."""

    FILES: ClassVar[dict[str, tuple[str, ...]]] = {**{k: (HOST_SERIES,) for k in ("load1_mean", "load1_max", "steal_mean", "samples",
                                                                               "load1_median")},
                                                   "cpus": (HOST_YAML,)}
    load1_mean: float
    load1_max: float
    steal_mean: float
    samples: int
    load1_median: float = math.nan  # over every sample: the one load rule's statistic (kvtier.loadrule)
    cpus: int | None = None  # host.yaml's host.cpus: the rule's threshold is per CPU
    root: Path = field(default=Path("."), repr=False, compare=False)

    def _folder(self) -> Path:
        return object.__getattribute__(self, "root")


@dataclass(frozen=True)
class ReplayRun(FieldTouching):
    """One kvtier replay run, checked: run.yaml (`meta`), the answered requests in the order the
    server received them (`requests`, client.jsonl), the server's shape, prompt tokens by source
    over the run (`measured`: the final snapshot less the first), preemptions, and the offloaded
    blocks the server stored (its store-bytes counter over the bytes of a block; None: no pool)."""

    FILES: ClassVar[dict[str, tuple[str, ...]]] = {
        "meta": (RUN_YAML,), "requests": (CLIENT,), "measured": (METRICS_END, METRICS_START),
        "preemptions": (METRICS_END, METRICS_START), "stored_chunks": (METRICS_END, METRICS_START, SERVER_LOG)}
    path: Path
    meta: dict[str, Any]
    requests: "pd.DataFrame"
    shape: ServerShape
    measured: dict[str, float]
    preemptions: float
    stored_chunks: float | None

    def _folder(self) -> Path:
        return object.__getattribute__(self, "path")

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def tiered(self) -> bool:
        """Whether the server had a pool (run.yaml's tier; the worker's line agrees, checked by `read`)."""
        return self.meta["server"].get("tier") != "none"

    @property
    def pool_bytes(self) -> int:
        return int(round(float(self.meta["server"].get("offload_gib") or 0) * GIB)) if self.tiered else 0

    @property
    def pool_tokens(self) -> int:
        s = self.shape
        return int(s.cpu_chunks * s.chunk_blocks * s.block_tokens) if s.cpu_chunks is not None else 0  # type: ignore[operator]

    @property
    def kv_cache_tokens(self) -> int:
        return int(self.shape.kv_blocks) * int(self.shape.block_tokens)

    # -- the parts read when asked for (each touches its file) ----------------------------------
    def sent(self) -> dict[tuple[int, int], tuple[int, np.ndarray]]:
        """The stream as sent (sent_blocks.npz), checked against the client log: (session,
        index) -> (prompt tokens, block ids), in blocks of `sent_block_tokens()`."""
        return read_sent(self.path / SENT, self.path / CLIENT)

    def sent_block_tokens(self) -> int:
        return read_sent_block_tokens(self.path / SENT)

    def answered(self, extra: dict[str, tuple[type, ...]] | None = None) -> "pd.DataFrame":
        """The client log's answered requests with `extra` fields too (records.clientlog), in file order."""
        return read_client_log(self.path / CLIENT, extra, run_seconds=observation_seconds(self.path / HOST_YAML))

    def client_lines(self) -> list[tuple[int, dict[str, Any]]]:
        """(line number, record) of every line of the client log (answered and failed), as
        written, by the client log's reader (the run contract's line checks)."""
        return [(i, rec) for i, _, rec in client_lines(self.path / CLIENT, observation_seconds(self.path / HOST_YAML))]

    def load(self) -> Load:
        return read_load(self.path / HOST_SERIES)

    def observation(self) -> tuple[datetime, datetime]:
        return read_observation(self.path / HOST_YAML)


# ---------------------------------------------------------------- the reader

def read_meta(path: str | Path) -> dict[str, Any]:
    """run.yaml of a kvtier replay run (a mapping with its trace, scaling and server)."""
    from ..yamlio import load_yaml

    path = Path(path)
    touch(path)
    meta = load_yaml(path.read_text(encoding="utf-8"))
    for key in ("trace", "scaling", "server"):
        if not isinstance(meta, dict) or key not in meta:
            raise RawRecordError(path, f"no {key!r} entry (not a kvtier replay run record)")
    return meta


def _delta(end: Snapshot, start: Snapshot) -> dict[str, float]:
    """Prompt tokens by source over the run (prompt, gpu, pool, computed, missed): the final
    snapshot's counters less the first's."""
    last = end.by_label(V.PROMPT_BY_SOURCE, "source")
    out = {"prompt": float(end.value(V.PROMPT_TOTAL)), "gpu": float(last["local_cache_hit"]),
           "pool": float(last["external_kv_transfer"]), "computed": float(last["local_compute"])}
    if start.has(V.PROMPT_BY_SOURCE):
        first = start.by_label(V.PROMPT_BY_SOURCE, "source")
        out["gpu"] -= float(first.get("local_cache_hit", 0.0))
        out["pool"] -= float(first.get("external_kv_transfer", 0.0))
        out["computed"] -= float(first.get("local_compute", 0.0))
        out["prompt"] -= float(start.value(V.PROMPT_TOTAL))
    out["missed"] = out["pool"] + out["computed"]
    return out


def _grew(end: Snapshot, start: Snapshot, name: str) -> float:
    return end.value(name) - (start.value(name) if start.has(name) else 0.0)


def read(run_dir: str | Path) -> ReplayRun:
    """One run's records, checked against each other (quietly: a check makes no value): the run
    contract on the folder, run.yaml's tier against the offload worker's line, the counters'
    prompt tokens against the answered requests', their cached tokens against the usage fields."""
    from . import runcontract
    from ..step_budget import step_tokens_of

    run_dir = Path(run_dir)
    for name in REQUIRED:
        if not (run_dir / name).is_file():
            raise RawRecordError(run_dir / name, "missing: a replay run needs " + ", ".join(REQUIRED))
    with quiet():
        meta = read_meta(run_dir / RUN_YAML)
        # each scrape parsed once (its whole table: the contract checks every sample), then checked and read
        start, end = read_prometheus(run_dir / METRICS_START), read_prometheus(run_dir / METRICS_END)
        log = runcontract.check_run_folder(run_dir, end, start=start)  # counters, one server run, one geometry, job lines
        answered = read_client_log(run_dir / CLIENT, run_seconds=observation_seconds(run_dir / HOST_YAML))
        reqs = answered.sort_values(["sent_s", "line"], kind="stable").reset_index(drop=True)
        reqs.attrs.update(answered.attrs)
        worker = log.worker
        s = shape_from(start, worker)
        shape = ServerShape(int(s["block_tokens"]), int(s["kv_blocks"]), s["chunk_blocks"], s["cpu_chunks"],  # type: ignore[arg-type]
                            step_tokens_of(run_dir / SERVER_LOG), run_dir)
        tier = meta["server"].get("tier")
        if (tier == "none") != (shape.cpu_chunks is None):
            raise RawRecordError(run_dir / SERVER_LOG, f"run.yaml says tier {tier!r}, but the offload worker's startup line is "
                                                       f"{'present' if shape.cpu_chunks is not None else 'missing'}")
        measured = _delta(end, start)
        sent_tokens = int(reqs.prompt_tokens_sent.sum())
        if measured["prompt"] != sent_tokens:
            raise RawRecordError(run_dir / METRICS_END, f"the counters grew by {measured['prompt']:.0f} prompt tokens, "
                                                        f"the answered requests of client.jsonl sent {sent_tokens}")
        if abs(measured["gpu"] + measured["pool"] - float(reqs.cached_tokens.sum())) > 0:
            raise RawRecordError(run_dir / METRICS_END, f"the counters credit {measured['gpu'] + measured['pool']:.0f} tokens to "
                                                        f"the KV cache and the pool, usage in client.jsonl {int(reqs.cached_tokens.sum())}")
        pre = _grew(end, start, V.PREEMPTIONS)
        stored = _grew(end, start, V.STORE_BYTES) / worker["bytes_per_offloaded_block"] if worker is not None else None
    return ReplayRun(run_dir, meta, reqs, shape, measured, pre, stored)


def observation_seconds(host_yaml: Path) -> float | None:
    """How long the run's observation lasted (host.yaml), or None: the client log's check."""
    from .host import observation_seconds as seconds

    with quiet():
        return seconds(host_yaml)


def read_observation(path: str | Path) -> tuple[datetime, datetime]:
    """host.yaml's observation: the server's start and stop."""
    from ..yamlio import load_yaml

    path = Path(path)
    touch(path)
    obs = (load_yaml(path.read_text(encoding="utf-8")) or {}).get("observation") or {}
    try:
        start, end = datetime.fromisoformat(str(obs["start"])), datetime.fromisoformat(str(obs["end"]))
    except (KeyError, ValueError) as e:
        raise RawRecordError(path, f"no observation start and end ({e}): the launch's time is unknown") from None
    if end <= start:
        raise RawRecordError(path, f"observation ends ({end}) before it starts ({start})")
    return start, end


HOST_SERIES_RANGES = {"t_s": (0.0, math.inf), "load1": (0.0, math.inf), "load5": (0.0, math.inf), "load15": (0.0, math.inf),
                      "busy_share": (0.0, 1.0), "steal_share": (0.0, 1.0)}


def read_load(path: str | Path) -> Load:
    """host_series.csv (HOST_FIELDS): the mean and largest 1-minute load and the mean CPU steal.
    Every value is in its range (HOST_SERIES_RANGES: times and loads >= 0, shares of CPU time in
    [0, 1]) and the times go forward, or the file and line are named."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        lines = list(csv_rows(f, path))
    if not lines:
        raise RawRecordError(path, "empty: no header", line=1)
    header = lines[0][1]
    rows = [(i, dict(zip(header, r))) for i, r in lines[1:] if r]
    if len(rows) < 2:
        raise RawRecordError(path, f"{len(rows)} load samples: a run's series needs at least two")
    load, steal, last_t = [], [], -math.inf
    for k, (i, r) in enumerate(rows):
        try:
            vals = {c: float(r[c]) for c in HOST_SERIES_RANGES if c in r or c in ("load1", "steal_share")}
        except (KeyError, TypeError, ValueError) as e:
            raise RawRecordError(path, f"not a load series ({e})", line=i) from None
        for c, v in vals.items():
            lo, hi = HOST_SERIES_RANGES[c]
            if not math.isfinite(v):
                raise RawRecordError(path, f"{c} is {v}: a load sample is not a finite number", line=i)
            if not lo <= v <= hi:
                raise RawRecordError(path, f"{c} is {v:g}, outside [{lo:g}, {hi:g}]: "
                                           f"{'a load average or a time is never negative' if hi == math.inf else 'a share of CPU time'}",
                                     line=i)
        if "t_s" in vals:
            if vals["t_s"] < last_t:
                raise RawRecordError(path, f"t_s goes back ({vals['t_s']:g} after {last_t:g})", line=i)
            last_t = vals["t_s"]
        load.append(vals["load1"])
        if k:
            steal.append(vals["steal_share"])
    median = loadrule.median_load(load)
    cpus, summary = _host_summary(path.parent / HOST_YAML)
    if summary:  # what the monitor wrote beside the samples: over every sample but the first, rounded
        later = load[1:]
        loadrule.check_summary(summary.get("load1_mean"), sum(later) / len(later), 3, path.parent / HOST_YAML, path,
                               "host.yaml's host.series.load1_mean")
        loadrule.check_summary(summary.get("load1_max"), max(later), 2, path.parent / HOST_YAML, path,
                               "host.yaml's host.series.load1_max")
    return Load(float(np.mean(load)), max(load), float(np.mean(steal)), len(rows), median, cpus, path.parent)


def _host_summary(host_yaml: Path) -> tuple[int | None, dict[str, Any]]:
    """host.yaml's CPU count and its load series summary (empty where the run has no host.yaml)."""
    from ..yamlio import load_yaml

    if not host_yaml.is_file():
        return None, {}
    touch(host_yaml)
    host = (load_yaml(host_yaml.read_text(encoding="utf-8")) or {}).get("host") or {}
    cpus = host.get("cpus")
    return (int(cpus) if isinstance(cpus, int) else None), dict(host.get("series") or {})


def read_sent(path: str | Path, client_log: str | Path | None = None) -> dict[tuple[int, int], tuple[int, np.ndarray]]:
    """sent_blocks.npz: (session, index) -> (prompt tokens, block ids); checked (quietly) against
    the client log's answered requests when given."""
    from .clientlog import answered

    path = Path(path)
    touch(path)
    try:
        with np.load(path) as z:
            session, index, tokens, offsets, blocks = (z[k] for k in SENT_ARRAYS[:5])
    except ARCHIVE_ERRORS as e:
        raise archive_error(path, "sent-blocks record", e) from None
    if len(offsets) != len(tokens) + 1 or offsets[-1] != len(blocks):
        raise RawRecordError(path, "offsets do not cover the block ids")
    out = {(int(s), int(i)): (int(n), blocks[offsets[k]:offsets[k + 1]])
           for k, (s, i, n) in enumerate(zip(session, index, tokens))}
    if client_log is not None:
        with quiet():
            for s, i, sent, line in answered(Path(client_log)):
                got = out.get((s, i))
                if got is None or got[0] != sent:
                    raise RawRecordError(client_log, f"session {s} turn {i}: {path.name} has "
                                                     f"{'no such request' if got is None else f'{got[0]} tokens'}, "
                                                     f"the client sent {sent}", line=line)
    return out


def read_sent_block_tokens(path: str | Path) -> int:
    touch(path)
    try:
        with np.load(path) as z:
            return int(z["block_tokens"])
    except ARCHIVE_ERRORS as e:
        raise archive_error(path, "sent-blocks record", e) from None


def iter_folder(run_dir: str | Path) -> Iterator[Path]:
    """The record's files present in a folder (REQUIRED first, then the optional ones)."""
    for name in (*REQUIRED, HOST_YAML, HOST_SERIES, METRICS_SERIES):
        if (Path(run_dir) / name).is_file():
            yield Path(run_dir) / name

