"""Old import path of the server log's line parser: kvtier.records.serverlog_parse (and
records.serverlog_read, records.startup_args) parse it now."""

from ..records.serverlog_parse import (ANSI, FACT_MARKERS, FLAT_KEYS, KEYS, LEGACY_KEYS, NUM, PREFIX, PREFIX_TEXT, STATS,
                                       STATS_COLUMNS, STATS_LINE, STATS_LINE_GROUPS, TRANSFER_COLUMNS, WORKER_MARKER,
                                       XFER_LINE, XFER_MARKER, XFER_PREFIX, _facts, _fixed_numbers, _parse_chunk,
                                       _stats_columns, _times, _transfer_bulk, _transfer_by_line, parse_transfer)
from ..records.serverlog_read import Segment, ServerLog, _segments
from ..records.startup_args import (MAX_REPR_CHARS, MAX_REPR_DEPTH, MAX_REPR_LITERAL, MAX_REPR_NODES, ReprError,
                                    python_repr)

__all__ = ["ANSI", "FACT_MARKERS", "FLAT_KEYS", "KEYS", "LEGACY_KEYS", "MAX_REPR_CHARS", "MAX_REPR_DEPTH", "MAX_REPR_LITERAL",
           "MAX_REPR_NODES", "NUM", "PREFIX", "PREFIX_TEXT", "STATS", "STATS_COLUMNS", "STATS_LINE", "STATS_LINE_GROUPS",
           "TRANSFER_COLUMNS", "WORKER_MARKER", "XFER_LINE", "XFER_MARKER", "XFER_PREFIX", "ReprError", "Segment", "ServerLog",
           "_facts", "_fixed_numbers", "_parse_chunk", "_segments", "_stats_columns", "_times", "_transfer_bulk",
           "_transfer_by_line", "parse_transfer", "python_repr"]
