"""Single-tier LRU hits for every capacity at once, from one pass (Mattson's stack algorithm).

A tier in vLLM's order is a plain LRU over a reference stream in which each request touches
its unique blocks, then its blocks from last to first. LRU keeps the inclusion property, so a
block hits in a tier of C blocks exactly when fewer than C distinct blocks were touched since
its last use (its stack position, counted before the request touches anything). Positions are
counted with a Fenwick tree over touch times: O(log n) per block.

`hits_by_capacity` is exact for requests without unhashed scratch blocks (traces of whole
blocks, such as Mooncake's). A scratch block takes room only while its request runs, so with
them the cache is the top of the same stack but not always C entries deep:
`vllm_hits_by_capacity` tracks that depth per capacity and is exact for vLLM-style requests.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .requests import Request

COLD = np.iinfo(np.int64).max


class _Fenwick:
    __slots__ = ("n", "tree")

    def __init__(self, n: int):
        self.n = n
        self.tree = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        i += 1
        tree, n = self.tree, self.n
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum over positions [0, i)."""
        s, tree = 0, self.tree
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s


class StackPositions(list):
    """Per-request position arrays that remember their requests, so `hits_by_capacity` can
    switch to the exact depth tracking when scratch blocks are present."""

    requests: Sequence[Request] = ()


def stack_positions(requests: Sequence[Request], all_blocks: bool = False) -> StackPositions:
    """Per request, the stack position of each hit-eligible leading block (COLD if never seen);
    of every block with `all_blocks`.

    A request of n blocks hits its first h blocks in a tier of C >= n blocks, where h is the
    length of the leading run of positions < C (see `hits_by_capacity`).
    """
    total = sum(r.n_blocks + r.unique for r in requests)
    fen = _Fenwick(total)
    last: dict[int, int] = {}
    clock = live = 0
    out = StackPositions()
    out.requests = requests
    for r in requests:
        n = r.n_blocks if all_blocks else r.max_hit
        pos = np.full(n, COLD, dtype=np.int64)
        for j in range(n):
            t = last.get(r.blocks[j])
            if t is not None:
                pos[j] = live - fen.prefix(t + 1)  # distinct blocks touched after t
        out.append(pos)
        for _ in range(r.unique):  # unique blocks are never reused but do take LRU places
            fen.add(clock, 1)
            clock += 1
            live += 1
        for b in reversed(r.blocks):
            t = last.get(b)
            if t is not None:
                fen.add(t, -1)
            else:
                live += 1
            fen.add(clock, 1)
            last[b] = clock
            clock += 1
    return out


def hits_by_capacity(positions: list[np.ndarray], capacities: Sequence[int]) -> np.ndarray:
    """Hit blocks per request (rows) for each capacity (columns): the leading run below C.

    Positions from `stack_positions` of requests with scratch blocks are handed on to
    `vllm_hits_by_capacity`, which is exact for them.
    """
    reqs = getattr(positions, "requests", ())
    if any(r.scratch for r in reqs):
        return vllm_hits_by_capacity(reqs, capacities)
    caps = np.asarray(capacities, dtype=np.int64)
    out = np.zeros((len(positions), len(caps)), dtype=np.int64)
    for i, pos in enumerate(positions):
        if pos.size == 0:
            continue
        # leading run: a block counts only if every block before it also hits -> running max
        run_max = np.maximum.accumulate(pos)
        out[i] = np.searchsorted(run_max, caps, side="left")
    return out


def vllm_hits_by_capacity(requests: Sequence[Request], capacities: Sequence[int]) -> np.ndarray:
    """Hit blocks per request and capacity, exact for requests with scratch blocks.

    The resident set is always the top of the recency stack; its depth before request r is
    size(C) = min(previous size + blocks the previous request added, C - its scratch blocks),
    tracked for all capacities at once. Matches `TieredCache` replayed once per capacity
    (for capacities that hold the largest request).
    """
    caps = np.asarray(capacities, dtype=np.int64)
    positions = stack_positions(requests, all_blocks=True)
    size = np.zeros(len(caps), dtype=np.int64)
    out = np.zeros((len(requests), len(caps)), dtype=np.int64)
    for i, (r, pos) in enumerate(zip(requests, positions)):
        if pos.size:
            lead = np.maximum.accumulate(pos[: r.max_hit]) if r.max_hit else pos[:0]
            out[i] = np.searchsorted(lead, size, side="left") if lead.size else 0
            resident = np.searchsorted(np.sort(pos), size, side="left")
        else:
            resident = np.zeros(len(caps), dtype=np.int64)
        size = np.minimum(size + (r.n_blocks + r.unique - resident), caps - r.scratch)
    return out
