"""Old import path of the offload worker's startup line: kvtier.records.workerlog reads it."""

from .records.workerlog import FIELD, LINE, MARKER, worker_facts, worker_facts_from_log

__all__ = ["FIELD", "LINE", "MARKER", "worker_facts", "worker_facts_from_log"]
