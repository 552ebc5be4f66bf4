"""Old import path of the Prometheus parser: kvtier.records.prometheus is the one parser."""

from ..records.prometheus import COLUMNS, Histogram, Snapshot, parse_prometheus, read_prometheus
from ..records.vllm import LEGACY_FAMILIES, LEGACY_OFFLOAD

__all__ = ["COLUMNS", "Histogram", "LEGACY_FAMILIES", "LEGACY_OFFLOAD", "Snapshot", "parse_prometheus", "read_prometheus"]
