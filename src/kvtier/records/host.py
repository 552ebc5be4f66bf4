"""Host facts (host.yaml): the observation period the server's counters cover, and the host.

One reader with one set of checks for every rule that needs the period, and one writer (the
replica generator's). The record touches its file when its data is read (records.touch).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from ..errors import RawRecordError
from ..yamlio import load_yaml
from .touch import PathTouching

DEFAULT_INTERVAL_S = 10.0  # vLLM's stats interval when host.yaml does not say


@dataclass(frozen=True, eq=False)
class HostRecord(PathTouching):  # its data touches its file (records.touch)
    """host.yaml as read: the parsed mapping and the observation period it states."""

    path: str
    data: dict[str, Any]
    start: datetime
    end: datetime

    @property
    def log_year(self) -> int:
        """The year of the server log's timestamps (they carry none): observation.log_year, else the start's."""
        return int((self.data.get("observation") or {}).get("log_year", self.start.year))

    @property
    def interval_s(self) -> float:
        """The server's report interval (server.stats_interval_s; vLLM's default otherwise)."""
        return float((self.data.get("server") or {}).get("stats_interval_s", DEFAULT_INTERVAL_S))

    def facts(self) -> list[tuple[str, float, str]]:
        """The host facts it holds, in the production record's terms (vcpus, ram_gib, the model's
        facts) or kvtier replay's (cpus, ram_bytes), as (name, value in base units, unit); what is
        absent is not listed."""
        return host_facts(self.data, self.path)


def read_host_record(path: str | Path) -> HostRecord:
    """host.yaml, checked: observation.start and .end ISO timestamps, the end after the start."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise RawRecordError(path, f"not YAML ({e})") from None
    try:
        obs = data["observation"]
        start, end = (v if isinstance(v, datetime) else datetime.fromisoformat(str(v)) for v in (obs["start"], obs["end"]))
    except (KeyError, TypeError, ValueError) as e:
        raise RawRecordError(path, f"observation.start/end missing or not ISO timestamps ({e})") from None
    if end <= start:
        raise RawRecordError(path, f"observation.end {end} is not after observation.start {start}")
    _plausible_host(path, text, data)
    return HostRecord(str(path), data, start, end)


# host.yaml's load fields (kvtier replay's, kvtier.hostload's summary) and their ranges: a load
# average, a time or a count is never negative, a share of CPU time is within [0, 1]
HOST_RANGES: dict[tuple[str, ...], tuple[float, float]] = {
    ("host", "load_average_start"): (0.0, float("inf")), ("host", "load_average_end"): (0.0, float("inf")),
    ("host", "series", "load1_mean"): (0.0, float("inf")), ("host", "series", "load1_max"): (0.0, float("inf")),
    ("host", "series", "interval_s"): (0.0, float("inf")), ("host", "series", "samples"): (0.0, float("inf")),
    ("host", "series", "busy_share_mean"): (0.0, 1.0), ("host", "series", "steal_share_mean"): (0.0, 1.0),
    ("host", "series", "steal_share_max"): (0.0, 1.0), ("host", "cpus"): (1.0, float("inf")),
    ("host", "vcpus"): (1.0, float("inf")), ("host", "ram_bytes"): (0.0, float("inf")), ("host", "ram_gib"): (0.0, float("inf")),
}


def _plausible_host(path: str | Path, text: str, data: dict[str, Any]) -> None:
    """Each load field host.yaml has within its range (HOST_RANGES), or an error naming its line."""
    import math

    from ..yamlio import node_line

    for keys, (lo, hi) in HOST_RANGES.items():
        v: Any = data
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        for i, x in enumerate(v if isinstance(v, list) else [v]):
            if x is None:
                continue
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not lo <= x <= hi:
                where = [*keys, i] if isinstance(v, list) else list(keys)
                raise RawRecordError(path, f"{'.'.join(keys)} is {x!r}, outside [{lo:g}, {hi:g}]: "
                                           + ("a share of CPU time" if hi == 1.0 else "a load average, time or count is never negative"),
                                     line=node_line(text, where))


def read_host(path: str | Path) -> tuple[dict[str, Any], datetime, datetime]:
    """The parsed record, and the observation period's start and end (the older shape)."""
    rec = read_host_record(path)
    return rec.data, rec.start, rec.end


GIB = 2.0**30


def host_facts(meta: dict[str, Any], path: str) -> list[tuple[str, float, str]]:
    """HostRecord.facts of a host.yaml already parsed (`meta`; `path` for the error)."""
    host, model = meta.get("host") or {}, meta.get("model") or {}
    out: list[tuple[str, float, str]] = []
    try:
        vcpus = host.get("vcpus", host.get("cpus"))
        if vcpus is not None:
            out.append(("vcpus", int(vcpus), "count"))
        if host.get("ram_gib") is not None:
            out.append(("ram", float(host["ram_gib"]) * GIB, "B"))
        elif host.get("ram_bytes") is not None:
            out.append(("ram", float(host["ram_bytes"]), "B"))
        if "expert_weight_bits" in model:
            out.append(("expert_weight_bits", int(model["expert_weight_bits"]), "count"))
        if "pinned_embedding_gib" in model:
            out.append(("pinned_embedding", float(model["pinned_embedding_gib"]) * GIB, "B"))
    except (TypeError, ValueError) as e:
        raise RawRecordError(path, f"a host fact is not a number ({e})") from None
    return out


# ---------------------------------------------------------------- writer

def _scalar(v: Any) -> str:
    return v.isoformat() if isinstance(v, datetime) else str(v)


def host_yaml(data: dict[str, Any], header: str = "", notes: dict[str, str] | None = None) -> str:
    """host.yaml's text: `data`'s sections (a scalar, or a mapping of scalars, per key) in their
    order, `header` as comment lines on top, `notes[section]` as a comment line first inside a
    section. Scalars as YAML reads them back: timestamps in ISO form, numbers and plain words."""
    notes = notes or {}
    out = [f"# {line}" if line else "#" for line in header.splitlines()]
    for key, value in data.items():
        if not isinstance(value, dict):
            out.append(f"{key}: {_scalar(value)}")
            continue
        out.append(f"{key}:")
        if key in notes:
            out.append(f"  # {notes[key]}")
        out += [f"  {k}: {_scalar(v)}" for k, v in value.items()]
    return "\n".join(out) + "\n"


def observation_seconds(host_yaml: Path) -> float | None:
    """How long the run's observation lasted (host.yaml observation start..end), or None."""
    from ..yamlio import load_yaml

    if not host_yaml.is_file():
        return None
    obs = (load_yaml(host_yaml.read_text(encoding="utf-8")) or {}).get("observation") or {}
    try:
        return (datetime.fromisoformat(str(obs["end"])) - datetime.fromisoformat(str(obs["start"]))).total_seconds()
    except (KeyError, ValueError, TypeError):
        return None
