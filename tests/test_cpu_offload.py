"""kvtier's offloading spec for vLLM's CPU build: the copy's index plan, the launcher's choices per
platform, and the logprob check — without a server. Values are worked out by hand in each test;
the `vllm` tests hold the plan and the copy worker to vLLM's own pointer enumeration and to real
torch tensors in the vLLM venv."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kvtier.eviction import logprobs as lp
from kvtier.serving import server as srv
from kvtier.serving.vllm_plugin.kvtier_cpu_offload.plan import copy_plan

REPO = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm" / "bin" / "vllm")).with_name("python")
GiB = 2**30


# ---------------------------------------------------------------- the index plan
def test_one_block_per_chunk_maps_one_to_one():
    (g,) = copy_plan([3, 7, 9], [5, 0, 11], [3], [0], 1)
    assert g.device_blocks.tolist() == [3, 7, 9]
    assert g.host_chunks.tolist() == [5, 0, 11] and g.chunk_slots.tolist() == [0, 0, 0]


def test_chunks_of_four_blocks_fill_slot_by_slot():
    # 6 device blocks from the start of a request: chunk 2 slots 0-3, then chunk 9 slots 0-1
    (g,) = copy_plan([10, 11, 12, 13, 14, 15], [2, 9], [6], [0], 4)
    assert g.host_chunks.tolist() == [2, 2, 2, 2, 9, 9] and g.chunk_slots.tolist() == [0, 1, 2, 3, 0, 1]


def test_a_load_that_starts_mid_chunk():
    # a partial GPU hit of 3 blocks: the load starts at logical block 3 = slot 3 of the first chunk
    (g,) = copy_plan([20, 21, 22, 23, 24], [6, 1], [5], [3], 4)
    assert g.host_chunks.tolist() == [6, 1, 1, 1, 1] and g.chunk_slots.tolist() == [3, 0, 1, 2, 3]
    # logical block 25 with 25 blocks a chunk (1,600-token chunks of 64-token blocks) is slot 0 of chunk 2
    (g,) = copy_plan([0, 1], [8], [2], [25], 25)
    assert g.host_chunks.tolist() == [8, 8] and g.chunk_slots.tolist() == [0, 1]


def test_several_kv_groups_each_enter_their_own_chunks():
    # group 0: 2 blocks from logical 1 (slots 1-2 of chunk 4); group 1 empty; group 2: 3 blocks from 0
    plans = copy_plan([1, 2, 5, 6, 7], [4, 8], [2, 0, 3], [1, 0, 0], 4)
    assert [p.group for p in plans] == [0, 2]
    assert plans[0].host_chunks.tolist() == [4, 4] and plans[0].chunk_slots.tolist() == [1, 2]
    assert plans[1].device_blocks.tolist() == [5, 6, 7] and plans[1].host_chunks.tolist() == [8, 8, 8]


@pytest.mark.parametrize("args, match", [
    (([1, 2, 3], [4], [3], [0], 2), "need 2 host chunks"),
    (([1, 2], [4, 5], [2], [0], 4), "2 host chunks were given, the blocks fill 1"),
    (([1, 2], [4], [3], [0], 4), "sum to 3"),
])
def test_sides_that_do_not_line_up_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        copy_plan(*args)


def test_plan_matches_a_slow_reading_of_the_layout():
    """Every (device block, chunk, slot) triple against a loop over logical positions."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        bpc, n, first = int(rng.integers(1, 9)), int(rng.integers(1, 40)), int(rng.integers(0, 60))
        skip = first % bpc
        n_chunks = math.ceil((n + skip) / bpc)
        chunks = rng.choice(1000, n_chunks, replace=False).tolist()
        (g,) = copy_plan(list(range(100, 100 + n)), chunks, [n], [first], bpc)
        expect = [(chunks[(skip + i) // bpc], (skip + i) % bpc) for i in range(n)]
        assert list(zip(g.host_chunks.tolist(), g.chunk_slots.tolist())) == expect


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM venv Python at {VLLM_PY}")
def test_copy_worker_on_real_tensors_and_vllms_pointer_plan():
    done = subprocess.run([str(VLLM_PY), str(REPO / "tests/fixtures/cpu-offload/worker_roundtrip.py"), str(srv.PLUGIN_DIR)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    page = 4096 + 2048  # bytes per device block over the two KV tensors
    assert out["pointers"], "kvtier's plan differs from vLLM's compute_sub_block_ptrs"
    assert out["bpc1"] == {"bytes_ok": True, "zeros": False, "sizes": {"1": 3 * page, "2": 3 * page}, "word": 8}
    assert out["bpc4_full"]["bytes_ok"] and out["bpc4_full"]["sizes"] == {"1": 8 * page, "2": 8 * page}
    assert out["bpc4_midchunk"]["bytes_ok"] and out["bpc4_midchunk"]["sizes"]["2"] == 5 * page
    assert out["bpc4_fault"]["zeros"] and not out["bpc4_fault"]["bytes_ok"]


# ---------------------------------------------------------------- the launcher
def cpu_spec(**kw) -> srv.ServerSpec:
    base = dict(model="/m", served_name="m", tier="native", offload_gib=0.25, platform="cpu", port=8123)
    return srv.ServerSpec(**{**base, **kw})


def test_cpu_platform_selects_kvtiers_spec_and_puts_it_on_the_path():
    spec = cpu_spec(extra_args=["--block-size=64"])
    argv = spec.command()
    extra = json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    assert extra["spec_name"] == "KvtierCPUOffloadingSpec" and extra["spec_module_path"] == "kvtier_cpu_offload.spec"
    assert extra["block_size"] == 1600 and extra["cpu_bytes_to_use"] == GiB // 4 and extra["kvtier_host_pool"] == "private"
    env = spec.environment()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(srv.PLUGIN_DIR)
    # the folder holds kvtier's two uniquely named packages and nothing importable besides them
    assert sorted(p.name for p in srv.PLUGIN_DIR.iterdir() if p.name != "__pycache__") == \
        ["README.md", "kvtier_cpu_offload", "kvtier_lmcache_cpu"]
    # on CUDA the same harness code launches the stock native offload
    cuda = srv.ServerSpec(model="/m", tier="native", offload_gib=100).command()
    assert "spec_name" not in cuda[cuda.index("--kv-transfer-config") + 1]
    assert "PYTHONPATH" not in srv.ServerSpec(model="/m", tier="native").environment() or \
        str(srv.PLUGIN_DIR) not in srv.ServerSpec(model="/m", tier="native").environment()["PYTHONPATH"]


def test_server_block_size_from_args_or_platform():
    assert cpu_spec().server_block_tokens == 128
    assert cpu_spec(extra_args=["--block-size", "64"]).server_block_tokens == 64
    assert srv.ServerSpec(model="/m").server_block_tokens is None  # CUDA: depends on the attention backend


@pytest.fixture
def host(host):
    """The shared preflight host (conftest), with the 8 MiB memlock limit of this machine."""
    host["memlock"] = 8 * 2**20
    return host


def test_preflight_names_the_block_sizes_that_work(host):
    # 1,600 is not a multiple of the CPU backend's 128 (12.5 blocks): 1,536 = 12 x 128 or 1,664 = 13 x 128
    with pytest.raises(srv.PreflightError, match=r"1,536 or 1,664 tokens.*--block-size 32 / 64 / 160 / 320"):
        srv.preflight(cpu_spec(vllm_bin=host["bin"], ram_headroom_gib=1))
    lines = srv.preflight(cpu_spec(vllm_bin=host["bin"], ram_headroom_gib=1, extra_args=["--block-size=64"]))
    assert "offloaded block 1,600 tokens = 25 server blocks of 64" in lines


def test_cpu_build_pins_nothing_so_memlock_is_not_checked(host):
    lines = srv.preflight(cpu_spec(vllm_bin=host["bin"], ram_headroom_gib=1, offload_block_tokens=1536))
    assert any("no memlock" in line for line in lines) and not any("/dev/shm" in line for line in lines)
    # CUDA pins the pool: 8 MiB is below it, a warning (vLLM serves unpinned if pinning fails, and the run then fails)
    lines = srv.preflight(srv.ServerSpec(model="/m", tier="native", offload_gib=1, vllm_bin=host["bin"], port=1, ram_headroom_gib=1))
    assert isinstance(lines[-1], srv.PreflightWarning) and "memlock limit" in lines[-1]


def test_shm_pool_on_the_cpu_build_checks_dev_shm(host):
    host["shm"] = GiB // 8  # 128 MiB free, pool 256 MiB
    with pytest.raises(srv.PreflightError, match="less than the 0.25 GiB pool file"):
        srv.preflight(cpu_spec(vllm_bin=host["bin"], ram_headroom_gib=1, offload_block_tokens=1536, host_pool="shm"))


def test_offload_block_bytes_from_the_workers_log_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("(Worker pid=1) INFO 12-01 09:51:53 [worker.py:74] kvtier_cpu_offload: bytes_per_offloaded_block=3276800 "
                   "bytes_per_device_block=131072 blocks_per_chunk=25\n")
    assert srv.offload_block_bytes_from_log(log) == 3_276_800
    assert srv.offload_block_bytes_from_log(tmp_path / "absent.log") is None


def test_kv_bytes_per_token_from_the_model_geometry(tmp_path):
    from kvtier.eviction.host import kv_bytes_per_token

    # the tiny test model: 2 layers x K and V x 4 KV heads x 64 dims x 2 bytes (bf16) = 2,048 B a token
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                                                      "num_key_value_heads": 4, "head_dim": 64, "torch_dtype": "bfloat16"}))
    assert kv_bytes_per_token(tmp_path) == 2048
    assert kv_bytes_per_token(tmp_path, "float32") == 4096
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "kv_lora_rank": 512}))
    assert kv_bytes_per_token(tmp_path) is None  # MLA: not plain attention


