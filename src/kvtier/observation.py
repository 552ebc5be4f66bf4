"""Old import path of the host metadata record (host.yaml): kvtier.records.host reads it."""

from .records.host import HostRecord, read_host, read_host_record

__all__ = ["HostRecord", "read_host", "read_host_record"]
