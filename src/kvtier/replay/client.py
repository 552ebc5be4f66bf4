"""Send a schedule of turns to a live server: sessions in parallel, each session's turns in order.

A turn is sent at its arrival time, or when its session's previous turn has finished if that is
later (a session is a conversation: its next prompt exists only once the last answer came). The
run stops scheduling after `max_duration_s`; every finished request is one line of the client log
(append-only, flushed), and a rerun with the same log skips what finished and goes on.

`replay_fixed` sends a fixed stream instead (kvtier replay --fixed-order): one global order, at
most `in_flight` requests at once, request i+1 never before request i, no clock: what the server
receives does not depend on how fast it answers.

A failed request (an HTTP error such as 400 for a prompt over max_model_len, a timeout) is a line
with status "failed", its HTTP status where there is one, and the reason; its session goes on (the
next prompt is the trace's, not built from the answer), so one refusal does not silently drop the
rest of a conversation.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict, deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from ..records.clientlog import answered
from ..records.replaywrite import ClientLog
from ..serving import redact
from ..serving.client import RequestFailed, ServingClient
from .schedule import Turn


def finished(log_path: Path) -> set[tuple[int, int]]:
    """(session, index) of the turns the log already holds as answered (records.clientlog)."""
    if not log_path.exists():
        return set()
    return {(session, index) for session, index, _, _ in answered(log_path)}


def http_status(error: str) -> int | None:
    """The HTTP status a RequestFailed message names (serving.client writes 'HTTP 400: ...')."""
    m = re.search(r"HTTP (\d{3})", error)
    return int(m.group(1)) if m else None


def answer_fields(r: Any) -> dict[str, Any]:
    """A client-log line's fields for an answered request (a serving.client.StreamResult)."""
    usage = r.usage or {}
    return dict(status="ok", error=None, first_chunk_s=r.first_chunk_s, total_s=round(r.total_s, 6),
                usage_prompt_tokens=usage.get("prompt_tokens"),
                cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                chunk_s=[round(x, 5) for x in r.chunk_s])


def failure_fields(e: Exception) -> dict[str, Any]:
    return dict(status="failed", error=str(e), http_status=http_status(str(e)))


class _Log(ClientLog):
    """The client log, each line redacted before it is written (records.replaywrite.ClientLog)."""

    def write(self, rec: dict[str, Any]) -> None:
        super().write(redact.record(rec))


def exchange(client: ServingClient, t: Turn, sent_s: float) -> dict[str, Any]:
    """Send one turn and return its client-log line: the turn as sent, then the answer's usage
    (status ok) or the failure's status and reason (status failed). Both replay modes log this."""
    rec: dict[str, Any] = {"session": t.session, "index": t.index, "at_s": round(t.at_s, 4), "sent_s": round(sent_s, 4),
                           "prompt_tokens_sent": len(t.prompt), "trace_tokens": t.trace_tokens, "max_tokens": t.max_tokens}
    try:
        r = client.stream_completion(t.prompt, t.max_tokens, ignore_eos=True)
    except RequestFailed as e:
        rec.update(failure_fields(e))
    else:
        rec.update(answer_fields(r))
    return rec


def replay(turns: list[Turn], new_client: Callable[[], ServingClient], log_path: str | Path, *,
           max_duration_s: float = 600.0, workers: int = 8, progress: bool = True) -> dict[str, int]:
    """Returns counts: sent, ok, failed, skipped (already in the log), unsent (past the duration)."""
    log_path = Path(log_path)
    done = finished(log_path)
    todo = [t for t in turns if (t.session, t.index) not in done]
    heads: dict[int, deque[Turn]] = defaultdict(deque)
    for t in sorted(todo, key=lambda t: (t.session, t.index)):
        heads[t.session].append(t)
    log = _Log(log_path)
    local = threading.local()
    base = min((t.at_s for t in todo), default=0.0)
    t0 = time.monotonic()
    counts = {"sent": 0, "ok": 0, "failed": 0, "skipped": len(turns) - len(todo), "unsent": 0}

    def send(t: Turn) -> None:
        if not hasattr(local, "client"):
            local.client = new_client()
        rec = exchange(local.client, t, time.monotonic() - t0 + base)
        log.write(rec)
        if rec["status"] != "ok":
            raise RequestFailed(rec["error"])

    busy: dict[Future[None], int] = {}
    bar = tqdm(total=len(todo), disable=not progress, unit="req", desc="replay")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while heads or busy:
            now = time.monotonic() - t0 + base
            if now - base > max_duration_s and heads:  # once: later passes only wait for requests in flight
                counts["unsent"] += sum(len(q) for q in heads.values())
                heads.clear()
            active = set(busy.values())
            for s in [s for s, q in heads.items() if s not in active and q[0].at_s <= now]:
                t = heads[s].popleft()
                if not heads[s]:
                    del heads[s]
                busy[pool.submit(send, t)] = s
                counts["sent"] += 1
            waiting = [q[0].at_s for s, q in heads.items() if s not in set(busy.values())]
            timeout = max(0.0, min(waiting) - now) if waiting else None
            if not busy:
                time.sleep(min(timeout or 0.0, 1.0))
                continue
            ready, _ = wait(list(busy), timeout=min(timeout, 1.0) if timeout is not None else 1.0, return_when=FIRST_COMPLETED)
            for f in ready:
                s = busy.pop(f)
                counts["ok" if f.exception() is None else "failed"] += 1  # the session goes on either way
                bar.update(1)
    bar.close()
    return counts


def replay_fixed(turns: list[Turn], new_client: Callable[[], ServingClient], log_path: str | Path, *,
                 in_flight: int = 1, progress: bool = True) -> dict[str, int]:
    """Send `turns` in their order (schedule.fixed_order): at most `in_flight` at once; request
    i+1 is sent only after request i was, and a turn whose session still has one in flight waits
    for it (and every later request waits behind it). The log must be new: a fixed stream is sent
    whole by one launch, never resumed. Each line carries `order`, the request's place in the stream."""
    log_path = Path(log_path)
    if log_path.exists():
        raise FileExistsError(f"{log_path}: a fixed stream writes a new client log (no resume)")
    log = _Log(log_path)
    local = threading.local()
    t0 = time.monotonic()
    counts = {"sent": 0, "ok": 0, "failed": 0, "skipped": 0, "unsent": 0}

    def send(order: int, t: Turn) -> bool:
        if not hasattr(local, "client"):
            local.client = new_client()
        rec = {"order": order, **exchange(local.client, t, time.monotonic() - t0)}
        log.write(rec)
        return rec["status"] == "ok"

    busy: dict[Future[bool], int] = {}
    bar = tqdm(total=len(turns), disable=not progress, unit="req", desc="replay (fixed order)")
    with ThreadPoolExecutor(max_workers=max(1, in_flight)) as pool:
        i = 0
        while i < len(turns) or busy:
            while i < len(turns) and len(busy) < max(1, in_flight) and turns[i].session not in busy.values():
                busy[pool.submit(send, i, turns[i])] = turns[i].session
                counts["sent"] += 1
                i += 1
            ready, _ = wait(list(busy), return_when=FIRST_COMPLETED)
            for f in ready:
                busy.pop(f)
                counts["ok" if f.result() else "failed"] += 1
                bar.update(1)
    bar.close()
    return counts