# ---------------------------------------------------------------- the logprob check
def toks(*vals: float, top: float = -3.0) -> list[dict]:
    return [{"token": "a", "logprob": v, "top": [["a", v], ["b", top]]} for v in vals]


def test_identical_logprobs_pass_exactly():
    v = lp.verdict(lp.compare(toks(-0.5, -0.25), toks(-0.5, -0.25)), same_compute=True, tolerance=0.05)
    assert v["passed"] and v["bit_identical"] and v["max_abs_diff"] == 0.0 and v["positions"] == 2


def test_any_difference_fails_when_both_computed_the_same_tokens():
    v = lp.verdict(lp.compare(toks(-0.5, -0.25), toks(-0.5, -0.2578125)), same_compute=True, tolerance=0.05)
    assert not v["passed"] and v["max_abs_diff"] == pytest.approx(0.0078125)
    # with a different compute split, bf16 noise of that size is allowed, a corrupted KV's 0.43 is not
    assert lp.verdict(lp.compare(toks(-0.5, -0.25), toks(-0.5, -0.2578125)), False, 0.05)["passed"]
    assert not lp.verdict(lp.compare(toks(-0.5), toks(-0.926)), False, 0.05)["passed"]


def test_changed_alternatives_or_tokens_fail():
    changed_top = [{"token": "a", "logprob": -0.5, "top": [["a", -0.5], ["c", -3.0]]}]
    assert not lp.verdict(lp.compare(changed_top, toks(-0.5)), True, 0.05)["passed"]
    other = [{"token": "z", "logprob": -0.5, "top": [["z", -0.5], ["b", -3.0]]}]
    c = lp.compare(other, toks(-0.5))
    assert not c["tokens_equal"] and c["max_abs_diff"] == math.inf
    assert lp.verdict(lp.compare([], []), True, 0.05)["passed"] is None
