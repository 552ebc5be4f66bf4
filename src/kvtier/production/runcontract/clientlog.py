"""Old import path of the run contract's client-log check (kvtier.records.clientlog) and the
observation's length (kvtier.records.host)."""

from ...records.clientlog import TIME_FIELDS, client_lines
from ...records.host import observation_seconds

__all__ = ["TIME_FIELDS", "client_lines", "observation_seconds"]
