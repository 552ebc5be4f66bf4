"""A /metrics snapshot and a server log captured from a real CPU vLLM (tests/fixtures/vllm-cpu,
class measured) parse without error and satisfy the contract checks that apply to them."""
from pathlib import Path

from kvtier.production import analysis as A
from kvtier.production import contract
from kvtier.production.promtext import read_prometheus
from kvtier.production.logreader import read_server_log

FIX = Path(__file__).resolve().parent / "fixtures/vllm-cpu"


def test_real_metrics_parse_and_hold_their_invariants():
    snap = read_prometheus(FIX / "metrics.prom")
    contract.check_sources(snap)  # by-source counters add up to prompt_tokens_total
    contract.check_units(snap)
    for fam in ("vllm:request_prompt_tokens", "vllm:time_to_first_token_seconds", "vllm:request_prefill_kv_computed_tokens"):
        contract.check_histogram(snap, fam)
    # capture.py sent six prompts of 1,000 words = 2,000 tokens each; the first prompt came back
    # twice, and each time its 15 full 128-token blocks (1,920 tokens) were hits.
    s = A.token_sources(snap)
    assert (s["prompt"], s["gpu"], s["pool"]) == (12_000, 2 * 1_920, 0)
    r = A.request_stats(snap, (1000, 2000))
    assert (r["requests"], r["mean_prompt"], r["share_above_low"], r["share_above_high"]) == (6, 2000, 1.0, 0.0)


def test_real_log_parses():
    log = read_server_log(FIX / "server.log", 2026)
    assert len(log.segments) == 1 and log.facts()["kv_cache_tokens"] == 8_192
    assert set(log.stats["device"]) == {"CPU"} and len(log.stats) >= 1
    assert log.key_generation == "none"  # no KV connector on the CPU backend
    contract.check_log(log)
