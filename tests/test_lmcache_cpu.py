"""LMCache 0.5.6 on vLLM's CPU build through kvtier's connector (vllm_plugin/kvtier_lmcache_cpu).

Without a server: what the launcher selects for tier `lmcache` per platform, the pool size it
hands LMCache, and which logs are a failed start. In the vLLM venv (marker `vllm`): the
gather/scatter held to vLLM's own CPU attention code (its cache writer and its attention kernel,
whole and partial blocks), and a real server on the tiny model: a prompt evicted from the KV
cache comes back from LMCache, and its logprobs equal those of a KV-cache hit.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvtier.serving import server as srv
from kvtier.serving.vllm_plugin import kvtier_lmcache_cpu as plugin

REPO = Path(__file__).resolve().parent.parent
VLLM = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm" / "bin" / "vllm"))
VLLM_PY = VLLM.with_name("python")
needs_vllm = pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM venv Python at {VLLM_PY}")


def lm_spec(**kw) -> srv.ServerSpec:
    base = dict(model="/m", served_name="m", tier="lmcache", offload_gib=0.125, platform="cpu", port=8124)
    return srv.ServerSpec(**{**base, **kw})


# ---------------------------------------------------------------- the launcher
def test_cpu_platform_selects_kvtiers_lmcache_connector():
    argv = lm_spec().command()
    cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert cfg == {"kv_connector": plugin.CONNECTOR_NAME, "kv_connector_module_path": plugin.CONNECTOR_MODULE,
                   "kv_role": "kv_both"}
    env = lm_spec().environment()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(srv.PLUGIN_DIR)
    assert env["PYTHONHASHSEED"] == "0" and env["LMCACHE_LOCAL_CPU"] == "True" and env["LMCACHE_CHUNK_SIZE"] == "256"
    assert srv.LMCACHE_CPU_READY == plugin.READY_LINE
    # CUDA keeps vLLM's registered LMCache connector, without kvtier's folder on the path
    cuda = srv.ServerSpec(model="/m", tier="lmcache", offload_gib=5)
    assert json.loads(cuda.command()[cuda.command().index("--kv-transfer-config") + 1]) == \
        {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert str(srv.PLUGIN_DIR) not in cuda.environment().get("PYTHONPATH", "")


def test_plugin_folder_holds_only_the_two_packages():
    names = sorted(p.name for p in srv.PLUGIN_DIR.iterdir() if p.name != "__pycache__")
    assert names == ["README.md", "kvtier_cpu_offload", "kvtier_lmcache_cpu"]


@pytest.mark.parametrize("gib, text", [(0.125, "0.125"), (0.03125, "0.03125"), (1.5, "1.5"), (5, "5.0"), (0.1, "0.1")])
def test_pool_size_reaches_lmcache_unrounded(gib, text):
    # LMCache multiplies the value by 1024**3: 0.125 GiB must not become "0.1" (0.1 GiB) or 0.03125 "0.0" (no pool)
    assert lm_spec(offload_gib=gib).environment()["LMCACHE_MAX_LOCAL_CPU_SIZE"] == text
    assert float(text) * 2**30 == gib * 2**30
    with pytest.raises(ValueError, match="above 0"):
        srv.lmcache_gib(0)


DEGRADED = [
    "[2026-12-01 10:02:11,402] LMCache ERROR: Failed to initialize LMCacheManager components: No supported cpu "
    "connector found.. Running in degraded mode (manager.py:108:lmcache.v1.manager)",
    "RuntimeError: No supported cpu connector found.",
    "[2026-12-01 10:02:12,001] LMCache WARNING: Skipping post_init due to previous initialization failure",
]


@pytest.mark.parametrize("line", DEGRADED)
def test_a_degraded_lmcache_is_a_failed_start(line):
    ready = f"LMCache INFO: {plugin.READY_LINE} (lmcache 0.5.6, 2 layers)\n"
    fault = srv.lmcache_start_fault(ready + "INFO: Application startup complete.\n" + line + "\n", cpu=True)
    assert fault and "degraded" in fault and line.strip()[:40] in fault
    assert srv.lmcache_start_fault(ready, cpu=True) is None


def test_without_the_ready_line_the_connector_was_not_installed():
    assert "never logged" in srv.lmcache_start_fault("INFO: Application startup complete.\n", cpu=True)
    assert srv.lmcache_start_fault("INFO: Application startup complete.\n", cpu=False) is None  # CUDA: no such line


def test_a_healthy_server_with_a_degraded_log_raises(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(DEGRADED[2] + "\n")
    server = srv.VllmServer(lm_spec(), log)
    with pytest.raises(srv.DegradedStart, match="Skipping post_init"):
        server.check_tier()
    srv.VllmServer(lm_spec(tier="none"), log).check_tier()  # only LMCache servers are held to it


# ---------------------------------------------------------------- vLLM's own code as the oracle
@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("n", [128, 32])
def test_gather_scatter_match_vllms_cpu_attention(n, oracle):
    for kind in ("whole_blocks", "partial_blocks"):
        assert oracle[f"{kind}_{n}"] == {"gather_equals_vllm": True, "scatter_equals_vllm": True,
                                         "rows_layout_differs": True, "last_dim_split_differs": True}, kind
    assert oracle[f"attention_{n}"] == {"kernel_reads_ours_as_vllms": True, "kernel_reads_ours_as_direct": True}
    assert all(oracle[f"connector_{n}"].values()), oracle[f"connector_{n}"]


@pytest.mark.vllm
@needs_vllm
def test_lmcaches_factory_returns_the_cpu_connector(oracle):
    assert oracle["factory"] == {"factory_returns_cpu_connector": True, "shape": True, "layerwise_refused": True}


@pytest.fixture(scope="module")
def oracle() -> dict:
    done = subprocess.run([str(VLLM_PY), str(REPO / "tests/fixtures/lmcache-cpu/layout_oracle.py"), str(srv.PLUGIN_DIR)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- a real server
BLOCK = 256          # = LMCache's chunk: a KV-cache hit then recomputes exactly the tokens a reload does
KV_BYTES = 16 * 2**20  # 8,192 tokens of the tiny model (2,048 bytes a token): five other documents evict one


@pytest.fixture(scope="module")
def evicted_and_reloaded(tiny_model, tmp_path_factory) -> dict:
    """Document 0, then again (a KV-cache hit), then five others until it is evicted, then again:
    per request the counters' change and the logprobs; the server log."""
    from kvtier.lab.cyclic import CyclicPlan, documents
    from kvtier.serving.client import ServingClient
    from kvtier.serving.metrics import Snapshot

    if not VLLM.is_file():
        pytest.skip(f"no vLLM at {VLLM}")
    spec = srv.ServerSpec(model=str(tiny_model), served_name="tiny", tier="lmcache", platform="cpu", offload_gib=0.125,
                          port=8096, vllm_bin=str(VLLM), max_model_len=4096, ram_headroom_gib=1,
                          extra_args=[f"--block-size={BLOCK}", f"--kv-cache-memory-bytes={KV_BYTES}", "--enforce-eager",
                                      "--dtype=bfloat16"])
    docs = documents(CyclicPlan(docs=6, doc_words=500))
    log = tmp_path_factory.mktemp("lmcache") / "server.log"
    srv.preflight(spec)
    out: dict = {"requests": {}}
    with srv.VllmServer(spec, log) as server:
        server.wait_healthy(400)
        with ServingClient(spec.url, "tiny", timeout_s=120) as client:
            before = Snapshot.parse(client.metrics_text()).tokens_by_source()
            for label, d in [("first", 0), ("hit", 0)] + [(f"other{i}", i) for i in range(1, 6)] + [("reload", 0)]:
                r = client.stream_completion(docs[d], 8, ignore_eos=True, logprobs=5)
                after = Snapshot.parse(client.metrics_text()).tokens_by_source()
                out["requests"][label] = {"prompt_tokens": r.usage["prompt_tokens"], "logprobs": r.logprobs,
                                          "delta": {k: after[k] - before[k] for k in after}}
                before = after
    out["log"] = log.read_text(encoding="utf-8", errors="replace")
    return out


