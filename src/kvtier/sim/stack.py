"""Single-tier LRU hits for every capacity at once, from one pass (Mattson's stack algorithm).

A tier in vLLM's order is a plain LRU over a reference stream in which each request touches
its unique blocks, then its blocks from last to first. LRU keeps the inclusion property, so a
block hits in a tier of C blocks exactly when fewer than C distinct blocks were touched since
its last use (its stack position, counted before the request touches anything).

The positions are counted offline, vectorised with numpy, instead of with a Fenwick tree
walked block by block in Python (7 s on the counterfactual's 1.2 M lookups). A block last
touched at time t and looked up by a request that starts at clock q sits at position

    (q - t - 1) - #{touches s in (t, q) whose block is touched again before q},

and a touch s re-touched at n < q is a pair (s, n) with t < s < n < q. Counting the pairs with
s > t among those with n < q is a rank query in a prefix of the pairs ordered by n, which a
wavelet matrix answers for all queries at once in O(log T) vectorised steps: O(n log n) in all,
exact integer arithmetic throughout.

`hits_by_capacity` is exact for requests without unhashed scratch blocks (traces of whole
blocks, such as Mooncake's). A scratch block takes room only while its request runs, so with
them the cache is the top of the same stack but not always C entries deep:
`vllm_hits_by_capacity` tracks that depth per capacity and is exact for vLLM-style requests.
"""

from __future__ import annotations

from itertools import chain
from typing import Sequence

import numpy as np

from .requests import Request

COLD = np.iinfo(np.int64).max


class StackPositions(list):
    """Per-request position arrays that remember their requests, so `hits_by_capacity` can
    switch to the exact depth tracking when scratch blocks are present.

    Positions made by `stack_positions` also keep every block's position in one flat array
    (`flat`, request r at `offsets[r]:offsets[r + 1]`), so the capacity functions need no
    second pass and no Python loop over requests where none is needed.
    """

    requests: Sequence[Request] = ()
    flat: np.ndarray | None = None
    offsets: np.ndarray | None = None


def _block_ids(requests: Sequence[Request], total: int) -> np.ndarray:
    """Every request's blocks from last to first (the order they are touched), as int64 ids.

    Ids that do not fit int64 (or are not ints) are renumbered densely; only equality matters.
    """
    def stream():
        return chain.from_iterable(reversed(r.blocks) for r in requests)

    try:
        return np.fromiter(stream(), dtype=np.int64, count=total)
    except (OverflowError, TypeError, ValueError):
        dense: dict = {}
        return np.fromiter((dense.setdefault(b, len(dense)) for b in stream()), dtype=np.int64, count=total)


