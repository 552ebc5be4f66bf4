"""The lab's experiments, run on the block simulator at the lab's sizes.

The request sequence mirrors the measurement: per pass the documents in pass order (a check
request after the last pass changes nothing before it). Every function returns plain numbers
or tables.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import pandas as pd

from ..sim import Outcome, Request, TieredCache, document_chain, fast, gpu_blocks_for, prompt_request

PASS_ORDERS = ("first", "second", "reverse")
OTHER_NAMESPACE = 1


@dataclass(frozen=True)
class LabShape:
    docs: int
    doc_tokens: int
    gpu_cache_tokens: int
    block_tokens: int
    generated: int = 1
    null_blocks: int = 1
    unhashed_first: bool = True  # vLLM >= 0.24 frees the partial block to the front (sim.frees_unhashed_first)

    @property
    def gpu_blocks(self) -> int:
        return gpu_blocks_for(self.gpu_cache_tokens, self.block_tokens, self.null_blocks)


def pass_docs(name: str, docs: int) -> list[int]:
    return list(range(docs - 1, -1, -1)) if name == "reverse" else list(range(docs))


def requests(shape: LabShape, block_tokens: int | None = None) -> list[Request]:
    """Three passes over the documents as the client sent them (labels 'pass:doc')."""
    B = block_tokens or shape.block_tokens
    out: list[Request] = []
    for p in PASS_ORDERS:
        out += [prompt_request(document_chain(d), shape.doc_tokens, B, generated=shape.generated, label=f"{p}:{d}")
                for d in pass_docs(p, shape.docs)]
    return out


def outcomes_table(outcomes: list[Outcome]) -> pd.DataFrame:
    rows = []
    for o in outcomes:
        p, doc = o.label.split(":")
        rows.append({"pass": p, "doc": int(doc) if doc.isdigit() else -1, "tokens": o.tokens, "gpu_tokens": o.gpu_tokens,
                     "cpu_tokens": o.cpu_tokens, "computed_tokens": o.computed_tokens})
    return pd.DataFrame(rows)


def replay(shape: LabShape, *, cpu_chunks: int | None = None, chunk_tokens: int | None = None,
           policy: str = "write_through", block_tokens: int | None = None, gpu_blocks: int | None = None) -> pd.DataFrame:
    """Outcome of every request, single tier (cpu_chunks None) or two tiers."""
    B = block_tokens or shape.block_tokens
    blocks = gpu_blocks if gpu_blocks is not None else gpu_blocks_for(shape.gpu_cache_tokens, B, shape.null_blocks)
    chunk_blocks = 1 if chunk_tokens is None else chunk_tokens // B
    # the compiled core (equal to TieredCache per request: tests/test_sim_fast.py)
    return outcomes_table(fast.replay(requests(shape, B), blocks, B, cpu_chunks=cpu_chunks, chunk_blocks=max(chunk_blocks, 1),
                                      policy=policy, unhashed_first=shape.unhashed_first))


def full_hit_tokens(shape: LabShape, block_tokens: int | None = None) -> int:
    B = block_tokens or shape.block_tokens
    return (shape.doc_tokens - 1) // B * B


def survivors_after_first_pass(shape: LabShape) -> list[int]:
    """Documents whose whole cacheable prefix is still on the GPU when the first pass ends."""
    cache = TieredCache(shape.gpu_blocks, shape.block_tokens, unhashed_first=shape.unhashed_first)
    reqs = requests(shape)
    first = [r for r in reqs if r.label.startswith("first:")]
    cache.replay(first)
    return sorted(int(r.label.split(":")[1]) for r in first if cache.gpu.prefix_hits(r.blocks, r.max_hit) == r.max_hit)


def second_pass_capacity_thresholds(shape: LabShape) -> tuple[int, int]:
    """Smallest GPU KV cache (tokens, as the server log counts them, in whole blocks) at which
    the second pass gets any hit, and at which every second-pass document hits its whole
    cacheable prefix. Found by bisection over direct replays: hits only grow with capacity.
    """
    B = shape.block_tokens
    want = shape.docs * full_hit_tokens(shape)

    def smallest(ok) -> int:
        lo, hi = shape.null_blocks + 1, 2 * shape.null_blocks + 1
        while not ok(hi * B):
            hi *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid * B) else (mid + 1, hi)
        return lo * B

    return smallest(lambda t: second_pass_hits_at(shape, t) > 0), smallest(lambda t: second_pass_hits_at(shape, t) >= want)


def second_pass_hits_at(shape: LabShape, cache_tokens: int) -> int:
    """Second-pass GPU hit tokens at a given cache size, by direct replay (checks the thresholds)."""
    df = replay(replace(shape, gpu_cache_tokens=cache_tokens))
    return int(df.loc[df["pass"].eq("second"), "gpu_tokens"].sum())


def cpu_sweep(shape: LabShape, chunk_tokens: int, kv_bytes_per_token: int, chunks: list[int],
              policy: str = "write_through") -> pd.DataFrame:
    """Second-pass token sources as the CPU tier shrinks (capacity in chunks and bytes)."""
    rows = []
    for c in chunks:
        df = replay(shape, cpu_chunks=c, chunk_tokens=chunk_tokens, policy=policy)
        second = df[df["pass"].eq("second") & df["doc"].ge(0)]
        rows.append({"cpu_chunks": c, "cpu_bytes": c * chunk_tokens * kv_bytes_per_token,
                     "cpu_tokens": int(second["cpu_tokens"].sum()), "computed_tokens": int(second["computed_tokens"].sum()),
                     "tokens": int(second["tokens"].sum()), "docs_loaded": int((second["cpu_tokens"] > 0).sum())})
    return pd.DataFrame(rows)



def requests_from_rows(rows: pd.DataFrame, block_tokens: int, generated: int) -> list[Request]:
    """The simulator's view of a recorded run: each request with its measured prompt length, in
    the order sent; documents keep their chains across passes, other prompts are unique."""
    out: list[Request] = []
    for k, r in enumerate(rows.to_dict("records")):
        other = r["phase"] != "doc"
        chain = document_chain(k, OTHER_NAMESPACE) if other else document_chain(int(r["doc"]))
        label = f"{r['pass']}:{r['phase'] if other else int(r['doc'])}"
        out.append(prompt_request(chain, int(r["prompt_tokens"]), block_tokens, generated=generated, label=label))
    return out


def replay_whole_documents(shape: LabShape) -> pd.DataFrame:
    """The lab's own simulator: a document is one cache entry, in or out; the GPU holds as many
    whole documents as fit. It cannot represent a document that is partly on the GPU."""
    cache = TieredCache(shape.gpu_cache_tokens // shape.doc_tokens, shape.doc_tokens)
    reqs = [Request((d,), shape.doc_tokens, max_hit=1, label=f"{p}:{d}") for p in PASS_ORDERS for d in pass_docs(p, shape.docs)]
    return outcomes_table(cache.replay(reqs))
