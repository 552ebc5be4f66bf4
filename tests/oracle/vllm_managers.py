"""vLLM's own managers as the oracle of the simulator: run by vLLM's Python, not kvtier's.

    .venv-vllm/bin/python tests/oracle/vllm_managers.py < requests.json > hits.json

Input: a list of jobs {"block_tokens": B, "gpu_blocks": usable blocks, "requests": [[block ids],
tokens, generated] ...}. Each request is driven through `vllm.v1.core.kv_cache_manager.KVCacheManager`
as the scheduler does at concurrency 1 (no model, no server): `get_computed_blocks`, one
`allocate_slots` for the whole prompt, one per generated token fed back (the last sampled token
never is), then `free`. A job with "cpu_chunks" and "chunk_blocks" adds vLLM's native CPU tier:
`vllm.v1.kv_offload.cpu.manager.CPUOffloadingManager` (LRU policy) called in the order the
OffloadingConnectorScheduler calls it at concurrency 1 -- lookup from the chunk holding the
first token the GPU lacks, a load only of at least a chunk's worth (prepare_load /
complete_load), prepare_store / complete_store of the prompt's full chunks from the load's
end (from chunk 0 when nothing was loaded), on_request_finished. The stores: one for the whole
prompt, or with "step_tokens" per scheduler step of chunked prefill (see `replay`). The call sequence is
transcribed from the scheduler (vllm/distributed/kv_transfer/kv_connector/v1/offloading/
scheduler.py); the ordering, eviction and admission are the manager's own code.
Output: per job, per request [prompt tokens found on the GPU, tokens loaded from the CPU
tier] (one process for all jobs: importing vLLM takes most of the time).

Token ids stand for block ids: every token of a full block is that block's id mapped densely,
so equal prefix-chained ids give equal vLLM hashes; partial blocks and generated tokens get
tokens of their own. Imports only vLLM and the standard library (it runs in vLLM's venv).
"""

from __future__ import annotations

import json
import sys
from itertools import count