@pytest.mark.vllm
def test_an_evicted_prompt_comes_back_from_lmcache(evicted_and_reloaded):
    req = evicted_and_reloaded["requests"]
    p = req["first"]["prompt_tokens"]
    assert p % BLOCK, "the test needs a prompt that ends inside a block"
    stored = p // BLOCK * BLOCK   # LMCache keeps whole 256-token chunks only (save_unfull_chunk off)
    assert req["hit"]["delta"] == {"local_cache_hit": stored, "external_kv_transfer": 0, "local_compute": p - stored}
    assert req["reload"]["delta"] == {"local_cache_hit": 0, "external_kv_transfer": stored, "local_compute": p - stored}
    assert f"Retrieved {stored} out of {stored}" in evicted_and_reloaded["log"]
    assert plugin.READY_LINE in evicted_and_reloaded["log"] and "layout from vLLM's" in evicted_and_reloaded["log"]


@pytest.mark.vllm
def test_reloaded_logprobs_equal_the_hits(evicted_and_reloaded):
    from kvtier.eviction import logprobs as lp

    req = evicted_and_reloaded["requests"]
    # hit and reload compute the same last p - stored tokens over the same KV: bit for bit
    v = lp.verdict(lp.compare(req["reload"]["logprobs"], req["hit"]["logprobs"]), same_compute=True, tolerance=0.0)
    assert v["passed"] and v["bit_identical"] and v["positions"] == 8
