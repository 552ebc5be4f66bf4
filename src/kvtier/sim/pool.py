"""vLLM's GPU block pool at concurrency 1, as an LRU over physical block copies.

vLLM (v1) keeps free blocks in one queue: allocation takes from the front (evicting the cached
block found there), a finished request's blocks are freed tail first to the end, so the pool is
an LRU over physical blocks. Two details of `BlockPool` matter for exact counts:

- Blocks without a hash (the request's partly filled last block) go to the *front* of the queue
  from vLLM 0.24 on (`free_blocks` prepends them), so they are reused before any cached block is
  evicted; 0.17-0.23 append every block, and the unhashed one then sits in the LRU order like
  any other (`unhashed_first=False`).
- vLLM never de-duplicates: a block that is computed again while a cached copy exists (the last
  block of a prompt whose length is a multiple of the block size, recomputed on a full hit)
  becomes a second physical block with the same hash. Both copies take room; a hit uses the
  copy the hash map lists first (`BlockHashToBlockMap.get_one_block`), eviction takes whichever
  is at the front.

So a block id may have several copies; it is cached while any copy is. Copies are named by
serial numbers; `_copies` lists each id's copies in hash-map order.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence


class BlockPool:
    """The GPU tier: `capacity` usable blocks (vLLM's null block excluded)."""

    __slots__ = ("capacity", "_queue", "_copies", "_serial", "evictions")

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._queue: OrderedDict[int, int] = OrderedDict()  # copy -> block id; front = next victim
        self._copies: dict[int, list[int]] = {}  # block id -> its copies, first = the one a hit uses
        self._serial = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, block: int) -> bool:
        return block in self._copies

    def prefix_hits(self, blocks: Sequence[int], limit: int | None = None) -> int:
        """How many leading blocks are cached (at most `limit`); touches nothing."""
        n = len(blocks) if limit is None else min(limit, len(blocks))
        copies = self._copies
        for i in range(n):
            if blocks[i] not in copies:
                return i
        return n

    def release(self, fresh: Iterable[int], hit: Iterable[int], reserve: int = 0) -> list[int]:
        """End of a request: its blocks join the queue in the order vLLM frees them.

        `fresh` are the blocks the request allocated (a new copy each, even of a cached id),
        `hit` the cached blocks it used (their first copy moves to the end), both in free
        order. Then blocks are evicted from the front until `reserve` slots are free (the
        unhashed blocks the next allocation takes from the front). Returns the ids whose last
        copy was evicted, in eviction order.
        """
        queue, copies = self._queue, self._copies
        for block in fresh:
            self._serial += 1
            queue[self._serial] = block
            copies.setdefault(block, []).append(self._serial)
        for block in hit:
            queue.move_to_end(copies[block][0])
        gone: list[int] = []
        excess = len(queue) - max(self.capacity - reserve, 0)
        for _ in range(max(excess, 0)):
            copy, block = queue.popitem(last=False)
            left = copies[block]
            left.remove(copy)
            if not left:
                del copies[block]
                gone.append(block)
        self.evictions += max(excess, 0)
        return gone

    def resident(self) -> list[int]:
        """Block id of every copy, from the next victim to the most recent."""
        return list(self._queue.values())
