"""Old import path of the run contract's reading of the server log: kvtier.records.serverlog_facts."""

from ...records.serverlog_facts import ARGS_MARK, JOB, JOB_MARK, LogFacts, read_log_facts

__all__ = ["ARGS_MARK", "JOB", "JOB_MARK", "LogFacts", "read_log_facts"]
