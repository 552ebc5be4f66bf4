"""The host metadata record (host.yaml): the observation period the server's counters cover.

Read in one place, with one set of checks, by every rule that needs the period.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from .errors import RawRecordError
from .yamlio import load_yaml


def read_host(path: str | Path) -> tuple[dict[str, Any], datetime, datetime]:
    """The parsed record, and the observation period's start and end."""
    data = load_yaml(Path(path).read_text(encoding="utf-8"))
    try:
        obs = data["observation"]
        start, end = (v if isinstance(v, datetime) else datetime.fromisoformat(str(v)) for v in (obs["start"], obs["end"]))
    except (KeyError, TypeError, ValueError) as e:
        raise RawRecordError(path, f"observation.start/end missing or not ISO timestamps ({e})") from None
    if end <= start:
        raise RawRecordError(path, f"observation.end {end} is not after observation.start {start}")
    return data, start, end
