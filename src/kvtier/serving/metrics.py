"""Old import path of the /metrics snapshot: kvtier.records.prometheus is the one parser."""

from ..records.prometheus import Sample, Snapshot
from ..records.vllm import CACHED_BY_SOURCE, PROMPT_BY_SOURCE, SOURCES

__all__ = ["CACHED_BY_SOURCE", "PROMPT_BY_SOURCE", "SOURCES", "Sample", "Snapshot"]
