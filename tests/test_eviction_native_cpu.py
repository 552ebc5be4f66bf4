"""The eviction test with a real second tier: vLLM's CPU build with its native offloading, the worker
supplied by kvtier's spec. A tiny random-weight model (built locally, 2,048 KV bytes a token:
2 layers x K and V x 4 heads x 64 dims x 2 bytes), 64-token server blocks, 1,600-token offloaded
blocks, a 16 MiB KV cache (8,192 tokens) and a 256 MiB pool.

Expected by hand for a prompt of P tokens (P mod 1,600 small but not 0): the pool holds the
floor(P / 1,600) full offloaded blocks (the last partial one is never stored); after eviction the
GPU cache still has the 64-token chat preamble every conversation shares, so the restore takes
that block from GPU memory, floor(P / 1,600) x 1,600 - 64 tokens from the pool, and computes the
rest: the same tokens the hit computes, so restore and hit logprobs must be bit-identical.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvtier.eviction import analysis
from kvtier.eviction.records import REQUEST_SCHEMA, RUN_SCHEMA, RunWriter, read_run
from kvtier.eviction.runner import Harness, Plan
from kvtier.serving.client import ServingClient
from kvtier.serving.metrics import Snapshot
from kvtier.serving.server import ServerSpec, VllmServer, preflight

REPO = Path(__file__).resolve().parent.parent
VLLM = os.environ.get("KVTIER_VLLM_BIN", str(REPO / ".venv-vllm" / "bin" / "vllm"))
BLOCK, OFFLOAD_BLOCK, BYTES_PER_TOKEN = 64, 1600, 2048
TARGET = 2 * OFFLOAD_BLOCK + 20

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not Path(VLLM).is_file(), reason=f"no vLLM at {VLLM} (set KVTIER_VLLM_BIN to a CPU vLLM build)"),
]


def spec(model: Path, port: int, **extra) -> ServerSpec:
    return ServerSpec(model=str(model), served_name="tiny", tier="native", platform="cpu", offload_gib=0.25,
                      offload_block_tokens=OFFLOAD_BLOCK, port=port, vllm_bin=VLLM, max_model_len=4096, ram_headroom_gib=1,
                      extra_args=[f"--block-size={BLOCK}", f"--kv-cache-memory-bytes={16 * 2**20}", "--enforce-eager",
                                  "--dtype=bfloat16"], offload_extra=extra)


def run(s: ServerSpec, run_dir: Path, repeat: int) -> dict:
    preflight(s)
    with VllmServer(s, run_dir / "server.log") as server:
        server.wait_healthy(400)
        static = {"host": {"hostname": "ci"}, "model": {"path": s.model, "served_name": "tiny", "params": None},
                  "server": {"mode": "launched", "url": s.url, "tier": "native", "offload_gib": s.offload_gib,
                             "offload_block_tokens": OFFLOAD_BLOCK, "command": s.command(), "platform": "cpu"},
                  "versions": {}}
        client = ServingClient(s.url, "tiny", timeout_s=120)
        return Harness(client, RunWriter(run_dir), "cpu", Plan(target_tokens=TARGET, max_tokens=8, repeat=repeat),
                       static, server, progress=False).run()


@pytest.fixture(scope="module")
def native_run(tiny_model, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("native") / "run"
    run(spec(tiny_model, 8091), d, repeat=2)
    return d


def test_restores_are_served_from_the_host_tier(native_run):
    r = read_run(native_run)
    assert r.meta["status"] == "complete" and r.cycles == 2 and not r.meta["not_evicted"]
    for pid in ("restore.1", "c2:restore.1"):
        cycle = 2 if pid.startswith("c2") else 1
        p = r.conversation(cycle)["prompt_tokens"]
        full = p // OFFLOAD_BLOCK * OFFLOAD_BLOCK
        rec = r.final("restore", 1, cycle)[0]
        before, after = Snapshot.read(native_run / rec["metrics_before"]), Snapshot.read(native_run / rec["metrics_after"])
        ext = "vllm:prompt_tokens_by_source_total"
        assert after.value(ext, source="external_kv_transfer") - before.value(ext, source="external_kv_transfer") == full - BLOCK
        assert after.value(ext, source="local_cache_hit") - before.value(ext, source="local_cache_hit") == BLOCK
        assert after.value(ext, source="local_compute") - before.value(ext, source="local_compute") == p - full
        assert after.load_bytes() - before.load_bytes() == (full - BLOCK) * BYTES_PER_TOKEN
        c = r.meta["checks"][pid]
        assert c["evicted"] and c["restored_from_pool"]
        assert c["blocks_moved_exact"] == pytest.approx(c["blocks_served_exact"]) == pytest.approx((full - BLOCK) / OFFLOAD_BLOCK)


def test_bytes_per_block_from_the_log_agree_with_the_model(native_run):
    meta = read_run(native_run).meta
    assert meta["server"]["offload_block_bytes"] == {"log": OFFLOAD_BLOCK * BYTES_PER_TOKEN, "model": OFFLOAD_BLOCK * BYTES_PER_TOKEN}


def test_restored_logprobs_are_bit_identical_to_the_hit(native_run):
    meta = read_run(native_run).meta
    for pid in ("restore.1", "c2:restore.1"):
        lp = meta["checks"][pid]["logprobs"]
        assert lp["same_compute"] and lp["passed"] and lp["bit_identical"] and lp["positions"] == 8
    reqs, runs = analysis.load([native_run], RUN_SCHEMA, REQUEST_SCHEMA)
    rest = reqs[reqs.phase == "restore"]
    assert rest.logprob_passed.all() and (rest.logprob_max_diff == 0).all() and runs.iloc[0].complete


def test_a_corrupting_copy_is_caught(tiny_model, tmp_path):
    d = tmp_path / "run"
    meta = run(spec(tiny_model, 8092, kvtier_fault="zero_on_load"), d, repeat=1)
    lp = meta["checks"]["restore.1"]["logprobs"]
    assert meta["logprobs_mismatch"] == ["restore.1"] and not lp["passed"] and lp["max_abs_diff"] > 0.01
    # the restore still came from the pool: only the check of its answer can tell
    assert meta["checks"]["restore.1"]["restored_from_pool"]
    reqs, _ = analysis.load([d], RUN_SCHEMA, REQUEST_SCHEMA)
    assert not reqs[reqs.phase == "restore"].logprob_passed.iloc[0]
