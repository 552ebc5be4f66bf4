"""Old import path of the server log's summary: kvtier.records.serverlog is the server log's record."""

from ..records.serverlog import LOAD_COLUMNS, LogSummary, Summarizer, summarize_server_log, summary_of

__all__ = ["LOAD_COLUMNS", "LogSummary", "Summarizer", "summarize_server_log", "summary_of"]
