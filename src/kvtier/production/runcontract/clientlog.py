"""The run contract's client-log check: times that can be, no request twice, the last line whole."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from ...errors import RawRecordError, jsonl_records


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


TIME_FIELDS = ("sent_s", "first_chunk_s", "total_s")


def client_lines(path: str | Path, run_seconds: float | None = None,
                 not_json: str = "not JSON") -> Iterator[tuple[int, str, dict[str, Any]]]:
    """A client log's records (line number, text, record), each a JSON object whose times can
    be: no time negative or not finite, the first chunk not after the answer's end, the answer
    not ending after the observation did (`run_seconds` from its start, when known); no request
    (session, index) answered twice; the last line not cut."""
    path = Path(path)
    seen: dict[tuple[Any, Any], int] = {}
    for lineno, line, rec in jsonl_records(path, whole_last_line=True, not_json=not_json):
        if not isinstance(rec, dict):
            raise RawRecordError(path, "not a JSON object", line=lineno, record=line)
        for name in TIME_FIELDS:
            v = rec.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (not math.isfinite(v) or v < 0):
                raise RawRecordError(path, f"{name} is {v}: an impossible time", line=lineno, record=line)
        first, total, sent = rec.get("first_chunk_s"), rec.get("total_s"), rec.get("sent_s")
        if isinstance(first, (int, float)) and isinstance(total, (int, float)) and first > total:
            raise RawRecordError(path, f"first_chunk_s {first} outside 0..{total} (total_s): a first chunk after the answer "
                                       "ended", line=lineno, record=line)
        if run_seconds is not None and isinstance(sent, (int, float)) and isinstance(total, (int, float)) \
                and sent + total > run_seconds:
            raise RawRecordError(path, f"the answer ends {sent + total:.1f} s in, after the run's observation ended "
                                       f"({run_seconds:.0f} s, host.yaml): a line of another run?", line=lineno, record=line)
        if rec.get("status") == "ok" and "session" in rec and "index" in rec:
            key = (rec["session"], rec["index"])
            if key in seen:
                raise RawRecordError(path, f"session {key[0]} turn {key[1]} answered twice (first on line {seen[key]})",
                                     line=lineno)
            seen[key] = lineno
        yield lineno, line, rec
