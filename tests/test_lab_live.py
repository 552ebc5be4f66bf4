"""The lab measured on vLLM's CPU build (raw/lab/cyclic-cpu): each request's tokens by source from the
server's counters, the usage cross-check, and the simulator's request-by-request prediction."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.lab import live

RUN = Path(__file__).resolve().parent.parent / "raw" / "lab" / "cyclic-cpu"
CHUNK = 256  # the native tier's offloaded block in this run (two 128-token server blocks)


@pytest.fixture(scope="module")
def table():
    return live.predict(RUN, live.request_sources(RUN))


def test_counters_and_usage_agree_on_every_request(table):
    assert len(table) == 3 * 31 and table.usage_agrees.all()
    assert ((table.gpu_tokens + table.cpu_tokens + table.computed_tokens) == table.prompt_tokens).all()


def test_what_the_cycle_does_by_hand(table):
    docs = table[table.phase == "doc"]
    second = docs[docs["pass"] == "second"]
    alone, native, small = (second[second.setup == s] for s in ("vllm", "native", "native-small"))
    # vLLM alone: the cycle leaves nothing for the second pass
    assert alone.gpu_tokens.sum() == 0 and alone.cpu_tokens.sum() == 0
    # a pool holding all ten documents serves every full 256-token chunk of each; the partial last one is computed
    assert (native.cpu_tokens == native.prompt_tokens // CHUNK * CHUNK).all() and native.gpu_tokens.sum() == 0
    # a pool too small is cycled through like the KV cache
    assert small.cpu_tokens.sum() == 0


def test_the_simulator_predicts_every_request(table):
    assert table.agrees.all(), table[~table.agrees][["setup", "pass", "doc", "gpu_tokens", "pred_gpu_tokens"]]


def test_server_shape_is_read_from_the_server(table):
    shape = live.server_shape(RUN / "native")
    assert shape == {"block_tokens": 128, "kv_blocks": 134, "chunk_blocks": 2, "cpu_chunks": 256}
    assert live.server_shape(RUN / "vllm")["cpu_chunks"] is None


def test_a_missing_snapshot_is_named(tmp_path):
    run = shutil.copytree(RUN, tmp_path / "run")
    (run / "native" / "metrics" / "requests" / "2_second_03.prom").unlink()
    with pytest.raises(RawRecordError, match=r"requests\.csv:\d+: metrics_after names native/metrics/requests/2_second_03"):
        live.request_sources(run)
