"""Validation on public traces: does the simulator find what the Mooncake paper reports?

Mooncake (FAST'25) gives, for its conversation trace, the share of input tokens an unbounded
prefix cache could reuse (about 40%) and notes that a local cache of 3M tokens reaches less
than half of that. Both come from one stack pass here: every capacity at once.
"""

from __future__ import annotations

import numpy as np

from ..errors import RawRecordError
from ..manifest import sha256_of
from ..numbers import NumbersWriter
from ..sim.stack import hits_by_capacity, stack_positions
from ..workloads import traces

UNBOUNDED = 10**15


def reuse_shares(path: str, block_tokens: int, capacities_tokens: list[int]) -> np.ndarray:
    """Share of input tokens served by an LRU prefix cache of each capacity (in tokens)."""
    w = traces.mooncake(path, block_tokens)
    tokens = w.prompt_tokens
    hits = hits_by_capacity(stack_positions(w.requests), [c // block_tokens for c in capacities_tokens])
    return np.minimum(hits * block_tokens, tokens[:, None]).sum(axis=0) / tokens.sum()


def agentic_replay(path: str, block_tokens: int, gpu_tokens: int, pool_blocks: int) -> dict[str, float]:
    """The public agentic sessions (kv-cache-tester) at the note's operating point, interleaved
    by their recorded times (all sessions start together: they carry no start times)."""
    from .replay import Config, replay

    w = traces.kv_cache_tester(path, block_tokens)
    r = replay(w, Config(gpu_tokens, pool_blocks, "write_through"))
    total = float(r["tokens"].sum())
    pool, computed = float(r["pool"].sum()), float(r["computed"].sum())
    return {"share_gpu": float(r["gpu"].sum()) / total, "share_pool": pool / total, "share_computed": computed / total,
            "pool_share_of_misses": pool / (pool + computed) if pool + computed else 0.0, "requests": float(len(r))}


def mooncake_validation(paths: dict[str, str], sha256: dict[str, str], block_tokens: int, lru_tokens: int,
                        writer: NumbersWriter, operating_point: tuple[int, int, int] | None = None,
                        operating_point_from: tuple[str, ...] = ()) -> None:
    """Mooncake traces against the paper; kv-cache-tester sessions at the operating point
    (GPU tokens, pool blocks, block tokens) when given, read from `operating_point_from` (the
    fit's record): a number names the trace it replayed and the files its sizes came from."""
    for name, path in paths.items():
        if sha256_of(path) != sha256[name]:
            raise RawRecordError(path, f"sha256 differs from the pinned {sha256[name][:12]}…: not the published trace")
        if path.endswith(".tgz"):
            if operating_point is not None:
                gpu_tokens, pool_blocks, op_block = operating_point
                for k, v in agentic_replay(path, op_block, gpu_tokens, pool_blocks).items():
                    writer.add(f"cf.public.{name}.{k}", v, "count" if k == "requests" else "fraction",
                               inputs=[path, *operating_point_from])
            continue
        unbounded, lru = reuse_shares(path, block_tokens, [UNBOUNDED, lru_tokens])
        writer.add(f"cf.public.{name}.unbounded_share", unbounded, "fraction", inputs=[path])
        writer.add(f"cf.public.{name}.lru_share", lru, "fraction", inputs=[path],
                   note=f"LRU prefix cache of {lru_tokens} tokens")
    writer.add("cf.public.lru_tokens", lru_tokens, "tokens", inputs=())  # a setting (config)