def _count_leq_in_prefix(values: np.ndarray, prefix: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """For each query i: #{j < prefix[i] : values[j] <= bound[i]}, for values >= 0 (wavelet matrix).

    One stable partition of `values` per bit (most significant first) records how many zeros
    precede each position; a query then follows its range down the levels, adding the part of
    the range whose bit is below the bound's. Vectorised over all queries; O((n + m) log max).
    """
    out = np.zeros(len(prefix), dtype=np.int64)
    if len(prefix) == 0 or len(values) == 0:
        return out
    x = np.asarray(bound, dtype=np.int64) + 1  # count values < x
    top = int(values.max())
    xmax = int(x.max())
    if xmax <= 0:
        return out
    bits = max(top, xmax - 1, 1).bit_length()
    # bound >= every value: the whole prefix counts (keeps x below 2**bits)
    full = x > top
    out[full] = prefix[full]
    live = ~full & (x > 0)
    if not live.any():
        return out
    x, lo, hi = x[live], np.zeros(int(live.sum()), dtype=np.int64), np.asarray(prefix, dtype=np.int64)[live].copy()
    res = np.zeros_like(lo)
    cur = values.astype(np.int64, copy=True)
    zeros = np.empty(len(cur) + 1, dtype=np.int64)
    zeros[0] = 0
    for bit in range(bits - 1, -1, -1):
        one = ((cur >> bit) & 1).astype(bool)
        np.cumsum(~one, out=zeros[1:])
        nz = int(zeros[-1])
        cur = np.concatenate((cur[~one], cur[one]))
        zlo, zhi = zeros[lo], zeros[hi]
        xb = ((x >> bit) & 1).astype(bool)
        # bound's bit 1: the zeros of the range are all below it; follow the ones
        res += np.where(xb, zhi - zlo, 0)
        lo = np.where(xb, nz + lo - zlo, zlo)
        hi = np.where(xb, nz + hi - zhi, zhi)
    out[live] = res
    return out


def _flat_positions(requests: Sequence[Request]) -> tuple[np.ndarray, np.ndarray]:
    """Stack position of every block of every request (prompt order, COLD if never seen) and
    the per-request offsets into that flat array."""
    R = len(requests)
    n = np.fromiter((len(r.blocks) for r in requests), dtype=np.int64, count=R)
    u = np.fromiter((r.unique for r in requests), dtype=np.int64, count=R)
    offsets = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(n, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.int64), offsets
    ids = _block_ids(requests, total)  # touch order within each request
    return _touch_positions(ids, offsets, n, u, reverse=True), offsets


def _refuse_copies(requests: Sequence[Request], flat: np.ndarray, offsets: np.ndarray, n: np.ndarray) -> None:
    """A block past max_hit that was seen before may still be cached; vLLM then computes it again
    into a second physical copy (see pool.py), which a stack over block ids cannot represent."""
    cap = np.fromiter((max(r.max_hit, 0) for r in requests), dtype=np.int64, count=len(requests))
    capped = np.flatnonzero(cap < n)
    for i in capped.tolist():
        if (flat[offsets[i] + cap[i]:offsets[i + 1]] != COLD).any():
            raise ValueError(f"request {i} ({requests[i].label!r}) recomputes a block seen before (a full hit on a "
                             "prompt of whole blocks): vLLM keeps a second copy, which the stack pass does not model; "
                             "replay with TieredCache")


def _touch_positions(ids: np.ndarray, offsets: np.ndarray, n: np.ndarray, u: np.ndarray,
                     reverse: bool) -> np.ndarray:
    """Stack position of every touch when its request starts (COLD if never seen), in prompt
    order. `ids` lists each request's keys in the order it touches them, after u[r] unique keys:
    last to first (`reverse`, vLLM's GPU order) or first to last (LMCache's CPU order)."""
    R = len(n)
    total = len(ids)
    clock = np.zeros(R, dtype=np.int64)  # clock when each request starts
    np.cumsum((n + u)[:-1], out=clock[1:])
    req = np.repeat(np.arange(R, dtype=np.int64), n)
    # touch time of each block: after the request's unique blocks, one tick per block
    times = np.arange(total, dtype=np.int64) - offsets[req] + (clock + u)[req]
    # previous touch of the same id (the stream is in time order, so a stable sort keeps it)
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    prev = np.full(total, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    del ids, order, same  # peak memory: the pass holds a dozen arrays of one entry per block
    # a query sees the last touch before its request: skip touches of the same request (a block
    # listed twice)
    q = clock[req]
    last = prev.copy()
    while True:
        inside = last >= 0
        inside[inside] = times[last[inside]] >= q[inside]
        if not inside.any():
            break
        last[inside] = prev[last[inside]]
    # pairs (s, n): touch s re-touched at n; in time order of n, with s as the value
    has_prev = prev >= 0
    pair_n = times[has_prev]
    pair_s = times[prev[has_prev]]
    del has_prev, prev
    seen = last >= 0
    t = times[last[seen]]
    qs = q[seen]
    # Blocks of one request last touched at t and t + 1 share the count: the touch at t + 1 is the
    # last before q (of a block this request looks up), so it is never a pair ending before q.
    # Runs of such neighbours (a previous turn's blocks, touched one after another) need one query.
    rs = req[seen]
    step = np.diff(t)
    head = np.ones(len(t), dtype=bool)
    head[1:] = (rs[1:] != rs[:-1]) | (np.abs(step) > 1)
    run = np.cumsum(head) - 1
    k = np.searchsorted(pair_n, qs[head], side="left")  # pairs re-touched before the request starts
    nested = k - _count_leq_in_prefix(pair_s, k, t[head])  # ... whose first touch came after t
    pos_time = np.full(total, COLD, dtype=np.int64)
    pos_time[seen] = (qs - t - 1) - nested[run]
    if not reverse:
        return pos_time
    # back to prompt order: block j of request r was touched at index offsets[r] + n[r] - 1 - j
    i = np.arange(total, dtype=np.int64)
    return pos_time[2 * offsets[req] + n[req] - 1 - i]


def stream_positions(ids: np.ndarray, offsets: np.ndarray, order: str = "reverse",
                     unique: np.ndarray | None = None) -> np.ndarray:
    """Stack position of every key (prompt order, COLD if never seen) when its request starts,
    for a stream already flattened: request r's keys are ids[offsets[r]:offsets[r + 1]] in
    prompt order, touched after unique[r] keys of its own, then in `order`: 'reverse' (last to
    first, a GPU tier in vLLM's order) or 'forward' (first to last, LMCache's CPU tier, whose
    tail is the most recent). Ids are int64; only equality matters.
    """
    if order not in ("reverse", "forward"):
        raise ValueError(f"order must be 'reverse' or 'forward', got {order!r}")
    ids = np.asarray(ids, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = np.diff(offsets)
    u = np.zeros(len(n), dtype=np.int64) if unique is None else np.asarray(unique, dtype=np.int64)
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    if order == "forward":
        return _touch_positions(ids, offsets, n, u, reverse=False)
    req = np.repeat(np.arange(len(n), dtype=np.int64), n)
    i = np.arange(len(ids), dtype=np.int64)
    return _touch_positions(ids[2 * offsets[req] + n[req] - 1 - i], offsets, n, u, reverse=True)


def stack_positions(requests: Sequence[Request], all_blocks: bool = False) -> StackPositions:
    """Per request, the stack position of each hit-eligible leading block (COLD if never seen);
    of every block with `all_blocks`.

    A request of n blocks hits its first h blocks in a tier of C >= n blocks, where h is the
    length of the leading run of positions < C (see `hits_by_capacity`).
    """
    flat, offsets = _flat_positions(requests)
    out = StackPositions()
    out.requests, out.flat, out.offsets = requests, flat, offsets
    for r, a, b in zip(requests, offsets[:-1].tolist(), offsets[1:].tolist()):
        out.append(flat[a:b] if all_blocks else flat[a:a + min(max(r.max_hit, 0), b - a)])
    return out


def _segment_keys(flat: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `lengths[r]` positions of each request, clipped to `top` and lifted by r * (top + 1),
    so every request's values lie above the previous request's; with their start offsets."""
    R = len(lengths)
    starts = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    req = np.repeat(np.arange(R, dtype=np.int64), lengths)
    take = np.arange(int(starts[-1]), dtype=np.int64) - starts[req] + offsets[req]
    return np.minimum(flat[take], top) + req * (top + 1), starts


def _leading_hits(flat: np.ndarray, offsets: np.ndarray, max_hit: np.ndarray, depth: np.ndarray, top: int) -> np.ndarray:
    """Hit blocks per request (rows) for each depth (depth[r, c]): the leading run of positions
    below the depth, for all requests at once."""
    keys, starts = _segment_keys(flat, offsets, max_hit, top)
    run = np.maximum.accumulate(keys) if len(keys) else keys  # lifted segments: a running max per request
    R = len(max_hit)
    lift = (np.arange(R, dtype=np.int64) * (top + 1))[:, None]
    return np.searchsorted(run, np.clip(depth, 0, top) + lift, side="left") - starts[:-1, None]


def hits_by_capacity(positions: list[np.ndarray], capacities: Sequence[int]) -> np.ndarray:
    """Hit blocks per request (rows) for each capacity (columns): the leading run below C.

    Positions from `stack_positions` of requests with scratch blocks are handed on to
    `vllm_hits_by_capacity`, which is exact for them. A pure stack over block ids: a block
    recomputed past max_hit while cached is one entry here, two physical copies in vLLM.
    """
    reqs = getattr(positions, "requests", ())
    if any(r.scratch for r in reqs):
        return vllm_hits_by_capacity(reqs, capacities, positions=positions)  # type: ignore[arg-type]
    caps = np.asarray(capacities, dtype=np.int64)
    flat = getattr(positions, "flat", None)
    if flat is not None and len(positions) == len(reqs):
        # all requests at once: the arrays handed out are the leading parts of the flat array
        offsets = positions.offsets  # type: ignore[attr-defined]
        lengths = np.fromiter((len(p) for p in positions), dtype=np.int64, count=len(positions))
        top = len(flat) + int(sum(r.unique for r in reqs)) + 1  # above every real position
        return _leading_hits(flat, offsets, lengths, np.broadcast_to(caps, (len(positions), len(caps))), top)
    out = np.zeros((len(positions), len(caps)), dtype=np.int64)
    for i, pos in enumerate(positions):
        if pos.size == 0:
            continue
        # leading run: a block counts only if every block before it also hits -> running max
        run_max = np.maximum.accumulate(pos)
        out[i] = np.searchsorted(run_max, caps, side="left")
    return out


def vllm_hits_by_capacity(requests: Sequence[Request], capacities: Sequence[int],
                          positions: StackPositions | None = None) -> np.ndarray:
    """Hit blocks per request and capacity, exact for requests with scratch blocks.

    The resident set is always the top of the recency stack; its depth before request r is
    size(C) = min(previous size + blocks the previous request added, C - its scratch blocks),
    tracked for all capacities at once. Matches `TieredCache` replayed once per capacity
    (for capacities that hold the largest request). `positions` from `stack_positions` of the
    same requests saves the pass.
    """
    caps = np.asarray(capacities, dtype=np.int64)
    R = len(requests)
    if positions is not None and positions.flat is not None and positions.requests is requests:
        flat, offsets = positions.flat, positions.offsets
    else:
        flat, offsets = _flat_positions(requests)
    n = np.diff(offsets)
    _refuse_copies(requests, flat, offsets, n)
    top = len(flat) + int(sum(r.unique for r in requests)) + 1  # above every real position
    # every request's positions sorted and lifted, so one searchsorted counts those below a depth
    keys, starts = _segment_keys(flat, offsets, n, top)
    ordered = np.sort(keys, kind="stable")  # timsort: positions mostly ascend along a prompt already
    lift = (np.arange(R, dtype=np.int64) * (top + 1)).tolist()
    # blocks a request adds, less the count of its positions below the depth (offset by its start)
    added = (n + np.fromiter((r.unique for r in requests), dtype=np.int64, count=R) + starts[:-1]).tolist()
    # depths outside [0, top] count the same positions as the bounds: keeps the loop free of clipping
    room = np.clip(caps[None, :] - np.fromiter((r.scratch for r in requests), dtype=np.int64, count=R)[:, None],
                   0, top)
    depth = np.zeros((R, len(caps)), dtype=np.int64)
    size = np.zeros(len(caps), dtype=np.int64)
    search, minimum = np.searchsorted, np.minimum
    for i, row in enumerate(room):
        depth[i] = size
        size = minimum(size + added[i] - search(ordered, size + lift[i]), row)
    max_hit = np.minimum(np.maximum(np.fromiter((r.max_hit for r in requests), dtype=np.int64, count=R), 0), n)
    return _leading_hits(flat, offsets, max_hit, depth, top)
