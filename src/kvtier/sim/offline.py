"""Two-tier replay without replaying: TieredCache(flavor="lmcache", policy="write_through") for
every CPU capacity at once, from two vectorised stack passes.

Why it is exact. The GPU tier never looks at the CPU tier, so its hits come from one stack
pass in vLLM's order (as `stack_positions` / `hits_by_capacity`). The CPU tier's reference
string does not depend on its capacity: a request that misses the GPU (g < max_hit) moves its leading resident chunk keys
keys[:c] to the end in prompt order and then appends (or moves) keys[c:] in prompt order --
together, all its chunk keys touched first to last, whatever c is -- and trims only after all
are placed; a full GPU hit touches nothing. So the CPU tier of C chunks is always the top C of
one LRU stack over that string, and c for every C is the leading run of stack positions below C
(`stream_positions(..., order="forward")`, counted when the request starts).

The argument needs each request's resident part on the GPU to be a prefix (TieredCache places
missed blocks without moving resident ones) and no id listed twice in a request (a repeated
chunk key would make the CPU order depend on c). Prefix-chained traces -- vLLM's block hashes,
Mooncake's hash_ids -- satisfy both; other input is refused with ValueError rather than
answered inexactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Iterable, Sequence

import numpy as np

from .requests import Request
from .stack import StackPositions, _leading_hits, stream_positions, vllm_hits_by_capacity
from .tiers import Outcome


@dataclass(frozen=True)
class OfflineResult:
    """Outcome columns as arrays, rows = requests, columns = CPU capacities (in the order given).

    `outcomes(j)` builds the Outcome objects of column j; the arrays alone avoid that cost when
    only totals are wanted.
    """

    labels: list[str]
    tokens: np.ndarray           # (R,)
    gpu_blocks: np.ndarray       # (R,)
    gpu_tokens: np.ndarray       # (R,)
    cpu_capacities: np.ndarray   # (K,)
    cpu_tokens: np.ndarray       # (R, K)
    computed_tokens: np.ndarray  # (R, K)
    cpu_chunks: np.ndarray       # (R, K)

    def outcomes(self, j: int) -> list[Outcome]:
        """The Outcomes TieredCache.replay returns for capacity cpu_capacities[j]."""
        g, t, gt = self.gpu_blocks.tolist(), self.tokens.tolist(), self.gpu_tokens.tolist()
        return list(map(Outcome, self.labels, t, gt, self.cpu_tokens[:, j].tolist(),
                        self.computed_tokens[:, j].tolist(), g, self.cpu_chunks[:, j].tolist()))


def _int_ids(blocks: list[tuple], total: int) -> np.ndarray:
    """All blocks, request after request, as int64; ids that do not fit (or are not ints) are
    renumbered densely (only equality matters)."""
    try:
        return np.fromiter(chain.from_iterable(blocks), dtype=np.int64, count=total)
    except (OverflowError, TypeError, ValueError):
        dense: dict = {}
        return np.fromiter((dense.setdefault(b, len(dense)) for b in chain.from_iterable(blocks)),
                           dtype=np.int64, count=total)


def offline_arrays(requests: Sequence[Request], gpu_blocks: int, block_tokens: int,
                   cpu_capacities: Sequence[int], chunk_blocks: int = 1) -> OfflineResult:
    """`replay_offline` as arrays (see OfflineResult); raises ValueError where it would not be exact."""
    if block_tokens < 1 or chunk_blocks < 1:
        raise ValueError("chunk_blocks and block_tokens must be >= 1")
    if gpu_blocks < 0:
        raise ValueError(f"gpu_blocks must be >= 0, got {gpu_blocks}")
    caps = np.asarray(cpu_capacities, dtype=np.int64).reshape(-1)
    if (caps < 0).any():
        raise ValueError("CPU capacities must be >= 0")
    reqs = requests if isinstance(requests, Sequence) else list(requests)
    R, K, k = len(reqs), len(caps), chunk_blocks
    blocks = list(map(attrgetter("blocks"), reqs))
    n = np.fromiter(map(len, blocks), dtype=np.int64, count=R)
    offsets = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(n, out=offsets[1:])
    if sum(map(len, map(set, blocks))) != int(offsets[-1]):
        raise ValueError("a request lists a block twice: the CPU tier's order would depend on its capacity; "
                         "replay with TieredCache")
    max_hit = np.fromiter(map(attrgetter("max_hit"), reqs), dtype=np.int64, count=R)
    if (max_hit < 0).any():
        raise ValueError("max_hit must be >= 0")
    tokens = np.fromiter(map(attrgetter("tokens"), reqs), dtype=np.int64, count=R)
    unique = np.fromiter(map(attrgetter("unique"), reqs), dtype=np.int64, count=R)
    ids = _int_ids(blocks, int(offsets[-1]))  # prompt order
    # (1) GPU hits from one pass in vLLM's order (unique blocks, then the prompt last to first)
    flat = stream_positions(ids, offsets, order="reverse", unique=unique)
    # resident part of every prompt a prefix at every depth <=> positions never fall along a prompt
    drop = np.flatnonzero(flat[1:] < flat[:-1]) + 1
    if len(drop) and not np.isin(drop, offsets).all():
        raise ValueError("a block is resident behind a missing one (requests not prefix-chained): "
                         "TieredCache's GPU tier is no stack there; replay with TieredCache")
    if any(map(attrgetter("scratch"), reqs)):  # as hits_by_capacity: exact depth tracking
        pos = StackPositions()
        pos.requests, pos.flat, pos.offsets = reqs, flat, offsets
        g = vllm_hits_by_capacity(reqs, [gpu_blocks], positions=pos)[:, 0]
    else:
        top = len(flat) + int(unique.sum()) + 1  # above every real position
        g = _leading_hits(flat, offsets, np.minimum(max_hit, n), np.full((R, 1), gpu_blocks, dtype=np.int64),
                          top)[:, 0]
    # (2) the CPU stream: requests that miss the GPU, all their chunk keys first to last
    miss = g < max_hit
    sel = np.flatnonzero(miss)
    m_miss = n[sel] // k
    coff = np.zeros(len(sel) + 1, dtype=np.int64)
    np.cumsum(m_miss, out=coff[1:])
    total = int(coff[-1])
    rep = np.repeat(np.arange(len(sel), dtype=np.int64), m_miss)
    keys = ids[offsets[sel][rep] + (k - 1) + k * (np.arange(total, dtype=np.int64) - coff[rep])]
    # (3) leading run c of chunks held, for every capacity at once
    c = np.zeros((R, K), dtype=np.int64)
    if total and K:
        cpos = stream_positions(keys, coff, order="forward")
        top = total + 1  # above every real position
        c[miss] = _leading_hits(cpos, coff, m_miss, np.broadcast_to(caps, (len(m_miss), K)), top)
    # (4) the outcome as TieredCache.access computes it
    reach = np.minimum(c * k, max_hit[:, None])
    gc = g[:, None]
    loads = reach > gc
    loaded = np.where(loads, reach - gc, 0)
    chunks = np.where(loads, c - gc // k, 0)
    hit_tokens = np.minimum((gc + loaded) * block_tokens, tokens[:, None])
    gpu_tokens = np.minimum(g * block_tokens, tokens)
    return OfflineResult([r.label for r in reqs], tokens, g, gpu_tokens, caps,
                         hit_tokens - gpu_tokens[:, None], tokens[:, None] - hit_tokens, chunks)


def replay_offline(requests: Sequence[Request], gpu_blocks: int, block_tokens: int,
                   cpu_capacities: Sequence[int], chunk_blocks: int = 1) -> list[list[Outcome]]:
    """Per CPU capacity (in the order given), the Outcomes of
    TieredCache(gpu_blocks, block_tokens, cpu_chunks=C, chunk_blocks=chunk_blocks,
    policy="write_through", flavor="lmcache").replay(requests), from two stack passes instead of
    one replay per capacity. Raises ValueError for requests it cannot answer exactly (a block
    listed twice in a request, or not prefix-chained); replay those with TieredCache.
    """
    res = offline_arrays(requests, gpu_blocks, block_tokens, cpu_capacities, chunk_blocks)
    return [res.outcomes(j) for j in range(len(res.cpu_capacities))]
