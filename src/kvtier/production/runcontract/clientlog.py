"""The run contract's client-log check: times that can be, no request twice, the last line whole.

The check itself runs in the client log's reader (kvtier.records.clientlog.client_lines); this
module keeps its old name and the observation's length (host.yaml) the check is given.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ...records.clientlog import TIME_FIELDS, client_lines

__all__ = ["TIME_FIELDS", "client_lines", "observation_seconds"]


def observation_seconds(host_yaml: Path) -> float | None:
    """How long the run's observation lasted (host.yaml observation start..end), or None."""
    from ...yamlio import load_yaml

    if not host_yaml.is_file():
        return None
    obs = (load_yaml(host_yaml.read_text(encoding="utf-8")) or {}).get("observation") or {}
    try:
        return (datetime.fromisoformat(str(obs["end"])) - datetime.fromisoformat(str(obs["start"]))).total_seconds()
    except (KeyError, ValueError, TypeError):
        return None
