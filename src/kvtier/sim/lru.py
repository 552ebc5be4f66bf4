"""One cache tier with LRU eviction, in the order vLLM's block pool evicts.

vLLM (v1) frees a finished request's blocks tail first onto the end of its free queue and
reuses blocks from the front, so the most recent request is the last to lose blocks and,
within one prefix, the tail blocks go before the head. Treating every freed block as a
reference in that order makes the pool a plain LRU over block ids: a tier here is an
OrderedDict whose front is the next victim. Because the head of a prefix is always more
recent than its tail, the resident part of any prefix is itself a prefix, which is why a
lookup may stop at the first missing block.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import repeat
from typing import Callable, Iterable, Sequence


def move_or_insert(entries: OrderedDict[int, None], keys: Iterable[int]) -> None:
    """Make each key the most recent, in order, inserting the absent ones (the slow path taken
    when some of a request's keys are already resident)."""
    move = entries.move_to_end
    for k in keys:
        if k in entries:
            move(k)
        else:
            entries[k] = None


class LRUTier:
    """A tier holding up to `capacity` entries (blocks or chunks); the front is evicted first."""

    __slots__ = ("capacity", "_entries", "on_evict", "evictions")

    def __init__(self, capacity: int, on_evict: Callable[[int], None] | None = None):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._entries: OrderedDict[int, None] = OrderedDict()
        self.on_evict = on_evict
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def prefix_hits(self, keys: Sequence[int], limit: int | None = None) -> int:
        """How many leading keys are resident; stops at the first missing one. Touches nothing."""
        head = keys if limit is None or limit >= len(keys) else keys[:limit]
        flags = list(map(self._entries.__contains__, head))  # C speed; cheaper than stopping early in Python
        try:
            return flags.index(False)
        except ValueError:
            return len(flags)

    def touch_in_order(self, keys_lru_first: Iterable[int], resident_lru_first: Sequence[int] = (), reserve: int = 0,
                       absent: bool = False) -> None:
        """Make keys the most recent, the first given becoming the least recent of them, then evict.

        `resident_lru_first` are keys known to be resident (a request's hit prefix); they are
        placed after `keys_lru_first`. Eviction runs after all keys are placed, so the keys of
        one request never evict each other (vLLM holds a running request's blocks); a request
        larger than the tier keeps only its most recent part. `reserve` slots are kept free
        for blocks the request holds outside the cache (vLLM's unhashed partial blocks).
        `absent=True` promises that no key of `keys_lru_first` is resident (skips the check).
        """
        entries = self._entries
        fresh = dict.fromkeys(keys_lru_first)
        if absent or entries.keys().isdisjoint(fresh):
            entries.update(fresh)  # the common case, in C: none of them is resident yet
        else:
            move_or_insert(entries, fresh)
        if resident_lru_first:
            deque(map(entries.move_to_end, resident_lru_first), maxlen=0)
        self._trim(self.capacity - reserve)

    def evict_first(self, n: int, skip: set[int]) -> None:
        """Evict the `n` least recent entries not in `skip` (vLLM's policy.evict with protected keys)."""
        victims = [k for k in self._entries if k not in skip][:n]
        for k in victims:
            del self._entries[k]
        self.evictions += len(victims)
        if self.on_evict is not None:
            for k in victims:
                self.on_evict(k)

    def touch(self, resident: Iterable[int]) -> None:
        """Make resident keys the most recent, in the order given (LMCache's get on a hit)."""
        deque(map(self._entries.move_to_end, resident), maxlen=0)

    def _trim(self, limit: int | None = None) -> None:
        entries = self._entries
        excess = len(entries) - (self.capacity if limit is None else max(limit, 0))
        if excess <= 0:
            return
        popped = map(entries.popitem, repeat(False, excess))  # popitem(last=False): the LRU end
        self.evictions += excess
        cb = self.on_evict
        if cb is None:
            deque(popped, maxlen=0)  # drain at C speed: no Python step per evicted block
        else:
            for key, _ in popped:
                cb(key)

    def resident(self) -> list[int]:
        """Entries from the next victim to the most recent."""
        return list(self._entries)
