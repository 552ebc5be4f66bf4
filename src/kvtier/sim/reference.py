"""An independent LRU to check the simulator against: libCacheSim (PyPI `libcachesim`).

libCacheSim replays a flat reference stream, one object at a time. A request in vLLM's order
is, for an LRU, the stream: its hit prefix (touched first, so the request never evicts its own
blocks), its missing blocks, then all its blocks again from last to first (the order vLLM frees
them, which sets their final recency). Hits are counted before the request touches anything,
with libCacheSim's non-updating `find`. Only for requests without scratch blocks.
"""

from __future__ import annotations

from typing import Sequence

from .requests import Request


def libcachesim_lru_hits(requests: Sequence[Request], capacity: int) -> list[int]:
    """Hit blocks per request in a libCacheSim LRU of `capacity` unit-size objects."""
    import libcachesim  # optional: only the checks need it

    if any(r.scratch or r.unique for r in requests):
        raise ValueError("the libCacheSim reference models whole cacheable blocks only (no scratch/unique blocks)")
    cache = libcachesim.LRU(cache_size=capacity)
    probe = libcachesim.Request(obj_size=1)
    out: list[int] = []
    for r in requests:
        h = 0
        while h < r.max_hit:
            probe.obj_id = r.blocks[h]
            if cache.find(probe, False) is None:
                break
            h += 1
        out.append(h)
        for b in (*r.blocks[:h], *reversed(r.blocks[h:]), *reversed(r.blocks)):
            probe.obj_id = b
            cache.get(probe)
    return out
