"""The data contract of one measured server run on the CPU build, checked by every reader of one.

A kvtier replay capture (production on the CPU build), a sweep run and a live lab setup all
consist of a server log, /metrics snapshots, the run's record (run.yaml) and a client log; each
reader calls the checks here, so a fix is made in one place:

- counters: finite and never negative, in every snapshot (`check_counters`); the prompt tokens by
  source adding up to vllm:prompt_tokens_total per engine, exactly (`check_prompt_sources`);
- one server run: no counter lower at the end than at the start, no `_created` stamp that
  moved (`check_no_restart`): a restart in the middle resets the counters, and differences of
  snapshots then mean nothing;
- one pool geometry: run.yaml's pool bytes, the connector config (run.yaml's command and the
  server's "non-default args" line), the offload worker's startup line and `cache_config_info`
  must agree, and none of those lines may appear twice with different values; the store-bytes
  counters come in whole chunks of that pool (`check_geometry`, `geometry.check_whole_chunks`);
- worker job lines: each job once, in order, of a possible size, and together equal to the
  offload counters over the run (`job_lines`, `check_jobs`);
- client log: times that can be (not negative, no first token after the answer, nothing after
  the observation ended), no request twice, a last line that was not cut (`client_lines`).

Each failure is a RawRecordError naming the file and line.

The checks live with the record kinds they read: `runcontract_counters`, `runcontract_jobs`,
`geometry.check_geometry`, `clientlog.client_lines`, the server log's lines read by
`serverlog_facts`; `check_run_folder` here runs them all on a kvtier replay run folder.
kvtier.production.runcontract is the old import path.
"""

from __future__ import annotations

from pathlib import Path

from .prometheus import Snapshot, read_prometheus
from .clientlog import TIME_FIELDS, client_lines
from .host import observation_seconds
from .runcontract_counters import (NEEDED, PER_REQUEST_SERIES, cache_config, check_counters, check_needed, check_no_restart,
                                   check_prompt_sources, check_series)
from .geometry import check_geometry
from .runcontract_jobs import JOB_COUNTERS, check_jobs
from .serverlog_facts import JOB, LogFacts, read_log_facts

__all__ = ["JOB", "JOB_COUNTERS", "NEEDED", "PER_REQUEST_SERIES", "TIME_FIELDS", "LogFacts", "cache_config", "check_counters",
           "check_geometry", "check_jobs", "check_needed", "check_no_restart", "check_prompt_sources", "check_run_folder",
           "check_series", "client_lines", "observation_seconds", "read_log_facts"]


def check_run_folder(run_dir: str | Path, end: Snapshot | None = None, start_name: str = "metrics_start.prom",
                     end_name: str = "metrics.prom", start: Snapshot | None = None) -> LogFacts:
    """Every check above on a kvtier replay run folder (run.yaml, server.log, the two snapshots;
    `end`, `start`: the final and first snapshots, already read, so a reader that keeps them
    parses each scrape once); returns the server log's facts. The client log is checked by its
    reader (client_lines)."""
    from ..yamlio import load_yaml

    run_dir = Path(run_dir)
    meta = load_yaml((run_dir / "run.yaml").read_text(encoding="utf-8")) or {}
    if start is None and (run_dir / start_name).is_file():
        start = read_prometheus(run_dir / start_name)
    end = end if end is not None else read_prometheus(run_dir / end_name)
    for s in (start, end):
        if s is not None:
            check_needed(s)
            check_counters(s)
            check_prompt_sources(s)
    if start is not None:
        check_no_restart(start, end)
    log = read_log_facts(run_dir / "server.log") if (run_dir / "server.log").is_file() else LogFacts(run_dir / "server.log", None,
                                                                                                      None, None, [])
    check_geometry(run_dir / "run.yaml", dict(meta.get("server") or {}), log, [s for s in (start, end) if s is not None])
    check_jobs(log, start, end)
    return log
