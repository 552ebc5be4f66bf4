"""The harness against a real vLLM server on the CPU, with a tiny random-weight model.

Needs a vLLM CPU build: KVTIER_VLLM_BIN (default .venv-vllm/bin/vllm), and torch, transformers
and tokenizers next to it to build the model. The KV cache is 32 MiB = 16,384 tokens of this
model (2 KiB a token); the conversation is built to 3,000 tokens, so the harness derives
ceil((16,384 + 3,000) x 1.1 / 3,000) = 8 evictors.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kvtier.eviction.records import RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan
from kvtier.serving.client import ServingClient
from kvtier.serving.server import ServerSpec, VllmServer, preflight

REPO = Path(__file__).resolve().parent.parent
VLLM = os.environ.get("KVTIER_VLLM_BIN", str(REPO / ".venv-vllm" / "bin" / "vllm"))
KV_BYTES = 32 * 2**20

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not Path(VLLM).is_file(), reason=f"no vLLM at {VLLM} (set KVTIER_VLLM_BIN to a CPU vLLM build)"),
]


def spec(model: Path, port: int) -> ServerSpec:
    return ServerSpec(model=str(model), served_name="tiny", tier="none", port=port, vllm_bin=VLLM, max_model_len=8192,
                      extra_args=[f"--kv-cache-memory-bytes={KV_BYTES}", "--enforce-eager", "--dtype=bfloat16"],
                      env={"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"})


def static(s: ServerSpec) -> dict:
    return {"host": {"hostname": "ci"}, "model": {"path": s.model, "served_name": s.served_name, "params": None},
            "server": {"mode": "launched", "url": s.url, "tier": s.tier, "offload_block_tokens": None, "command": s.command()},
            "versions": {}}


def run_harness(s: ServerSpec, run_dir: Path, on_start=None) -> dict:
    preflight(s)
    with VllmServer(s, run_dir / "server.log") as server:
        server.wait_healthy(300)
        if on_start:
            on_start(server)
        client = ServingClient(s.url, "tiny", timeout_s=120)
        return Harness(client, RunWriter(run_dir), "cpu", Plan(target_tokens=3000, max_tokens=8, warmup_tokens=0), static(s), server,
                       progress=False).run()


def test_whole_run_on_a_real_server(tiny_model, tmp_path):
    run_dir = tmp_path / "cpu" / "run"
    meta = run_harness(spec(tiny_model, 8041), run_dir)
    run = read_run(run_dir)
    assert meta["status"] == "complete" and meta["plan"]["evictors"] == 8
    assert meta["plan"]["kv_cache_tokens"] == KV_BYTES // 2048
    cold, hit, restore = run.final("cold")[0], run.final("hit")[0], run.final("restore", 1)[0]
    # the hit is served from the prefix cache: faster than the cold read
    assert hit["first_chunk_s"] < cold["first_chunk_s"]
    chk = meta["checks"]["restore.1"]
    prompt = meta["conversation"]["prompt_tokens"]
    # eviction verified by the counters; no second tier on CPU, so the restore was recomputed
    assert chk["evicted"] and chk["gpu_hit_tokens"] == 0 and chk["pool_tokens"] == 0
    assert chk["recomputed"] and chk["computed_tokens"] == prompt
    # a random model cannot return the codes: the run is kept and marked excluded
    assert meta["excluded"] and cold["codes_found"] == [] and "0 of 3" in meta["exclusion_reason"]
    # six around the measured requests, and one after each of the eight evictors
    assert (run_dir / "server.log").stat().st_size > 0 and len(list((run_dir / "metrics").glob("*.prom"))) == 6 + 8


def test_killed_server_leaves_records_and_a_rerun_resumes(tiny_model, tmp_path):
    run_dir = tmp_path / "cpu" / "run"
    s = spec(tiny_model, 8042)

    def kill_during_evictors(server: VllmServer) -> None:
        def watch() -> None:
            jsonl = run_dir / "requests.jsonl"
            while True:
                if jsonl.exists() and '"phase": "evictors"' in jsonl.read_text():
                    os.killpg(server.proc.pid, signal.SIGKILL)
                    return
                time.sleep(0.05)
        threading.Thread(target=watch, daemon=True).start()

    with pytest.raises(HarnessFailed, match="server exited"):
        run_harness(s, run_dir, on_start=kill_during_evictors)
    run = read_run(run_dir)
    assert run.meta["status"] == "failed" and run.meta["failure"]["phase"] == "evictors.1"
    assert "server exited" in run.meta["failure"]["reason"]
    assert run.meta["phases_completed"] == ["cold", "hit"]
    assert [r["phase"] for r in run.requests][:2] == ["cold", "hit"]

    meta = run_harness(s, run_dir)  # a fresh server: the conversation is primed, then evictors and restore
    run = read_run(run_dir)
    assert meta["status"] == "complete" and meta["attempts"] == 2
    second = [r["phase"] for r in run.requests if r["attempt"] == 2]
    assert second[0] == "prime" and second[-1] == "restore" and second.count("evictors") == 8
    assert len([r for r in run.requests if r["phase"] == "cold"]) == 1
    assert meta["checks"]["restore.1"]["evicted"]
