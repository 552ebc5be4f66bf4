"""vLLM's own KV-cache manager as the oracle of the GPU tier: run by vLLM's Python, not kvtier's.

    .venv-vllm/bin/python tests/oracle/vllm_managers.py < requests.json > hits.json

Input: a list of jobs {"block_tokens": B, "gpu_blocks": usable blocks, "requests": [[block ids],
tokens, generated] ...}. Each request is driven through `vllm.v1.core.kv_cache_manager.KVCacheManager`
as the scheduler does at concurrency 1 (no model, no server): `get_computed_blocks`, one
`allocate_slots` for the whole prompt, one per generated token fed back (the last sampled token
never is), then `free`. Output: per job, the prompt tokens each request found cached, in order (one process for all
jobs: importing vLLM takes most of the time).

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


def replay(block_tokens: int, gpu_blocks: int, requests: list) -> list[int]:
    """Prompt tokens served from the prefix cache, per request."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    longest = max((tokens + generated + block_tokens for _, tokens, generated in requests), default=block_tokens)
    manager, hasher = _manager(gpu_blocks + 1, block_tokens, longest)  # + vLLM's null block
    dense: dict[int, int] = {}
    fresh = count(1 << 40)  # tokens of partial blocks and generated tokens, never shared
    out: list[int] = []
    for i, (blocks, tokens, generated) in enumerate(requests):
        prompt = [t for b in blocks for t in [dense.setdefault(b, len(dense) + 1)] * block_tokens][:tokens]
        prompt += [next(fresh) for _ in range(tokens - len(prompt))]
        req = Request(f"r{i}", prompt, SamplingParams(max_tokens=generated + 1), None, block_hasher=hasher)
        computed, hit_tokens, _ = manager.get_computed_blocks(req)
        if manager.allocate_slots(req, tokens - hit_tokens, hit_tokens, computed) is None:
            raise RuntimeError(f"request {i}: vLLM could not allocate {tokens} tokens in {gpu_blocks} blocks")
        req.num_computed_tokens = tokens
        for _ in range(generated):  # each sampled token but the last is fed back: one slot each
            req.append_output_token_ids(next(fresh))
            if manager.allocate_slots(req, 1) is None:
                raise RuntimeError(f"request {i}: no block for a generated token")
            req.num_computed_tokens += 1
        req.append_output_token_ids(next(fresh))
        manager.free(req)
        out.append(int(hit_tokens))
    return out


def main() -> int:
    jobs = json.load(sys.stdin)
    json.dump([replay(int(j["block_tokens"]), int(j["gpu_blocks"]), j["requests"]) for j in jobs], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
