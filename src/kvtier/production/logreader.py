"""Old import path of the server log's range reader: kvtier.records.serverlog_read reads it now."""

from ..records.serverlog_read import (CHUNK, PARALLEL_FROM, STATS_TABLE, TRANSFER_TABLE, V0_MARKER, LogChunk, LogReader,
                                      _spans, read_server_log, v0_stats_line)

__all__ = ["CHUNK", "PARALLEL_FROM", "STATS_TABLE", "TRANSFER_TABLE", "V0_MARKER", "LogChunk", "LogReader", "_spans",
           "read_server_log", "v0_stats_line"]
