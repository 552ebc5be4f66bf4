"""A short live capture (about a minute of public agentic traffic) from vLLM's CPU build with
its native CPU tier goes through the production pipeline: ingest, the data contract, the
client-against-counters check, every production number, and the method-against-truth check.
Needs the vLLM CPU venv (scripts/setup-vllm-cpu.sh); marked `vllm`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kvtier.numbers import NumbersWriter
from kvtier.production.correction import Correction
from kvtier.production.pipeline import analyse, ingest
from kvtier.replay.cli import main as replay_main

REPO = Path(__file__).resolve().parent.parent
VLLM = Path(os.environ.get("KVTIER_VLLM_BIN", str(REPO / ".venv-vllm" / "bin" / "vllm")))
TRACE = REPO.parent / "shared/traces/kv-cache-tester/traces_0001-0100.tgz"

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM.is_file(), reason=f"no vLLM at {VLLM} (set KVTIER_VLLM_BIN to a CPU vLLM build)"),
              pytest.mark.skipif(not TRACE.is_file(), reason=f"no public trace at {TRACE}")]


def test_a_short_live_capture_goes_through_the_production_pipeline(tmp_path, tiny_model):
    out = tmp_path / "capture"
    rc = replay_main([
        "--trace", f"kv-cache-tester:{TRACE}", "--sessions", "4", "--session-gap", "2", "--scale", "0.05",
        "--compress", "100", "--max-duration", "60", "--workers", "4", "--out", str(out), "--no-progress",
        "--model", str(tiny_model), "--served-model-name", "tiny", "--tier", "native", "--platform", "cpu",
        "--offload-gib", "0.0625", "--block-tokens", "1600", "--ram-headroom-gib", "1", "--max-model-len", "12288",
        "--port", "8094", "--vllm-bin", str(VLLM), "--health-timeout", "240",
        "--offload-extra", "kvtier_log_jobs=true",
        "--server-arg=--block-size=64", "--server-arg=--kv-cache-memory-bytes=33554432",
        "--server-arg=--dtype=bfloat16", "--server-arg=--enforce-eager"])
    assert rc == 0
    meta = yaml.safe_load((out / "host.yaml").read_text())
    assert meta["observation"]["start"] < meta["observation"]["end"]

    prod = yaml.safe_load((REPO / "config/config.yaml").read_text())["production"]
    settings = {k: v for k, v in prod.items() if k != "setups"}
    settings.update({k: v for k, v in prod["setups"]["cpu"].items() if not isinstance(v, str) or k in ("numbers_prefix", "link_name")})
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
    if jobs:
        assert n["prodcpu.method.correction_measured"] == 0
        assert len(tables["method"]) == n["prodcpu.restores.visible"]
    shares = n["prodcpu.tokens.share_gpu"] + n["prodcpu.tokens.share_pool"] + n["prodcpu.tokens.share_computed"]
    assert shares == pytest.approx(1.0)
