"""Public traces -> timed requests with token-id prompts that keep the trace's prefix structure.

A trace names each prompt block by a prefix-chained hash id; equal ids mean an equal prefix. Each
id becomes a fixed run of token ids (drawn from the model's vocabulary, seeded by the id and its
scope), so equal ids give equal tokens and the server's prefix cache sees the trace's reuse. Token
counts are multiplied by one stated `scale` (a trace block of 64 tokens at scale 1/16 becomes 4),
so long agentic sessions fit a small server; arrival times are divided by `compress`.

kv-cache-tester sessions carry times relative to their own start (`t`) and ids local to the
session; sessions are started `session_gap_s` apart (after compression), in file order, and a
sub-agent on another model gets its own id namespace (it could not share its parent's KV), as
the simulator's trace reader has it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..workloads.traces import KVTESTER_BLOCK, MOONCAKE_BLOCK, kv_cache_tester_events, mooncake_records



@dataclass(frozen=True)
class Turn:
    session: int
    index: int                 # position within its session
    at_s: float                # arrival time from the start of the replay
    prompt: list[int] = field(repr=False)
    max_tokens: int
    trace_tokens: int          # the trace's own prompt length, before scaling


@dataclass(frozen=True)
class Scaling:
    scale: float = 1.0         # tokens: trace tokens x scale
    compress: float = 1.0      # time: trace seconds / compress
    vocab_size: int = 2048
    first_id: int = 16         # token ids below this (special tokens) are never used
    max_tokens_cap: int = 16   # answers are cut to this many tokens (decode is not what is studied)
    seed: int = 0

    def block_tokens(self, trace_block: int) -> int:
        return max(1, round(trace_block * self.scale))


def block_ids(scope: str, hash_id: int, n: int, s: Scaling) -> list[int]:
    """The token ids standing for one trace block: the same (scope, id) always gives the same ids."""
    digest = hashlib.blake2b(f"{s.seed}/{scope}/{hash_id}".encode(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    return rng.integers(s.first_id, s.vocab_size, n).tolist()


def prompt_of(scope: str, hash_ids: list[int], trace_tokens: int, trace_block: int, s: Scaling,
              memo: dict[tuple[str, int], list[int]] | None = None) -> list[int]:
    """A session's turns repeat most of their ids: `memo` keeps each block's tokens once drawn."""
    b = s.block_tokens(trace_block)
    want = max(1, round(trace_tokens * s.scale))
    memo = {} if memo is None else memo
    out: list[int] = []
    for h in hash_ids:
        key = (scope, int(h))
        if key not in memo:
            memo[key] = block_ids(scope, int(h), b, s)
        out.extend(memo[key])
        if len(out) >= want:
            break
    return out[:want]


def kv_cache_tester(archive: str | Path, s: Scaling, *, sessions: int, session_gap_s: float,
                    members: list[str] | None = None) -> list[Turn]:
    """The first `sessions` conversations of a kv-cache-tester .tgz or folder (or those `members`
    names, in the order given), started `session_gap_s` apart,
    read with the simulator's conventions (kvtier.workloads.traces): times from each conversation's
    start, ids scoped per (conversation, model). Times are then divided by `compress`."""
    turns: list[Turn] = []
    memo: dict[tuple[str, int], list[int]] = {}
    index: dict[int, int] = {}
    main: dict[int, str] = {}  # a conversation's own model: that of its first request
    for t, conv_no, _, model, r in kv_cache_tester_events(archive, start_gap_s=session_gap_s * s.compress,
                                                              conversations=sessions, members=members):
        i = index[conv_no] = index.get(conv_no, -1) + 1
        scope = f"s{conv_no}" if main.setdefault(conv_no, model) == model else f"s{conv_no}/{model}"
        turns.append(Turn(conv_no, i, t / s.compress, prompt_of(scope, r["hash_ids"], int(r["in"]), KVTESTER_BLOCK, s, memo),
                          max(1, min(s.max_tokens_cap, round(int(r["out"]) * s.scale))), int(r["in"])))
    return turns


def mooncake(path: str | Path, s: Scaling, *, limit: int | None = None) -> list[Turn]:
    """Mooncake JSONL (timestamps in ms, 512-token blocks, ids global): each request its own session."""
    turns: list[Turn] = []
    memo: dict[tuple[str, int], list[int]] = {}
    for _, t, n, o, ids in mooncake_records(path):
        if limit is not None and len(turns) >= limit:
            break
        turns.append(Turn(len(turns), 0, t / s.compress, prompt_of("g", ids, n, MOONCAKE_BLOCK, s, memo),
                          max(1, min(s.max_tokens_cap, round(o * s.scale))), n))
    t0 = min((t.at_s for t in turns), default=0.0)
    return [Turn(t.session, t.index, t.at_s - t0, t.prompt, t.max_tokens, t.trace_tokens) for t in turns]


TRACE_KINDS = ("kv-cache-tester", "mooncake")  # how kvtier replay names a trace: KIND:PATH


def schedule_for(trace: str, s: Scaling, *, sessions: int | None = None, session_gap_s: float = 30.0,
                 limit: int | None = None, where: str | Path = "--trace", members: list[str] | None = None) -> list[Turn]:
    """The schedule of a trace named as kvtier replay names it: kv-cache-tester:PATH.tgz or
    mooncake:PATH.jsonl (`where` names the setting in the error for anything else)."""
    kind, _, path = trace.partition(":")
    if kind == "kv-cache-tester":
        return kv_cache_tester(path, s, sessions=int(sessions or 0), session_gap_s=session_gap_s, members=members)
    if kind == "mooncake":
        return mooncake(path, s, limit=limit)
    raise ValueError(f"{where}: a trace is kv-cache-tester:PATH or mooncake:PATH, not {trace!r}")


def fixed_order(turns: list[Turn], count: int | None = None) -> list[Turn]:
    """The fixed stream: every turn in one global order (trace arrival time; ties by session, then
    turn), cut to the first `count`. It depends on the trace and the scaling only, never on how
    fast a server answers, so every launch that sends it sends the same requests in the same order."""
    ordered = sorted(turns, key=lambda t: (t.at_s, t.session, t.index))
    return ordered[:count] if count is not None else ordered


OVER_LIMIT = ("send", "truncate", "refuse")  # what kvtier replay does with a prompt over --prompt-limit


def limit_prompts(turns: list[Turn], limit: int | None, mode: str) -> tuple[list[Turn], int]:
    """Prompts longer than `limit` tokens (the server's max_model_len less the answer's tokens):
    `send` them as they are (the server refuses them: a failed request in the log), `truncate`
    them to their first `limit - max_tokens` tokens (the prefix the cache sees is kept), or
    `refuse` the whole schedule before any request is sent. Returns the turns and how many were over."""
    if limit is None:
        return turns, 0
    over = [t for t in turns if len(t.prompt) + t.max_tokens > limit]
    if not over or mode == "send":
        return turns, len(over)
    if mode == "refuse":
        t = over[0]
        raise ValueError(f"{len(over)} prompts exceed the limit of {limit} tokens with their answer (first: session "
                         f"{t.session} turn {t.index}, {len(t.prompt)} + {t.max_tokens}); lower --scale or use --over-limit truncate")
    if mode != "truncate":
        raise ValueError(f"over-limit mode {mode!r}: one of {', '.join(OVER_LIMIT)}")
    return [Turn(t.session, t.index, t.at_s, t.prompt[:limit - t.max_tokens], t.max_tokens, t.trace_tokens)
            if len(t.prompt) + t.max_tokens > limit else t for t in turns], len(over)


def stream_digest(turns: list[Turn]) -> str:
    """sha256 of the sent stream: for each request in send order, its token ids and max_tokens.
    Two runs with the same digest sent the same requests in the same order."""
    h = hashlib.sha256()
    for t in turns:
        h.update(np.asarray(t.prompt, dtype="<i8").tobytes())
        h.update(np.asarray([-1, t.max_tokens, -2], dtype="<i8").tobytes())
    return h.hexdigest()
