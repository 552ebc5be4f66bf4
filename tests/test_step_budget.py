"""The scheduler's token budget per step read from a server log (kvtier.step_budget), the CPU
platform's default checked against vLLM's own code (the vLLM venv), the committed runs' logs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.step_budget import CPU_TOKENS_PER_WORLD, step_tokens, step_tokens_of

REPO = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_VENV", REPO / ".venv-vllm")) / "bin" / "python"


def _log(engine: str = "device_config=cpu, enable_chunked_prefill=True", args: str = "'port': 8077",
         version: str = "0.32.0", tp: int = 1, pp: int = 1, extra: str = "") -> str:
    return (f"(APIServer pid=1) INFO 12-01 12:48:54 [api_utils.py:286] non-default args: {{'model': 'm', {args}}}\n{extra}"
            f"(EngineCore pid=2) INFO 12-01 12:49:02 [core.py:133] Initializing a V1 LLM engine (v{version}) with config: "
            f"model='m', tensor_parallel_size={tp}, pipeline_parallel_size={pp}, {engine}, seed=0\n")


def test_cpu_default_times_world_size() -> None:
    assert step_tokens(_log(), "x") == CPU_TOKENS_PER_WORLD
    assert step_tokens(_log(tp=2, pp=3), "x") == 6 * CPU_TOKENS_PER_WORLD


def test_a_given_or_said_value_wins() -> None:
    assert step_tokens(_log(args="'max_num_batched_tokens': 512, 'port': 1"), "x") == 512
    said = "(EngineCore pid=2) INFO 12-01 12:49:02 [scheduler.py:308] Chunked prefill is enabled with max_num_batched_tokens=4096.\n"
    assert step_tokens(_log(extra=said), "x") == 4096
    # an earlier start's value does not carry over to a restart
    assert step_tokens(_log(args="'max_num_batched_tokens': 512") + _log(), "x") == CPU_TOKENS_PER_WORLD


def test_no_chunked_prefill_is_one_step() -> None:
    assert step_tokens(_log(engine="device_config=cpu, enable_chunked_prefill=False"), "x") is None


def test_unknown_default_is_refused_naming_the_log() -> None:
    with pytest.raises(RawRecordError, match="server.log.*--max-num-batched-tokens"):
        step_tokens(_log(engine="device_config=cuda, enable_chunked_prefill=True"), "server.log")
    with pytest.raises(RawRecordError, match="0.33.1"):
        step_tokens(_log(version="0.33.1"), "server.log")
    with pytest.raises(RawRecordError, match="not a vLLM server log"):
        step_tokens("hello\n", "server.log")
    assert step_tokens(_log(engine="device_config=cuda, enable_chunked_prefill=True",
                            args="'max_num_batched_tokens': 8192"), "x") == 8192


def test_committed_runs() -> None:
    logs = sorted(REPO.glob("raw/production/cpu-sweep/*/server.log")) + [REPO / "raw/production/cpu/server.log"]
    assert len(logs) >= 5
    assert {step_tokens_of(p) for p in logs} == {CPU_TOKENS_PER_WORLD}


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM venv at {VLLM_PY.parent.parent}")
def test_cpu_default_is_vllms_own() -> None:
    code = ("from vllm.engine.arg_utils import EngineArgs; from vllm.usage.usage_lib import UsageContext; "
            "from vllm.platforms import current_platform; assert current_platform.is_cpu(); "
            "print(*(EngineArgs.get_batch_defaults(w)[0][UsageContext.OPENAI_API_SERVER] for w in (1, 6)))")
    done = subprocess.run([str(VLLM_PY), "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(CPU_TOKENS_PER_WORLD), str(6 * CPU_TOKENS_PER_WORLD)]
