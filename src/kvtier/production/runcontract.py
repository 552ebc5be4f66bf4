"""The data contract of one measured server run on the CPU build, checked by every reader of one.

A kvtier-replay capture (production on the CPU build), a sweep run and a live lab setup all
consist of a server log, /metrics snapshots, the run's record (run.yaml) and a client log; each
reader calls the checks here, so a fix is made in one place:

- counters: finite and never negative, in every snapshot (`check_counters`);
- one server run: no counter lower at the end than at the start, no `_created` stamp that
  moved (`check_no_restart`): a restart in the middle resets the counters, and differences of
  snapshots then mean nothing;
- one pool geometry: run.yaml's pool bytes, the connector config (run.yaml's command and the
  server's "non-default args" line), the offload worker's startup line and `cache_config_info`
  must agree, and none of those lines may appear twice with different values (`check_geometry`);
- worker job lines: each job once, in order, of a possible size, and together equal to the
  offload counters over the run (`job_lines`, `check_jobs`);
- client log: times that can be (not negative, no first token after the answer, nothing after
  the observation ended), no request twice, a last line that was not cut (`client_lines`).

Each failure is a RawRecordError naming the file and line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import RawRecordError, capped_lines, jsonl_records
from .. import offload_worker
from .promtext import Snapshot, read_prometheus

GIB = 2**30
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
ARGS_MARK = "non-default args: "
JOB = re.compile(r"kvtier_cpu_offload: (load|store) job (\d+): (\d+) blocks, (\d+) bytes, (\S+) s\s*$")
JOB_MARK = re.compile(r"kvtier_cpu_offload: (load|store) job ")
JOB_COUNTERS = {"load": ("vllm:kv_offload_load_bytes_total", "vllm:kv_offload_load_size_count"),
                "store": ("vllm:kv_offload_store_bytes_total", "vllm:kv_offload_store_size_count")}


def _is_counter(name: str) -> bool:
    return name.endswith(COUNTER_SUFFIXES) and "_created" not in name


def _shown(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")


# ---------------------------------------------------------------- counters
def check_counters(snap: Snapshot) -> None:
    """Every sample finite; every counter (and histogram part) not negative."""
    s = snap.samples
    v = s["value"].to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(v))
    if len(bad):
        r = s.iloc[int(bad[0])]
        raise RawRecordError(snap.path, f"{r['name']} is {r['value']}: a counter or gauge of a measured run must be finite",
                             line=int(r["line"]))
    neg = np.flatnonzero((v < 0) & s["name"].map(_is_counter).to_numpy(bool))
    if len(neg):
        r = s.iloc[int(neg[0])]
        raise RawRecordError(snap.path, f"{r['name']} is {r['value']}: counters are never negative", line=int(r["line"]))


NEEDED = ("vllm:prompt_tokens_total", "vllm:prompt_tokens_by_source_total", "vllm:cache_config_info")


def check_needed(snap: Snapshot, needed: tuple[str, ...] = NEEDED) -> None:
    """The snapshot holds samples, and the series every reader of a run needs (tokens by source:
    where the prompts came from; cache_config_info: the server's blocks)."""
    if snap.samples.empty:
        raise RawRecordError(snap.path, "an empty /metrics snapshot: the run's counters cannot be read (a failed scrape?)")
    missing = [n for n in needed if not snap.has(n)]
    if missing:
        raise RawRecordError(snap.path, f"/metrics snapshot without {', '.join(missing)}: the run's tokens by source and "
                                        "the server's blocks cannot be verified")


def check_no_restart(start: Snapshot, end: Snapshot) -> None:
    """`end` was scraped from the same server run as `start`, later: no counter went down and no
    `_created` stamp changed (a restart in the middle starts the counters again from zero)."""
    a = start.samples.set_index(["name", "labels"])
    b = end.samples.set_index(["name", "labels"])
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    if both.empty:
        return
    names = both.index.get_level_values("name")
    created = both[names.str.endswith("_created") & (both["value_a"] != both["value_b"])]
    if len(created):
        (n, ls), r = next(iter(created.iterrows()))
        raise RawRecordError(end.path, f"{_shown(n, ls)} is {r['value_b']}, {r['value_a']} in {start.path} (line "
                                       f"{int(r['line_a'])}): the server restarted during the run", line=int(r["line_b"]))
    down = both[names.map(_is_counter).to_numpy(bool) & (both["value_b"] < both["value_a"])]
    if len(down):
        (n, ls), r = next(iter(down.sort_values("line_b").iterrows()))
        raise RawRecordError(end.path, f"{_shown(n, ls)} is {r['value_b']:g} at the end, lower than {r['value_a']:g} at the "
                                       f"start ({start.path}:{int(r['line_a'])}): the server restarted during the run "
                                       "(its counters began again from zero)", line=int(r["line_b"]))


# The series a per-request reader (the lab on the CPU build) takes differences of, checked in each
# scrape and against the scrape before; the other series of those scrapes are never read.
PER_REQUEST_SERIES = ("vllm:prompt_tokens_total", "vllm:prompt_tokens_by_source_total", "vllm:generation_tokens_total",
                      "vllm:request_success_total", "vllm:kv_offload_load_bytes_total", "vllm:kv_offload_store_bytes_total",
                      "vllm:prompt_tokens_by_source_created")


def check_series(snap: Any, before: Any = None, names: tuple[str, ...] = PER_REQUEST_SERIES) -> None:
    """check_needed, check_counters and check_no_restart on the series `names` only, for a lazy
    kvtier.serving.metrics.Snapshot (`before`: the scrape before, or None)."""
    for n in ("vllm:prompt_tokens_by_source_total", "vllm:cache_config_info"):
        if not snap.has(n):
            raise RawRecordError(snap.source, f"/metrics snapshot without {n}: the run's tokens by source and the "
                                              "server's blocks cannot be verified")
    prev = {(s.name, tuple(sorted(s.labels.items()))): (s.value, ln) for n in names for s, ln in before.lines_of(n)} \
        if before is not None else {}
    for n in names:
        for s, line in snap.lines_of(n):
            if not math.isfinite(s.value):
                raise RawRecordError(snap.source, f"{s.name} is {s.value}: a counter or gauge of a measured run must be finite",
                                     line=line)
            if s.value < 0 and _is_counter(s.name):
                raise RawRecordError(snap.source, f"{s.name} is {s.value}: counters are never negative", line=line)
            old = prev.get((s.name, tuple(sorted(s.labels.items()))))
            if old is None:
                continue
            shown = _shown(s.name, tuple(sorted(s.labels.items())))
            if s.name.endswith("_created") and s.value != old[0]:
                raise RawRecordError(snap.source, f"{shown} is {s.value}, {old[0]} in {before.source} (line {old[1]}): "
                                                  "the server restarted during the run", line=line)
            if _is_counter(s.name) and s.value < old[0]:
                raise RawRecordError(snap.source, f"{shown} is {s.value:g}, lower than {old[0]:g} in the scrape before "
                                                  f"({before.source}:{old[1]}): the server restarted during the run "
                                                  "(its counters began again from zero)", line=line)


def cache_config(snap: Snapshot) -> tuple[dict[str, str], int] | None:
    """cache_config_info's labels and line; two samples with other labels are an error."""
    rows = snap.select("vllm:cache_config_info")
    if rows.empty:
        return None
    first = dict(rows["labels"].iloc[0])
    for ls, line in zip(rows["labels"].iloc[1:], rows["line"].iloc[1:]):
        other = {k: v for k, v in dict(ls).items() if k != "engine"}
        if other != {k: v for k, v in first.items() if k != "engine"}:
            diff = sorted(k for k in set(other) | set(first) if k != "engine" and other.get(k) != first.get(k))
            raise RawRecordError(snap.path, f"vllm:cache_config_info appears again with other values ({', '.join(diff)}; "
                                            f"first on line {int(rows['line'].iloc[0])})", line=int(line))
    return first, int(rows["line"].iloc[0])


# ---------------------------------------------------------------- server-log lines
@dataclass(frozen=True)
class LogFacts:
    """The server log's lines that state the run's geometry, and its job lines, with line numbers."""

    path: Path
    worker: dict[str, int] | None           # the offload worker's startup line (all agree), with "line"
    args: dict[str, Any] | None             # the "non-default args" (all agree), with "line" beside
    args_line: int | None
    jobs: list[tuple[int, str, int, int, int, float]]  # line, kind, job, blocks, bytes, seconds


def read_log_facts(path: str | Path) -> LogFacts:
    """One pass over the server log (lines capped, errors.MAX_LINE): the worker's startup lines
    (all must agree), the "non-default args" lines (all must agree: one server run), every job line."""
    from .vllmlog import PREFIX, ReprError, python_repr

    path = Path(path)
    worker: dict[str, int] | None = None
    args: dict[str, Any] | None = None
    args_line = None
    jobs: list[tuple[int, str, int, int, int, float]] = []
    for lineno, text, _ in capped_lines(path, errors="replace"):
        if "kvtier_cpu_offload: " not in text and ARGS_MARK not in text:
            continue
        if offload_worker.MARKER in text:
            found = offload_worker.worker_facts(text)
            if found is not None:
                if worker is not None and {k: v for k, v in worker.items() if k != "line"} != found:
                    raise RawRecordError(path, f"the offload worker's startup line appears again with other values "
                                               f"({_diff(worker, found)}; first on line {worker['line']})", line=lineno)
                worker = worker or {**found, "line": lineno}
        elif JOB_MARK.search(text):
            m = JOB.search(text)
            if m is None:
                raise RawRecordError(path, "a kvtier_cpu_offload job line not in the format "
                                           "'load|store job N: B blocks, BYTES bytes, S s' (truncated?)", line=lineno)
            try:
                seconds = float(m.group(5))
            except ValueError:
                seconds = math.nan
            jobs.append((lineno, m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), seconds))
        elif ARGS_MARK in text:
            m = PREFIX.match(text)
            if m is None or not text[m.end():].startswith(ARGS_MARK):
                continue
            try:
                found_args = python_repr(text[m.end() + len(ARGS_MARK):])
            except ReprError as e:
                raise RawRecordError(path, f"non-default args is not a Python dict of literals and dataclass reprs ({e})",
                                     line=lineno) from None
            if not isinstance(found_args, dict):
                raise RawRecordError(path, "non-default args is not a dict", line=lineno)
            if args is not None and _without_ids(found_args) != _without_ids(args):
                raise RawRecordError(path, f"a second 'non-default args' line with other values (first on line {args_line}): "
                                           "two server runs in one record", line=lineno)
            if args is None:
                args, args_line = found_args, lineno
    return LogFacts(path, worker, args, args_line, jobs)


