"""The compiled replays (`kvtier.sim._core`, C, built at install) behind TieredCache's rules.

`flatten` turns requests into arrays once (a workload file stores them: kvtier.workloads.store);
`replay_flat` replays them through the C loop and returns outcome columns. TieredCache stays the
readable reference; tests require equal outcomes per request on every test workload.
`replay_admitted_flat` is kvtier.sim.resident.replay_admitted (ResidentCache: requests that
overlap in time) compiled the same way; replay_admitted stays its readable reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Sequence

import numpy as np

from .requests import Request
from .resident import Admission
from .tiers import FLAVORS, POLICIES, Outcome


@dataclass(frozen=True)
class Flat:
    """Requests as arrays: request r's blocks are ids[offsets[r]:offsets[r + 1]] (prompt order).
    Ids are dense, 0 .. universe - 1 (the compiled loop indexes arrays by them)."""

    ids: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    max_hit: np.ndarray
    scratch: np.ndarray
    unique: np.ndarray
    universe: int

    def __len__(self) -> int:
        return len(self.tokens)


def flatten(requests: Sequence[Request]) -> Flat:
    """Arrays of `requests`, ids renumbered densely (only equality matters). A request listing an
    id twice is refused: no vLLM hash chain does, and the compiled loop assumes it."""
    R = len(requests)
    blocks = list(map(attrgetter("blocks"), requests))
    n = np.fromiter(map(len, blocks), dtype=np.int64, count=R)
    offsets = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(n, out=offsets[1:])
    total = int(offsets[-1])
    try:
        ids = np.fromiter(chain.from_iterable(blocks), dtype=np.int64, count=total)
        universe, ids = dense_ids(ids)
    except (OverflowError, TypeError, ValueError):
        dense: dict = {}
        ids = np.fromiter((dense.setdefault(b, len(dense)) for b in chain.from_iterable(blocks)), dtype=np.int64, count=total)
        universe = len(dense)
    col = lambda name: np.fromiter(map(attrgetter(name), requests), dtype=np.int64, count=R)  # noqa: E731
    flat = Flat(ids, offsets, col("tokens"), col("max_hit"), col("scratch"), col("unique"), universe)
    check(flat)
    return flat


def dense_ids(ids: np.ndarray) -> tuple[int, np.ndarray]:
    """(number of distinct ids, ids renumbered 0 ..), order-free: equal ids stay equal.

    Each id becomes its rank among the distinct ids (np.unique's inverse). Ids that are already
    small non-negative numbers (a workload file's, a sweep run's sent blocks) are ranked by a table
    of the ids present instead of a sort: the same numbers, in O(ids)."""
    if len(ids) and ids.min() >= 0 and ids.max() < 2 * len(ids):
        present = np.zeros(int(ids.max()) + 1, dtype=bool)
        present[ids] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return int(rank[-1]) + 1, rank[ids]
    uniq, inv = np.unique(ids, return_inverse=True)
    return len(uniq), inv.astype(np.int64, copy=False)


def check(flat: Flat) -> None:
    """Refuse what the compiled loop does not model: an id listed twice in one request. Ids are
    0 .. universe - 1, so (request, id) sorts as one number, request x universe + id, when that
    fits in 64 bits (one sort; a lexsort of the two otherwise)."""
    seg = np.repeat(np.arange(len(flat), dtype=np.int64), np.diff(flat.offsets))
    U = max(flat.universe, 1)
    if len(flat) * U < 2**62:
        key = np.sort(seg * U + flat.ids)
        dup = key[1:] == key[:-1]
        first = key[1:][dup] // U
    else:
        order = np.lexsort((flat.ids, seg))
        s, i = seg[order], flat.ids[order]
        dup = (s[1:] == s[:-1]) & (i[1:] == i[:-1])
        first = s[1:][dup]
    if dup.any():
        raise ValueError(f"request {int(first[0])} lists a block twice; replay it with TieredCache")


@dataclass(frozen=True)
class Columns:
    """Outcome columns, one row per request (as Outcome's fields)."""

    tokens: np.ndarray
    gpu_blocks: np.ndarray
    gpu_tokens: np.ndarray
    cpu_tokens: np.ndarray
    computed_tokens: np.ndarray
    cpu_chunks: np.ndarray
    stored_chunks: np.ndarray  # chunks the CPU tier took in for each request (TieredCache.stored_chunks, per request)

    def outcomes(self, labels: Sequence[str]) -> list[Outcome]:
        cols = (self.tokens, self.gpu_tokens, self.cpu_tokens, self.computed_tokens, self.gpu_blocks, self.cpu_chunks)
        return list(map(Outcome, labels, *(c.tolist() for c in cols)))


def replay_flat(flat: Flat, gpu_blocks: int, block_tokens: int, *, cpu_chunks: int | None = None, chunk_blocks: int = 1,
                policy: str = "write_through", flavor: str = "lmcache", unhashed_first: bool = True,
                step_tokens: int | None = None) -> Columns:
    """TieredCache(...).replay as arrays, by the compiled loop."""
    if policy not in POLICIES or flavor not in FLAVORS:
        raise ValueError(f"policy must be one of {POLICIES} and flavor one of {FLAVORS}")
    _check_sizes(gpu_blocks, block_tokens, chunk_blocks, cpu_chunks, step_tokens)
    _core = _compiled()
    R = len(flat)
    g, loaded, chunks, stored = (np.zeros(R, dtype=np.int64) for _ in range(4))
    _core.replay(*_arrays(flat), int(flat.universe), int(gpu_blocks), -1 if cpu_chunks is None else int(cpu_chunks),
                 int(chunk_blocks), int(block_tokens), 0 if step_tokens is None else int(step_tokens),
                 policy == "store_on_evict", flavor == "vllm", bool(unhashed_first), g, loaded, chunks, stored)
    return _columns(flat, block_tokens, flavor, g, loaded, chunks, stored)


def _check_sizes(gpu_blocks: int, block_tokens: int, chunk_blocks: int, cpu_chunks: int | None,
                 step_tokens: int | None) -> None:
    """The tiers' sizes both compiled loops accept (the C code trusts them)."""
    if gpu_blocks < 0 or block_tokens < 1 or chunk_blocks < 1 or (cpu_chunks is not None and cpu_chunks < 0):
        raise ValueError("sizes must be >= 0 (block_tokens, chunk_blocks >= 1)")
    if step_tokens is not None and step_tokens < 1:
        raise ValueError(f"step_tokens must be >= 1 or None, got {step_tokens}")


def _compiled():
    """The extension module, or a clear error saying how to build it."""
    try:
        from . import _core
    except ImportError as e:  # the extension is built by `pip install -e .`
        raise ImportError(f"kvtier's compiled simulator core is not built ({e}); run `pip install -e .` "
                          "in the repository (it needs a C compiler)") from None
    if not hasattr(_core, "replay_admitted") or "step_tokens" not in (_core.replay.__doc__ or ""):  # an older _core.c
        raise ImportError("kvtier's compiled simulator core was built from an older _core.c (no step_tokens or "
                          "replay_admitted); run `pip install -e .` in the repository to rebuild it")
    return _core


def _arrays(flat: Flat) -> tuple[np.ndarray, ...]:
    """The request arrays the C loops read, contiguous int64."""
    c = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return c(flat.ids), c(flat.offsets), c(flat.max_hit), c(flat.scratch), c(flat.unique), c(flat.tokens)


def _columns(flat: Flat, block_tokens: int, flavor: str, g: np.ndarray, loaded: np.ndarray, chunks: np.ndarray,
             stored: np.ndarray) -> Columns:
    """Outcome columns from blocks hit and loaded, as TieredCache._outcome computes them."""
    # a native load that reaches the prompt's end leaves its last token to compute (as TieredCache)
    cap = flat.tokens - ((loaded > 0) & (flavor == "vllm"))
    hit = np.minimum((g + loaded) * block_tokens, cap)
    gpu_tokens = np.minimum(g * block_tokens, flat.tokens)
    return Columns(flat.tokens, g, gpu_tokens, hit - gpu_tokens, flat.tokens - hit, chunks, stored)


def replay(requests: Sequence[Request], gpu_blocks: int, block_tokens: int, **kw) -> list[Outcome]:
    """Outcomes as TieredCache(gpu_blocks, block_tokens, **kw).replay(requests) gives them."""
    return replay_flat(flatten(requests), gpu_blocks, block_tokens, **kw).outcomes([r.label for r in requests])


def replay_admitted_flat(flat: Flat, arrive: Sequence[float] | np.ndarray, finish: Sequence[float] | np.ndarray,
                         gpu_blocks: int, block_tokens: int, *, cpu_chunks: int | None = None, chunk_blocks: int = 1,
                         flavor: str = "lmcache", step_tokens: int | None = None) -> tuple[Columns, Admission]:
    """kvtier.sim.resident.replay_admitted(ResidentCache(gpu_blocks, block_tokens, ...), requests, arrive,
    finish) as arrays, by the compiled loop: the outcome columns (in the order given; stored_chunks
    per request sum to the cache's stored_chunks) and how admission went. Write-through, vLLM >= 0.24's
    free order, as ResidentCache."""
    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")
    _check_sizes(gpu_blocks, block_tokens, chunk_blocks, cpu_chunks, step_tokens)
    R = len(flat)
    a, f = np.asarray(arrive, dtype=np.float64), np.asarray(finish, dtype=np.float64)
    if not (len(a) == len(f) == R):
        raise ValueError("requests, arrive and finish must have one entry per request")
    if np.isnan(a).any() or np.isnan(f).any():
        raise ValueError("arrive and finish times must be numbers (NaN found)")
    early = np.flatnonzero(f <= a)  # replay_admitted would look for it among the waiting ones, before it arrived
    if len(early):
        raise ValueError(f"request {int(early[0])} finishes at {f[early[0]]} <= its arrival {a[early[0]]}")
    _core = _compiled()
    # replay_admitted's event order: by time, a finish before an arrival at the same time, then by request
    idx = np.arange(R, dtype=np.int64)
    order = np.lexsort((np.concatenate([idx, idx]), np.repeat(np.array([0, 1], dtype=np.int64), R), np.concatenate([f, a])))
    events = np.ascontiguousarray(2 * np.concatenate([idx, idx])[order] + (order >= R))
    g, loaded, chunks, stored = (np.zeros(R, dtype=np.int64) for _ in range(4))
    adm = np.zeros(4, dtype=np.int64)
    _core.replay_admitted(*_arrays(flat), events, int(flat.universe), int(gpu_blocks),
                          -1 if cpu_chunks is None else int(cpu_chunks), int(chunk_blocks), int(block_tokens),
                          0 if step_tokens is None else int(step_tokens), flavor == "vllm", g, loaded, chunks, stored, adm)
    return _columns(flat, block_tokens, flavor, g, loaded, chunks, stored), Admission(*map(int, adm))


def replay_admitted(requests: Sequence[Request], arrive: Sequence[float], finish: Sequence[float], gpu_blocks: int,
                    block_tokens: int, **kw) -> tuple[list[Outcome], Admission]:
    """What kvtier.sim.resident.replay_admitted(ResidentCache(gpu_blocks, block_tokens, **kw), ...) returns."""
    cols, adm = replay_admitted_flat(flatten(requests), arrive, finish, gpu_blocks, block_tokens, **kw)
    return cols.outcomes([r.label for r in requests]), adm
