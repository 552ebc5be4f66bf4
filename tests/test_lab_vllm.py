"""A real CPU vLLM (vLLM alone, tiny local model): cyclic access over an overflowing KV cache.

The second pass must show zero prefix hits in vLLM's own counters and per-request usage, and
the block simulator, given the same prompt lengths, cache size and block size, must predict it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pandas as pd
import pytest

from kvtier.lab import experiments as ex
from kvtier.lab.cyclic import CyclicPlan, run
from kvtier.lab.records import block_tokens, gpu_cache_tokens, metrics_by_pass, read_requests
from kvtier.serving import ServerSpec
from kvtier.sim import TieredCache, gpu_blocks_for

REPO = Path(__file__).resolve().parent.parent
VLLM_VENV = Path(os.environ.get("KVTIER_VLLM_VENV", REPO / ".venv-vllm"))
VLLM_BIN = Path(os.environ.get("KVTIER_VLLM_BIN", VLLM_VENV / "bin" / "vllm"))
KV_CACHE_BYTES = 16 * 2**20  # 8,192 tokens of the tiny model's 2 KiB/token KV

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not VLLM_BIN.exists(), reason=f"no vLLM CLI at {VLLM_BIN} (set KVTIER_VLLM_BIN or build .venv-vllm)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cyclic") / "run"  # a new folder: the launcher refuses one that exists
    plan = CyclicPlan(docs=5, doc_words=600, max_tokens=4, setups=["vllm"])

    def spec_for(setup: str) -> ServerSpec:
        return ServerSpec(model=str(tiny_model), served_name="tiny", tier="none", port=_free_port(), vllm_bin=str(VLLM_BIN),
                          max_model_len=4096, env={"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
                          extra_args=["--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--enforce-eager", "--dtype", "bfloat16"])

    run(out, plan, spec_for, progress=False, health_timeout_s=300)
    return out


def test_second_pass_has_zero_hits_and_the_simulator_agrees(live_run: Path):
    rows = read_requests(live_run / "requests.csv")
    cache = gpu_cache_tokens(live_run / "vllm" / "server.log")
    B = block_tokens(live_run / "vllm" / "metrics")
    assert B == 128  # vLLM's block size on the CPU backend
    docs = rows[rows["phase"].eq("doc")]
    total = int(docs[docs["pass"].eq("first")]["prompt_tokens"].sum())
    assert total > cache, f"the documents ({total} tokens) must overflow the KV cache ({cache})"

    # measured: vLLM's counter and every second-pass request's cached tokens are zero
    by_pass = {m.pass_: m for m in metrics_by_pass(live_run / "vllm" / "metrics", "vllm")}
    assert by_pass["second"].prefix_hits == 0
    assert docs[docs["pass"].eq("second")]["cached_tokens"].eq(0).all()
    assert by_pass["reverse"].prefix_hits > 0  # the documents read last are still there

    # predicted: the simulator on the same prompts, cache and block size
    sim = TieredCache(gpu_blocks_for(cache, B), B)
    outcomes = sim.replay(ex.requests_from_rows(rows, B, generated=3))
    predicted = pd.Series([o.gpu_tokens for o in outcomes], index=rows.index)
    second = rows["pass"].eq("second") & rows["phase"].eq("doc")
    assert predicted[second].eq(0).all()
    reverse = rows["pass"].eq("reverse") & rows["phase"].eq("doc")
    measured_rev = rows.loc[reverse, "cached_tokens"].tolist()
    assert predicted[reverse].tolist() == measured_rev, (
        f"reverse pass, cached tokens per document: simulator {predicted[reverse].tolist()} vs vLLM {measured_rev}")
