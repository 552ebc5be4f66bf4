"""client.jsonl (kvtier-replay, the harness's captures): the one reader of the client log.

One line per request: what was sent, and the server's answer (usage, timings) or the failure's
reason. The run contract runs here, in the reader (`client_lines`: times that can be, no request
answered twice, the last line not cut, the answer within the observation), so every domain that
reads a client log has had it checked. Three views of the same lines: the capture's rows for its
sums (`read_client`), the sweep's table of answered requests with typed fields
(`read_client_log`), and the sent-blocks record's (session, index, tokens) of each answer
(`answered`). Each error names the file and the line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import RawRecordError, jsonl_records
from .touch import touch

if TYPE_CHECKING:  # pandas is imported where a table is made: the replay client runs in the vLLM venv, which has none
    import pandas as pd

TIME_FIELDS = ("sent_s", "first_chunk_s", "total_s")
# the capture's sums: the fields an answered line needs, and a failed one
SUM_FIELDS = ("status", "prompt_tokens_sent", "usage_prompt_tokens", "cached_tokens", "completion_tokens")
SUM_FAILED_FIELDS = ("status", "prompt_tokens_sent", "error")  # a failed request keeps its reason, not an answer's usage
# the sweep's table: the fields it reads from every line, and their types
CLIENT_FIELDS: dict[str, tuple[type, ...]] = {
    "session": (int,), "index": (int,), "status": (str,), "sent_s": (int, float),
    "prompt_tokens_sent": (int,), "max_tokens": (int,)}
ANSWERED_FIELDS: dict[str, tuple[type, ...]] = {"total_s": (int, float), "cached_tokens": (int,), "usage_prompt_tokens": (int,),
                                                "first_chunk_s": (int, float)}
FAILED_FIELDS: dict[str, tuple[type, ...]] = {"error": (str,)}  # a failed line keeps its reason


def client_lines(path: str | Path, run_seconds: float | None = None,
                 not_json: str = "not JSON") -> Iterator[tuple[int, str, dict[str, Any]]]:
    """A client log's records (line number, text, record), each a JSON object whose times can
    be: no time negative or not finite, the first chunk not after the answer's end, the answer
    not ending after the observation did (`run_seconds` from its start, when known); no request
    (session, index) answered twice; the last line not cut."""
    path = Path(path)
    touch(path)
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


def read_client(path: str | Path, run_seconds: float | None = None) -> list[dict[str, Any]]:
    """The client log's lines, each checked for the fields the sums need: an answered line
    (status ok) for its usage, a failed line (status failed: an HTTP error such as a prompt over
    max_model_len, a timeout) for its reason; and by the run contract (client_lines). Failed
    lines are kept (each with its `_line`), and left out of the sums."""
    rows = []
    for i, _, r in client_lines(path, run_seconds, not_json="not a JSON object"):
        if r.get("status") not in ("ok", "failed"):
            raise RawRecordError(path, "client record has no status 'ok' or 'failed'", line=i)
        missing = [k for k in (SUM_FIELDS if r["status"] == "ok" else SUM_FAILED_FIELDS) if k not in r]
        if missing:
            raise RawRecordError(path, f"client record lacks {', '.join(missing)}", line=i)
        r["_line"] = i
        rows.append(r)
    return rows


def read_client_log(path: str | Path, extra: dict[str, tuple[type, ...]] | None = None,
                    run_seconds: float | None = None) -> "pd.DataFrame":
    """One row per answered request (status ok), with its line number, in file order. A line
    that is not JSON, lacks a field or has one of the wrong type is an error naming it, so is
    one the run contract refuses (client_lines; `run_seconds`: the observation's length,
    host.yaml). `extra`: more fields an answered line must have (name: types), kept as columns.
    A failed request (status failed, with its reason) is left out and counted: `attrs["failed"]`,
    `attrs["failed_lines"]` its line numbers."""
    import pandas as pd

    path = Path(path)
    extra = extra or {}
    rows = []
    failed: list[int] = []
    seen: dict[tuple[int, int], int] = {}
    for lineno, line, rec in client_lines(path, run_seconds):
        if rec.get("status") not in ("ok", "failed"):
            raise RawRecordError(path, f"status {rec.get('status')!r}, expected 'ok' or 'failed'", line=lineno, record=line)
        want = dict(CLIENT_FIELDS, **(dict(ANSWERED_FIELDS, **extra) if rec["status"] == "ok" else FAILED_FIELDS))
        for name, types in want.items():
            v = rec.get(name)
            if v is None or isinstance(v, bool) or not isinstance(v, types):
                raise RawRecordError(path, f"field {name!r} is {v!r}, expected {' or '.join(t.__name__ for t in types)}",
                                     line=lineno, record=line)
        if rec["status"] != "ok":
            failed.append(lineno)
            continue
        key = (rec["session"], rec["index"])
        if key in seen:
            raise RawRecordError(path, f"session {key[0]} turn {key[1]} answered twice (first on line {seen[key]})", line=lineno)
        seen[key] = lineno
        if rec["usage_prompt_tokens"] != rec["prompt_tokens_sent"]:
            raise RawRecordError(path, f"usage counts {rec['usage_prompt_tokens']} prompt tokens, the client sent "
                                       f"{rec['prompt_tokens_sent']}", line=lineno)
        if not 0 <= rec["cached_tokens"] <= rec["prompt_tokens_sent"]:
            raise RawRecordError(path, f"cached_tokens {rec['cached_tokens']} outside 0..{rec['prompt_tokens_sent']}", line=lineno)
        rows.append({**{k: rec[k] for k in (*CLIENT_FIELDS, *ANSWERED_FIELDS, *extra)}, "line": lineno})
    if not rows:
        raise RawRecordError(path, "no answered request" + (f" ({len(failed)} failed)" if failed else ""))
    out = pd.DataFrame(rows)
    out.attrs.update(failed=len(failed), failed_lines=failed)
    return out


def answered(client_log: str | Path) -> list[tuple[int, int, int, int]]:
    """(session, index, prompt tokens sent, line) of every answered request, in log order. Read
    while a capture writes its sent-blocks record, before the run contract can apply."""
    return [(int(r["session"]), int(r["index"]), int(r["prompt_tokens_sent"]), i)
            for i, _, r in jsonl_records(client_log) if r.get("status") == "ok"]