def _without_ids(args: dict[str, Any]) -> dict[str, Any]:
    """The args without what differs per launch by design (the connector's engine id and port)."""
    out = dict(args)
    ktc = out.get("kv_transfer_config")
    if isinstance(ktc, dict):
        out["kv_transfer_config"] = {k: v for k, v in ktc.items() if k not in ("engine_id", "kv_port")}
    return out


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = sorted(k for k in set(a) | set(b) if k != "line" and a.get(k) != b.get(k))
    return ", ".join(f"{k} {a.get(k)} vs {b.get(k)}" for k in keys)


# ---------------------------------------------------------------- geometry
def _connector_of_command(command: list[str] | None) -> dict[str, Any] | None:
    """kv_connector_extra_config of the --kv-transfer-config in run.yaml's command (JSON)."""
    cmd = list(command or [])
    for i, a in enumerate(cmd):
        value = None
        if a == "--kv-transfer-config" and i + 1 < len(cmd):
            value = cmd[i + 1]
        elif a.startswith("--kv-transfer-config="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return dict(json.loads(value).get("kv_connector_extra_config") or {})
            except (ValueError, AttributeError, TypeError):
                return None
    return None


def _server_block(command: list[str] | None) -> int | None:
    cmd = list(command or [])
    for i, a in enumerate(cmd):
        if a.startswith("--block-size="):
            return int(a.split("=", 1)[1])
        if a == "--block-size" and i + 1 < len(cmd):
            return int(cmd[i + 1])
    return None


def check_geometry(run_yaml: Path, server: dict[str, Any], log: LogFacts, snaps: list[Snapshot]) -> None:
    """The pool and the server's blocks as each source states them, compared with each other:
    run.yaml's pool bytes (offload_gib), the connector config in run.yaml's command and in the
    server's startup args (cpu_bytes_to_use, block_size), the offload worker's line (bytes per
    offloaded and per server block, blocks per chunk, chunks) and cache_config_info (block_size,
    the same in every snapshot). A source that is absent is not compared."""
    infos = [(s, c) for s in snaps for c in [cache_config(s)] if c is not None]
    for (s0, (c0, l0)), (s1, (c1, l1)) in zip(infos, infos[1:]):
        if c0.get("block_size") != c1.get("block_size") or c0.get("num_gpu_blocks") != c1.get("num_gpu_blocks"):
            raise RawRecordError(s1.path, f"vllm:cache_config_info block_size {c1.get('block_size')} / num_gpu_blocks "
                                          f"{c1.get('num_gpu_blocks')}, {c0.get('block_size')} / {c0.get('num_gpu_blocks')} in "
                                          f"{s0.path}:{l0}: not one server", line=l1)
    cmd = server.get("command")
    claims: list[tuple[str, str, int | None, Any]] = []  # (quantity, source file, line, value)
    if server.get("offload_gib") and server.get("tier") not in (None, "none"):
        claims.append(("pool bytes", str(run_yaml), _line_with(run_yaml, "offload_gib:"),
                       int(round(float(server["offload_gib"]) * GIB))))
    conf_cmd = _connector_of_command(cmd)
    if conf_cmd:
        if "cpu_bytes_to_use" in conf_cmd:
            claims.append(("pool bytes", f"{run_yaml} (its command's --kv-transfer-config)",
                           _line_with(run_yaml, '"cpu_bytes_to_use"'), int(conf_cmd["cpu_bytes_to_use"])))
        if "block_size" in conf_cmd:
            claims.append(("pool block tokens", f"{run_yaml} (its command's --kv-transfer-config)",
                           _line_with(run_yaml, '"cpu_bytes_to_use"'), int(conf_cmd["block_size"])))
    if server.get("offload_block_tokens") and server.get("tier") not in (None, "none"):
        claims.append(("pool block tokens", str(run_yaml), _line_with(run_yaml, "offload_block_tokens:"),
                       int(server["offload_block_tokens"])))
    args = log.args or {}
    conf_log = ((args.get("kv_transfer_config") or {}) if isinstance(args.get("kv_transfer_config"), dict) else {}) \
        .get("kv_connector_extra_config") or {}
    if "cpu_bytes_to_use" in conf_log:
        claims.append(("pool bytes", str(log.path), log.args_line, int(conf_log["cpu_bytes_to_use"])))
    if "block_size" in conf_log:
        claims.append(("pool block tokens", str(log.path), log.args_line, int(conf_log["block_size"])))
    server_blocks: list[tuple[str, int | None, int]] = []
    if _server_block(cmd) is not None:
        server_blocks.append((f"{run_yaml} (its command's --block-size)", _line_with(run_yaml, "--block-size"),
                              int(_server_block(cmd))))  # type: ignore[arg-type]
    if args.get("block_size") is not None:
        server_blocks.append((str(log.path), log.args_line, int(args["block_size"])))
    for s, (c, line) in infos[:1]:
        if c.get("block_size") not in (None, "None", ""):
            server_blocks.append((str(s.path), line, int(c["block_size"])))
    _agree("server block tokens", server_blocks)
    _agree("pool bytes", [(src, line, value) for q, src, line, value in claims if q == "pool bytes"])
    w = log.worker
    if w is not None:
        per_dev, per_chunk = w.get("bytes_per_device_block"), w.get("blocks_per_chunk")
        if per_dev is not None and per_chunk is not None and per_dev * per_chunk != w["bytes_per_offloaded_block"]:
            raise RawRecordError(log.path, f"the offload worker says {per_chunk} blocks of {per_dev} bytes per offloaded block "
                                           f"but bytes_per_offloaded_block={w['bytes_per_offloaded_block']}", line=w["line"])
        if per_chunk is not None and server_blocks:
            claims.append(("pool block tokens", f"{log.path} (offload worker x server block)", w["line"],
                           int(per_chunk) * server_blocks[0][2]))
        if "host_chunks" in w:
            for what, src, line, value in [c for c in claims if c[0] == "pool bytes"]:
                if value // w["bytes_per_offloaded_block"] != w["host_chunks"]:
                    raise RawRecordError(log.path, f"the offload worker holds {w['host_chunks']} chunks of "
                                                   f"{w['bytes_per_offloaded_block']} bytes, but {src}"
                                                   f"{'' if line is None else ':' + str(line)} gives a pool of {value} bytes "
                                                   f"({value // w['bytes_per_offloaded_block']} chunks)", line=w["line"])
    _agree("pool block tokens", [(src, line, value) for q, src, line, value in claims if q == "pool block tokens"])


def _agree(quantity: str, sources: list[tuple[str, int | None, int]]) -> None:
    """All sources state one value; else the error names a source off the value most of them
    state (the odd one out; the first one of another value when there is no majority)."""
    if len({v for _, _, v in sources}) <= 1:
        return
    values = [v for _, _, v in sources]
    common = max(values, key=lambda v: (values.count(v), -values.index(v)))
    src, line, value = next(x for x in sources if x[2] != common)
    others = "; ".join(f"{_where(s, ln)} says {v}" for s, ln, v in sources if v == common)
    path, _, what = src.partition(" (")
    raise RawRecordError(path, f"{quantity} {value}{' (' + what if what else ''}, but {others}: the run's sources disagree "
                               "on its geometry", line=line)


def _where(src: str, line: int | None) -> str:
    path, _, what = src.partition(" (")
    return path + ("" if line is None else f":{line}") + (f" ({what}" if what else "")


def _line_with(path: Path, text: str) -> int | None:
    """The first line of a small record (run.yaml) that holds `text`, to name it."""
    try:
        return next((i for i, l in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in l), None)
    except OSError:
        return None


# ---------------------------------------------------------------- job lines
def check_jobs(log: LogFacts, start: Snapshot | None, end: Snapshot) -> None:
    """Each job once and in order (the worker numbers them as it takes them), of a possible size
    (at least one block, bytes = blocks x the worker's bytes per server block, no more blocks than
    the pool holds, a finite, non-negative time), and per kind (load, store) as many jobs and as
    many bytes as the offload counters grew by over the run."""
    if not log.jobs:
        return
    w = log.worker or {}
    per_dev, capacity = w.get("bytes_per_device_block"), None
    if "host_chunks" in w and "blocks_per_chunk" in w:
        capacity = w["host_chunks"] * w["blocks_per_chunk"]
    seen: dict[int, int] = {}
    last = -1
    for line, kind, job, blocks, nbytes, seconds in log.jobs:
        if job in seen:
            raise RawRecordError(log.path, f"{kind} job {job} logged twice (first on line {seen[job]})", line=line)
        if job < last:
            raise RawRecordError(log.path, f"{kind} job {job} after job {last}: job lines out of order", line=line)
        seen[job], last = line, job
        if blocks <= 0 or (capacity is not None and blocks > capacity):
            raise RawRecordError(log.path, f"{kind} job {job} of {blocks} blocks: impossible (the pool holds "
                                           f"{capacity if capacity is not None else 'an unknown number of'} blocks)", line=line)
        if per_dev is not None and nbytes != blocks * per_dev:
            raise RawRecordError(log.path, f"{kind} job {job}: {nbytes} bytes for {blocks} blocks of {per_dev} bytes "
                                           "(the offload worker's bytes_per_device_block)", line=line)
        if not math.isfinite(seconds) or seconds < 0:
            raise RawRecordError(log.path, f"{kind} job {job} took {seconds} s: impossible", line=line)
    for kind, (bytes_name, count_name) in JOB_COUNTERS.items():
        mine = [j for j in log.jobs if j[1] == kind]
        for name, got in ((bytes_name, float(sum(j[4] for j in mine))), (count_name, float(len(mine)))):
            if not end.has(name):
                continue
            grew = end.value(name) - (start.value(name) if start is not None and start.has(name) else 0.0)
            if got != grew:
                what = "bytes" if name == bytes_name else "jobs"
                raise RawRecordError(log.path, f"the {kind} job lines add up to {got:,.0f} {what}, but {name} grew by "
                                               f"{grew:,.0f} over the run ({end.path}:{end.first_line(name)}): a job line "
                                               "lost, repeated, or from another run", line=mine[-1][0] if mine else None)


# ---------------------------------------------------------------- client log
def observation_seconds(host_yaml: Path) -> float | None:
    """How long the run's observation lasted (host.yaml observation start..end), or None."""
    from ..yamlio import load_yaml

    if not host_yaml.is_file():
        return None
    obs = (load_yaml(host_yaml.read_text(encoding="utf-8")) or {}).get("observation") or {}
    try:
        return (datetime.fromisoformat(str(obs["end"])) - datetime.fromisoformat(str(obs["start"]))).total_seconds()
    except (KeyError, ValueError, TypeError):
        return None


TIME_FIELDS = ("sent_s", "first_chunk_s", "total_s")


def client_lines(path: str | Path, run_seconds: float | None = None,
                 not_json: str = "not JSON") -> Iterator[tuple[int, str, dict[str, Any]]]:
    """A client log's records (line number, text, record), each a JSON object whose times can
    be: no time negative or not finite, the first chunk not after the answer's end, the answer
    not ending after the observation did (`run_seconds` from its start, when known); no request
    (session, index) answered twice; the last line not cut."""
    path = Path(path)
    seen: dict[tuple[Any, Any], int] = {}
    for lineno, line, rec in jsonl_records(path, whole_last_line=True, not_json=not_json):
        if not isinstance(rec, dict):
            raise RawRecordError(path, "not a JSON object", line=lineno, record=line)
        for name in TIME_FIELDS:
            v = rec.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (not math.isfinite(v) or v < 0):
                raise RawRecordError(path, f"{name} is {v}: an impossible time", line=lineno, record=line)
        first, total, sent = rec.get("first_chunk_s"), rec.get("total_s"), rec.get("sent_s")
        if isinstance(first, (int, float)) and isinstance(total, (int, float)) and first > total:
            raise RawRecordError(path, f"first_chunk_s {first} outside 0..{total} (total_s): a first chunk after the answer "
                                       "ended", line=lineno, record=line)
        if run_seconds is not None and isinstance(sent, (int, float)) and isinstance(total, (int, float)) \
                and sent + total > run_seconds:
            raise RawRecordError(path, f"the answer ends {sent + total:.1f} s in, after the run's observation ended "
                                       f"({run_seconds:.0f} s, host.yaml): a line of another run?", line=lineno, record=line)
        if rec.get("status") == "ok" and "session" in rec and "index" in rec:
            key = (rec["session"], rec["index"])
            if key in seen:
                raise RawRecordError(path, f"session {key[0]} turn {key[1]} answered twice (first on line {seen[key]})",
                                     line=lineno)
            seen[key] = lineno
        yield lineno, line, rec


# ---------------------------------------------------------------- a whole run folder
def check_run_folder(run_dir: str | Path, end: Snapshot | None = None, start_name: str = "metrics_start.prom",
                     end_name: str = "metrics.prom") -> LogFacts:
    """Every check above on a kvtier-replay run folder (run.yaml, server.log, the two snapshots;
    `end`: the final snapshot, already read); returns the server log's facts. The client log is
    checked by its reader (client_lines)."""
    from ..yamlio import load_yaml

    run_dir = Path(run_dir)
    meta = load_yaml((run_dir / "run.yaml").read_text(encoding="utf-8")) or {}
    start = read_prometheus(run_dir / start_name) if (run_dir / start_name).is_file() else None
    end = end if end is not None else read_prometheus(run_dir / end_name)
    for s in (start, end):
        if s is not None:
            check_needed(s)
            check_counters(s)
    if start is not None:
        check_no_restart(start, end)
    log = read_log_facts(run_dir / "server.log") if (run_dir / "server.log").is_file() else LogFacts(run_dir / "server.log", None,
                                                                                                      None, None, [])
    check_geometry(run_dir / "run.yaml", dict(meta.get("server") or {}), log, [s for s in (start, end) if s is not None])
    check_jobs(log, start, end)
    return log
