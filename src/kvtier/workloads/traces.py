"""Readers for the public traces: Mooncake (FAST'25) and kv-cache-tester agentic sessions.

Both are read from a configured path (they are data, never committed). Bad records raise an
error naming the file and the line or conversation.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import RawRecordError
from .base import Workload, regroup, vllm_request

MOONCAKE_BLOCK = 512
KVTESTER_BLOCK = 64


def mooncake_records(path: str | Path) -> Iterator[tuple[int, float, int, int, list[int]]]:
    """(line, time in s, input tokens, output tokens, hash ids) of each record, in file order;
    a bad record names its line. kvtier replay reads the trace through this too."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                yield (lineno, float(rec["timestamp"]) / 1e3, int(rec["input_length"]), int(rec["output_length"]),
                       rec["hash_ids"])
            except (ValueError, KeyError, TypeError) as e:
                raise RawRecordError(path, f"not a Mooncake record ({e})", line=lineno, record=line.strip()) from None


def mooncake(path: str | Path, block_tokens: int = MOONCAKE_BLOCK) -> Workload:
    """Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (512 tokens)."""
    if block_tokens < MOONCAKE_BLOCK:
        raise ValueError(f"{path}: its {MOONCAKE_BLOCK}-token ids cannot be regrouped into {block_tokens}-token blocks exactly")
    times, reqs, outs = [], [], []
    for lineno, t, n, o, ids in mooncake_records(path):
        blocks = regroup(ids, n, MOONCAKE_BLOCK, block_tokens)
        times.append(t)
        reqs.append(vllm_request(blocks, n, block_tokens, o, label=str(lineno)))
        outs.append(o)
    order = np.argsort(np.asarray(times), kind="stable")
    return Workload(f"mooncake:{Path(path).name}", block_tokens, np.asarray(times)[order],
                    [reqs[i] for i in order], np.asarray(outs, dtype=np.int64)[order])


def _flatten(requests: list[dict], offset: float, model: str, where: str) -> list[tuple[float, str, dict]]:
    """(time, model, request) for every request; sub-agent records hold their own requests,
    timed from the sub-agent's start, and may run another model than their parent."""
    out = []
    for i, r in enumerate(requests):
        if r.get("type") == "subagent":
            models = r.get("models") or [model]
            out.extend(_flatten(r.get("requests", []), offset + float(r["t"]), str(models[0]), f"{where}/subagent {i}"))
        elif "hash_ids" in r and "in" in r:
            out.append((offset + float(r["t"]), str(r.get("model") or model), r))
        else:
            raise RawRecordError(where, f"request {i} has neither hash_ids/in nor sub-agent requests")
    return out


def conversation_files(archive: str | Path, *, conversations: int | None = None,
                       members: list[str] | None = None) -> Iterator[tuple[str, bytes]]:
    """(name, JSON bytes) of the chosen conversations of a kv-cache-tester .tgz or of a folder of
    its .json files, in name order: the first `conversations`, or those `members` names (a file
    name or its stem, in the order given). A named conversation that is missing is an error."""
    archive = Path(archive)
    if archive.is_dir():
        files = {f.name: f for f in sorted(archive.glob("*.json"))}
        names = sorted(files)
        read = lambda n: files[n].read_bytes()  # noqa: E731
    else:
        tar = tarfile.open(archive, "r:*")
        by = {m.name.rsplit("/", 1)[-1]: m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")}
        names = sorted(by, key=lambda n: by[n].name)
        read = lambda n: tar.extractfile(by[n]).read()  # type: ignore[union-attr]  # noqa: E731
    if members is not None:
        want = [m if m.endswith(".json") else f"{m}.json" for m in members]
        missing = [m for m in want if m not in names]
        if missing:
            raise RawRecordError(archive, f"no conversation {', '.join(missing)} (asked for by name)")
        chosen = want
    else:
        chosen = names[:conversations]
    for n in chosen:
        yield n, read(n)


def kv_cache_tester_events(archive: str | Path, *, start_gap_s: float = 0.0, conversations: int | None = None,
                           members: list[str] | None = None) -> list[tuple[float, int, int, str, dict]]:
    """(time, conversation, id scope, model, request) of every request of the first `conversations`
    conversations (or of those `members` names: conversation_files), by time. The conventions of
    `kv_cache_tester` below; kvtier replay uses them too."""
    events: list[tuple[float, int, int, str, dict]] = []
    scopes: dict[tuple[int, str], int] = {}
    for conv_no, (name, data) in enumerate(conversation_files(archive, conversations=conversations, members=members)):
        where = f"{archive}:{name}"
        try:
            conv = json.loads(data)
        except json.JSONDecodeError as e:
            raise RawRecordError(where, f"not JSON ({e})") from None
        if conv.get("block_size") != KVTESTER_BLOCK:
            raise RawRecordError(where, f"block_size {conv.get('block_size')!r}, expected {KVTESTER_BLOCK}")
        model = str((conv.get("models") or [""])[0])
        for t, mdl, r in _flatten(conv["requests"], conv_no * start_gap_s, model, where):
            scope = scopes.setdefault((conv_no, mdl), len(scopes) + 1)
            events.append((t, conv_no, scope, mdl, r))
    events.sort(key=lambda e: e[0])
    return events


def kv_cache_tester(archive: str | Path, block_tokens: int, *, start_gap_s: float = 0.0) -> Workload:
    """kv-cache-tester conversations (a .tgz of JSON files, 64-token blocks, ids local to one file).

    Requests are interleaved by their recorded times `t` (seconds from their conversation's
    start); conversations carry no absolute start, so conversation i starts at i x `start_gap_s`
    (default: all at once) -- deterministic, no seed. Ids are local to a conversation, and a
    request's KV belongs to the model that ran it: ids are scoped per (conversation, model), so
    a sub-agent on another model never hits its parent's blocks (it could not share KV).
    """
    if block_tokens < KVTESTER_BLOCK:
        raise ValueError(f"{archive}: its {KVTESTER_BLOCK}-token ids cannot be regrouped into {block_tokens}-token blocks exactly")
    events = [(t, scope, r) for t, _, scope, _, r in kv_cache_tester_events(archive, start_gap_s=start_gap_s)]
    events.sort(key=lambda e: e[0])
    reqs = [vllm_request(regroup(r["hash_ids"], int(r["in"]), KVTESTER_BLOCK, block_tokens, scope), int(r["in"]),
                         block_tokens, int(r["out"]), label=f"{scope}") for _, scope, r in events]
    return Workload(f"kv-cache-tester:{Path(archive).name}", block_tokens, np.array([e[0] for e in events]), reqs,
                    np.array([int(e[2]["out"]) for e in events], dtype=np.int64))
