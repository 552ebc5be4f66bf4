"""The old import path of the eviction run's reader and writer (kvtier.records.evictionrun)."""

from ..records.evictionrun import (FORMAT, MEASURED_PHASES, REQUEST_SCHEMA, RUN_SCHEMA, SCHEMA_DIR, EvictionRun, Run,
                                   RunWriter, find_runs, parse_phase_id, phase_ids, read_jsonl_lines, read_run)

__all__ = ["FORMAT", "MEASURED_PHASES", "REQUEST_SCHEMA", "RUN_SCHEMA", "SCHEMA_DIR", "EvictionRun", "Run", "RunWriter",
           "find_runs", "parse_phase_id", "phase_ids", "read_jsonl_lines", "read_run"]
