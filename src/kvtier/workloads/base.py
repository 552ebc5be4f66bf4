"""The common shape of a workload, and regrouping block ids to the simulated block size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..sim.fast import Flat, flatten
from ..sim.requests import Request


class LazyRequests(Sequence):
    """Requests held as arrays (a Flat and labels); Request objects are made only when read."""

    def __init__(self, flat: Flat, labels: np.ndarray | Callable[[], np.ndarray]):
        """`labels`: one per request, or a function that makes them when first read."""
        self.flat, self._labels = flat, labels

    @property
    def labels(self) -> np.ndarray:
        if callable(self._labels):
            self._labels = self._labels()
        return self._labels

    def __len__(self) -> int:
        return len(self.flat)

    def _one(self, i: int) -> Request:
        f = self.flat
        return Request(tuple(f.ids[f.offsets[i]:f.offsets[i + 1]].tolist()), int(f.tokens[i]), max_hit=int(f.max_hit[i]),
                       scratch=int(f.scratch[i]), unique=int(f.unique[i]), label=str(self.labels[i]))

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._one(i)

    def __iter__(self):
        return (self._one(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

SCOPE_SHIFT = 40  # local ids (< 2**40) are made global as scope << 40 | id


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order, at `block_tokens` per block, with arrival times in seconds."""

    name: str
    block_tokens: int
    times: np.ndarray
    requests: Sequence[Request]
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        if len(self.times) != len(self.requests) or len(self.output_tokens) != len(self.requests):
            raise ValueError("times, requests and output_tokens must have one entry per request")
        if len(self.times) and np.any(np.diff(self.times) < 0):
            raise ValueError("requests must be in arrival order")

    @cached_property
    def flat(self) -> Flat:
        """The requests as arrays, for the compiled replay (built once per workload)."""
        if isinstance(self.requests, LazyRequests):
            return self.requests.flat
        return flatten(self.requests)

    @property
    def prompt_tokens(self) -> np.ndarray:
        return self.flat.tokens

    def lookups(self) -> int:
        """Block lookups a replay performs (one per cacheable block)."""
        return int(self.flat.offsets[-1])


def regroup(ids: list[int] | tuple[int, ...], tokens: int, base: int, target: int, scope: int = 0) -> tuple[int, ...]:
    """Prefix-chained ids at `base` tokens a block -> ids at `target` tokens a block.

    A target block is named by the id of the last base block it reaches into: ids are
    prefix-chained, so that id stands for the whole prefix up to there. Only full target
    blocks are cacheable, as in vLLM. A target smaller than the trace's block is refused: one
    base id would name several target blocks (repeated ids), and a prefix shared only part-way
    into a base block cannot be recovered from the trace.
    """
    if base <= 0 or target <= 0:
        raise ValueError("block sizes must be positive")
    if target < base:
        raise ValueError(f"cannot regroup {base}-token trace blocks into smaller {target}-token blocks exactly")
    full = min(tokens // target, (len(ids) * base) // target)
    last_base = [-(-((k + 1) * target) // base) - 1 for k in range(full)]
    tag = scope << SCOPE_SHIFT
    return tuple(tag | int(ids[i]) for i in last_base)


def vllm_request(blocks: tuple[int, ...], tokens: int, block_tokens: int, output_tokens: int, label: str = "") -> Request:
    """A request as vLLM caches it (see kvtier.sim.requests.Request): at most (tokens - 1) // B
    blocks hit; full blocks of generated tokens are hashed but unique; a final partial block is
    unhashed scratch."""
    full = len(blocks)
    kv = tokens + max(output_tokens - 1, 0)  # the last sampled token is never fed back
    return Request(blocks, tokens, max_hit=min(full, (tokens - 1) // block_tokens),
                   scratch=1 if kv % block_tokens else 0, unique=max(kv // block_tokens - full, 0), label=label)
