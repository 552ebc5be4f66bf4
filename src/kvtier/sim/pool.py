"""vLLM's GPU block pool as an LRU over physical block copies (at concurrency 1: `release`; with
requests running at once: `acquire` when one starts, `give_back` when it ends).

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

    __slots__ = ("capacity", "_queue", "_copies", "_serial", "evictions", "_refs", "_scratch")

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._queue: OrderedDict[int, int] = OrderedDict()  # copy -> block id; front = next victim
        self._copies: dict[int, list[int]] = {}  # block id -> its copies, first = the one a hit uses
        self._serial = 0
        self.evictions = 0
        self._refs: dict[int, tuple[int, int]] = {}  # copy held by running requests -> (block id, holders)
        self._scratch = 0  # unhashed slots held by running requests

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
        return self._evict(len(queue) - max(self.capacity - reserve, 0))

    def _evict(self, n: int) -> list[int]:
        """Evict `n` copies from the front of the free queue; the ids whose last copy went."""
        queue, copies = self._queue, self._copies
        gone: list[int] = []
        for _ in range(max(n, 0)):
            copy, block = queue.popitem(last=False)
            left = copies[block]
            left.remove(copy)
            if not left:
                del copies[block]
                gone.append(block)
        self.evictions += max(n, 0)
        return gone

    def held(self) -> int:
        """Slots held by running requests (acquire), which nothing can evict."""
        return len(self._refs) + self._scratch

    def acquire(self, hit: Sequence[int], fresh: Sequence[int], scratch: int = 0) -> tuple[list[int], list[int], int]:
        """A request starts while others may run (vLLM's scheduler admitting it): the copy of each
        `hit` block that a hit uses leaves the free queue (a block held by a running request is never
        evicted), and a new copy of each `fresh` block plus `scratch` unhashed slots take free
        slots: an empty one, else the cached copy at the front of the queue, which is evicted.

        Returns the copies it holds (hit, then fresh, in the order given), the ids whose last copy
        was evicted, and how many slots it could not get because every slot was held (vLLM would
        not have admitted it; the caller's admission rule keeps this at 0).
        """
        queue, copies, refs = self._queue, self._copies, self._refs
        held: list[int] = []
        for block in hit:
            copy = copies[block][0]
            queue.pop(copy, None)
            refs[copy] = (block, refs[copy][1] + 1 if copy in refs else 1)
            held.append(copy)
        excess = len(queue) + self.held() + len(fresh) + scratch - self.capacity
        evict = min(max(excess, 0), len(queue))
        gone = self._evict(evict)
        for block in fresh:
            self._serial += 1
            copies.setdefault(block, []).append(self._serial)
            refs[self._serial] = (block, 1)
            held.append(self._serial)
        self._scratch += scratch
        return held, gone, max(excess, 0) - evict

    def give_back(self, held: Iterable[int], scratch: int = 0) -> None:
        """A request ends: its copies, in the order vLLM frees them, join the end of the free
        queue once no running request holds them; its unhashed slots become empty."""
        queue, refs = self._queue, self._refs
        for copy in held:
            block, n = refs[copy]
            if n > 1:
                refs[copy] = (block, n - 1)
                continue
            del refs[copy]
            queue[copy] = block
        self._scratch -= scratch

    def resident(self) -> list[int]:
        """Block id of every copy, from the next victim to the most recent."""
        return list(self._queue.values())
