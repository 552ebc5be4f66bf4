"""Requests that overlap in time: the server holds the blocks of every running request.

`TieredCache` replays one request at a time. A server that runs several at once (vLLM's
scheduler, with up to max_num_seqs requests) differs in one way the outcome can see: a running
request's blocks are held, so they cannot be evicted, and what it computes takes free slots from
the front of the free queue while the others run. `ResidentCache` splits a request into its start
(the lookups in both tiers, the CPU tier's stores, its blocks taken) and its end (its blocks freed
in vLLM's order, its pool chunks re-ranked: on_request_finished); the lookup and store rules are TieredCache's own.

`replay_admitted` drives it from a recorded stream: each request's arrival and finish time as
the client saw them. Requests are admitted first come, first served, as vLLM's waiting queue is;
the one at the head starts when every block it will hold (prompt, generated tokens, the unhashed
last block) fits beside those of the running requests, and otherwise waits for a finish. A request
the record shows finished before the model could admit it is admitted then (counted as `forced`).
With arrivals that never overlap this is `TieredCache.replay`, request for request.

This is the readable reference; `kvtier.sim.fast.replay_admitted_flat` runs the same rules compiled
(kvtier.sim._core; tests/test_sim_admitted.py requires equal outcomes and admission on every test stream).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Hashable, Sequence

from .requests import Request
from .tiers import Outcome, TieredCache


class ResidentCache(TieredCache):
    """TieredCache whose requests start (`begin`) and end (`end`) separately. Write-through only,
    and vLLM's free order from 0.24 on (an unhashed block is an empty slot once freed)."""

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if self.policy != "write_through" or not self.unhashed_first:
            raise ValueError("ResidentCache models write-through tiers under vLLM >= 0.24's free order only")
        self._running: dict[Hashable, tuple[list[int], int, list[int]]] = {}

    def need(self, req: Request) -> int:
        """Slots the request holds while it runs: its prompt's full blocks, its generated full
        blocks and its unhashed last block."""
        return req.n_blocks + req.unique + req.scratch

    def held(self) -> int:
        return self.gpu.held()

    def begin(self, key: Hashable, req: Request) -> tuple[Outcome, int]:
        """Start `req` under `key`: its outcome, and the slots it could not get (0 unless admitted
        while too little was free)."""
        if key in self._running:
            raise ValueError(f"request {key!r} is already running")
        g, loaded, chunks, finish = self._lookup(req)
        blocks = req.blocks
        # vLLM frees a request's blocks tail first: generated blocks, then the prompt's computed
        # blocks last to first, then its hit blocks last to first (TieredCache.access's order).
        fresh = self._fresh_ids(req.unique) + list(reversed(blocks[g:]))
        held, _, short = self.gpu.acquire(blocks[g - 1::-1] if g else (), fresh, req.scratch)
        self._running[key] = (held[g:] + held[:g], req.scratch, finish)
        return self._outcome(req, g, loaded, chunks), short

    def end(self, key: Hashable) -> None:
        """`key` ends: its blocks freed, and its pool chunks re-ranked (on_request_finished)."""
        held, scratch, finish = self._running.pop(key)
        self.gpu.give_back(held, scratch)
        self._finish(finish)


@dataclass(frozen=True)
class Admission:
    """How the replay admitted the stream."""

    waited: int    # requests that could not start on arrival
    forced: int    # requests the record shows finished before the model could admit them
    short: int     # slots requests could not get (forced ones)
    max_running: int


def replay_admitted(cache: ResidentCache, requests: Sequence[Request], arrive: Sequence[float],
                    finish: Sequence[float]) -> tuple[list[Outcome], Admission]:
    """Replay `requests` (in arrival order) as the server ran them: each starts when admitted
    (first come, first served, when its blocks fit beside the running requests') and ends at its
    recorded finish. Returns the outcomes, in the order given, and how admission went."""
    n = len(requests)
    if not (len(arrive) == len(finish) == n):
        raise ValueError("requests, arrive and finish must have one entry per request")
    events = sorted([(float(finish[i]), 0, i) for i in range(n)] + [(float(arrive[i]), 1, i) for i in range(n)])
    outs: list[Outcome | None] = [None] * n
    waiting: deque[int] = deque()
    running: set[int] = set()
    waited = forced = short = peak = 0
    cap = cache.gpu.capacity
    for _, kind, i in events:
        if kind == 1:
            waiting.append(i)
        elif i in running:
            cache.end(i)
            running.discard(i)
        else:  # finished on the server before the model found room: it ran, so admit it now
            waiting.remove(i)
            outs[i], s = cache.begin(i, requests[i])
            cache.end(i)
            forced += 1
            short += s
        while waiting and (not running or cache.held() + cache.need(requests[waiting[0]]) <= cap):
            j = waiting.popleft()
            outs[j], s = cache.begin(j, requests[j])
            short += s
            running.add(j)
            peak = max(peak, len(running))
        if waiting and kind == 1 and waiting[-1] == i:
            waited += 1
    return [o for o in outs if o is not None], Admission(waited, forced, short, peak)
