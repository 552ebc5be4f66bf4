"""The run contract's reading of the server log: the lines that state the geometry, and the job lines.

One capped pass over the lines (no bulk parse): the offload worker's startup line, the
"non-default args" lines and every job line of the worker (kvtier.records.workerlog), each
with its line number; a repeat with other values is an error naming both lines.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RawRecordError, capped_lines
from . import vllm as V
from . import workerlog
from .startup_args import ReprError, python_repr
from .touch import PathTouching
from .workerlog import JOB, JOB_MARK

ARGS_MARK = V.ARGS_MARKER
PREFIX = re.compile(V.LOG_PREFIX)  # not serverlog_parse's: this reader imports no numpy or pandas


@dataclass(frozen=True)
class LogFacts(PathTouching):  # its data touches its file (records.touch)
    """The server log's lines that state the run's geometry, and its job lines, with line numbers."""

    path: Path
    worker: dict[str, int] | None           # the offload worker's startup line (all agree), with "line"
    args: dict[str, Any] | None             # the "non-default args" (all agree), with "line" beside
    args_line: int | None
    jobs: list[tuple[int, str, int, int, int, float]]  # line, kind, job, blocks, bytes, seconds


def read_log_facts(path: str | Path) -> LogFacts:
    """One pass over the server log (lines capped, errors.MAX_LINE): the worker's startup lines
    (all must agree), the "non-default args" lines (all must agree: one server run), every job line."""
    path = Path(path)
    worker: dict[str, int] | None = None
    args: dict[str, Any] | None = None
    args_line = None
    jobs: list[tuple[int, str, int, int, int, float]] = []
    for lineno, text, _ in capped_lines(path, errors="replace"):
        if "kvtier_cpu_offload: " not in text and ARGS_MARK not in text:
            continue
        if workerlog.MARKER in text:
            found = workerlog.worker_facts(text)
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
