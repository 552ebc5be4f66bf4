"""Old import path of the production data contract: the checks run in the readers of the records
they check, kvtier.records.prometheus_contract (the snapshot) and records.serverlog_contract (the
server log, and the log against the snapshot)."""

from ..records.prometheus_contract import (BY_SOURCE, PROMPT_TOTAL, REQUIRED, SOURCES, check_histogram, check_period,
                                           check_snapshot, check_sources, check_units, stitch_counters)
from ..records.serverlog_contract import (LogChecker, Repair, check_engines, check_log, check_runs, counter_limits,
                                          repairs_frame)

__all__ = ["BY_SOURCE", "PROMPT_TOTAL", "REQUIRED", "SOURCES", "LogChecker", "Repair", "check_engines", "check_histogram",
           "check_log", "check_period", "check_runs", "check_snapshot", "check_sources", "check_units", "counter_limits",
           "repairs_frame", "stitch_counters"]