def _manager(num_blocks: int, block_tokens: int, max_model_len: int):
    import torch
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    init_none_hash(sha256)
    spec = FullAttentionSpec(block_size=block_tokens, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    manager = KVCacheManager(config, max_model_len=max_model_len, scheduler_block_size=block_tokens,
                             hash_block_size=block_tokens, enable_caching=True)
    return manager, get_request_block_hasher(block_tokens, sha256)


def replay(block_tokens: int, gpu_blocks: int, requests: list, cpu_chunks: int | None = None,
           chunk_blocks: int = 1, step_tokens: int | None = None) -> list[list[int]]:
    """[GPU hit tokens, CPU-loaded tokens] per request.

    With `step_tokens` the prefill runs in steps of at most that many tokens, as vLLM's scheduler
    with chunked prefill runs a request alone: one `allocate_slots` per step, and per step the
    connector's `_build_store_jobs` -- a `prepare_store` of the chunks the step completes, from the
    first one not yet offered (a failed offer, None, is offered again with the next step's) -- while
    the store job of the step before is copied during this step and completed at its end
    (`update_connector_output`: `complete_store`). A load takes a step of its own (the request waits
    for its KV) and completes at that step's end. The first decode step completes the last prefill
    step's store; at the end, a last `prepare_store` of what is left, then `on_request_finished`."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.request import Request

    longest = max((tokens + generated + block_tokens for _, tokens, generated in requests), default=block_tokens)
    manager, hasher = _manager(gpu_blocks + 1, block_tokens, longest)  # + vLLM's null block
    cpu = None if cpu_chunks is None else CPUOffloadingManager(cpu_chunks, cache_policy="lru")
    k, tpc = chunk_blocks, chunk_blocks * block_tokens
    dense: dict[int, int] = {}
    fresh = count(1 << 40)  # tokens of partial blocks and generated tokens, never shared
    out: list[list[int]] = []
    for i, (blocks, tokens, generated) in enumerate(requests):
        prompt = [t for b in blocks for t in [dense.setdefault(b, len(dense) + 1)] * block_tokens][:tokens]
        prompt += [next(fresh) for _ in range(tokens - len(prompt))]
        req = Request(f"r{i}", prompt, SamplingParams(max_tokens=generated + 1), None, block_hasher=hasher)
        computed, hit_tokens, _ = manager.get_computed_blocks(req)
        external = 0
        keys: list = []
        nxt = 0
        if cpu is not None:
            ctx = ReqContext(req_id=req.request_id)
            cpu.on_new_request(ctx)
            m = len(blocks) // k  # full chunks of the prompt's hashed blocks
            keys = [make_offload_key(req.block_hashes[(j + 1) * k - 1], 0) for j in range(m)]
            for j, key in enumerate(keys):
                ctx.set_offload_key_position(key, (j + 1) * tpc)
            start, c = hit_tokens // tpc, 0
            while start + c < m and cpu.lookup(keys[start + c], ctx) is LookupResult.HIT:
                c += 1
            if c and (start + c) * tpc - hit_tokens >= tpc:
                external = (start + c) * tpc - hit_tokens
                cpu.prepare_load(keys[start:start + c], ctx)
                cpu.complete_load(keys[start:start + c], ctx)
                nxt = start + c  # CHUNK_LEVEL: next_stored_chunk_idx = the loaded chunks' end
        if step_tokens is None:
            steps = [tokens - hit_tokens]
        else:
            done = min(hit_tokens + external, tokens - 1)  # a load reaching the end leaves a token to compute
            steps = [min(step_tokens, tokens - t) for t in range(done, tokens, step_tokens)]
            steps[0] += done - hit_tokens  # the first allocation covers the loaded tokens too
        in_flight: list = []
        for s, n_new in enumerate(steps):
            if s == 0:
                ok = manager.allocate_slots(req, n_new, hit_tokens, computed)
            else:
                ok = manager.allocate_slots(req, n_new)
            if ok is None:
                raise RuntimeError(f"request {i}: vLLM could not allocate {tokens} tokens in {gpu_blocks} blocks")
            req.num_computed_tokens += n_new if s else n_new + hit_tokens
            if cpu is not None:
                after = min(min(req.num_computed_tokens, tokens) // tpc, len(keys))
                job = []
                if step_tokens is None:  # the older model: one offer of every chunk at the start
                    after = len(keys)
                if after > nxt:
                    stored = cpu.prepare_store(keys[nxt:after], ctx)
                    if stored is not None:
                        nxt, job = after, list(stored.keys_to_store)
                if in_flight:  # the previous step's store, copied during this step
                    cpu.complete_store(in_flight, ctx)
                in_flight = job
        assert req.num_computed_tokens == tokens, (i, req.num_computed_tokens, tokens)
        for _ in range(generated):  # each sampled token but the last is fed back: one slot each
            req.append_output_token_ids(next(fresh))
            if manager.allocate_slots(req, 1) is None:
                raise RuntimeError(f"request {i}: no block for a generated token")
            req.num_computed_tokens += 1
            if cpu is not None and in_flight:
                cpu.complete_store(in_flight, ctx)
                in_flight = []
        req.append_output_token_ids(next(fresh))
        manager.free(req)
        if cpu is not None:
            if in_flight:
                cpu.complete_store(in_flight, ctx)
            if nxt < len(keys) and step_tokens is not None:  # the end's offer: what failed offers left
                stored = cpu.prepare_store(keys[nxt:], ctx)
                if stored is not None and stored.keys_to_store:
                    cpu.complete_store(stored.keys_to_store, ctx)
            cpu.on_request_finished(ctx)
        out.append([int(hit_tokens), int(external)])
    return out


def main() -> int:
    jobs = json.load(sys.stdin)
    json.dump([replay(int(j["block_tokens"]), int(j["gpu_blocks"]), j["requests"], j.get("cpu_chunks"),
                      int(j.get("chunk_blocks", 1)), j.get("step_tokens")) for j in jobs], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
