"""Which device block goes to which host chunk slot: the index plan of one transfer (numpy only).

The host pool is a table of chunks, each `blocks_per_chunk` (bpc) device blocks long. A transfer
names device blocks per KV-cache group (in request order, `group_sizes` of them) and the host
chunks they map to; the first block of a group sits at logical index `block_indices[g]` of the
request, so it enters its first chunk at slot `block_indices[g] % bpc` (a load that starts
mid-chunk, after a partial GPU hit). This mirrors vLLM's `SingleDirectionOffloadingHandler`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class GroupPlan:
    group: int
    device_blocks: np.ndarray   # device block ids, in request order
    host_chunks: np.ndarray     # host chunk of each device block
    chunk_slots: np.ndarray     # slot (0..bpc-1) of each device block within its chunk


def copy_plan(device_ids: Sequence[int] | np.ndarray, host_chunk_ids: Sequence[int] | np.ndarray,
              group_sizes: Sequence[int], block_indices: Sequence[int], blocks_per_chunk: int) -> list[GroupPlan]:
    """One GroupPlan per non-empty group; raises ValueError if the two sides do not line up."""
    if blocks_per_chunk < 1:
        raise ValueError(f"blocks_per_chunk must be >= 1, not {blocks_per_chunk}")
    if len(group_sizes) != len(block_indices):
        raise ValueError(f"{len(group_sizes)} group sizes but {len(block_indices)} block indices")
    dev = np.asarray(device_ids, dtype=np.int64)
    host = np.asarray(host_chunk_ids, dtype=np.int64)
    if int(sum(group_sizes)) != len(dev):
        raise ValueError(f"group sizes sum to {sum(group_sizes)}, but {len(dev)} device blocks were given")
    plans: list[GroupPlan] = []
    d_off = h_off = 0
    slots = np.arange(blocks_per_chunk, dtype=np.int64)
    for g, (n, first) in enumerate(zip(group_sizes, block_indices)):
        if n == 0:
            continue
        skip = int(first) % blocks_per_chunk
        n_chunks = -(-(n + skip) // blocks_per_chunk)
        chunks = host[h_off:h_off + n_chunks]
        if len(chunks) != n_chunks:
            raise ValueError(f"group {g}: {n} blocks from slot {skip} need {n_chunks} host chunks, "
                             f"only {len(chunks)} left")
        flat = (chunks[:, None] * blocks_per_chunk + slots[None, :]).ravel()[skip:skip + n]
        plans.append(GroupPlan(g, dev[d_off:d_off + n], flat // blocks_per_chunk, flat % blocks_per_chunk))
        d_off += n
        h_off += n_chunks
    if h_off != len(host):
        raise ValueError(f"{len(host)} host chunks were given, the blocks fill {h_off}")
    return plans
