"""The harness's phases, failure records and resume, against an in-process fake vLLM.

Sizes by hand: a token is a word, the fake's cache holds 640 tokens (40 blocks of 16), the
conversation is built to 200 tokens, so the derived number of evictors is
ceil((640 + 200) x 1.1 / 200) = ceil(4.62) = 5.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvtier.eviction.records import RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan, derive_evictors
from kvtier.serving.client import ServingClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from fake_vllm import FakeVllm  # noqa: E402

STATIC = {"host": {"hostname": "test"}, "model": {"path": "fake", "served_name": "fake", "params": None},
          "server": {"mode": "attached", "url": "http://fake", "tier": "none", "offload_block_tokens": None},
          "versions": {"python": "3"}}


def harness(fake: FakeVllm, run_dir: Path, **plan) -> Harness:
    """No warm-up request unless a test asks for one, so request counts below are the test's own."""
    client = ServingClient("http://fake", transport=fake.transport())
    return Harness(client, RunWriter(run_dir), "test", Plan(target_tokens=200, **{"warmup_tokens": 0, **plan}), STATIC,
                   progress=False)


def test_derived_evictors_by_hand():
    assert derive_evictors(640, 200, 0.1) == 5
    assert derive_evictors(12288, 3000, 0.1) == 6  # (12,288 + 3,000) x 1.1 / 3,000 = 5.61


def test_complete_run(tmp_path):
    fake = FakeVllm(answer="")
    meta = harness(fake, tmp_path / "r").run()
    run = read_run(tmp_path / "r")
    assert meta["status"] == "complete"
    assert meta["plan"]["evictors"] == 5 and meta["plan"]["evictors_from"] == "derived"
    assert [r["phase"] for r in run.requests] == ["cold", "hit"] + ["evictors"] * 5 + ["restore"]
    cold, hit = run.final("cold")[0], run.final("hit")[0]
    prompt = meta["conversation"]["prompt_tokens"]
    assert abs(prompt - 200) <= 1
    # the hit finds every full block but the last token's: ((prompt - 1) // 16) * 16 tokens
    chk = meta["checks"]["restore.1"]
    assert chk["gpu_hit_tokens"] == 0 and chk["computed_tokens"] == prompt and chk["evicted"]
    assert meta["excluded"] and "0 of 3" in meta["exclusion_reason"]
    assert cold["metrics_before"] and (tmp_path / "r" / hit["metrics_after"]).exists()


def test_codes_returned_means_not_excluded(tmp_path):
    fake = FakeVllm()
    h = harness(fake, tmp_path / "r", seed=5)
    from kvtier.eviction import conversation as conv

    fake.answer = " ".join(conv.make_codes(__import__("random").Random(5)))
    meta = h.run()
    assert meta["excluded"] is False


def test_too_few_evictors_is_flagged_not_evicted(tmp_path):
    meta = harness(FakeVllm(), tmp_path / "r", evictors=1).run()
    assert meta["not_evicted"] is True
    assert meta["checks"]["restore.1"]["gpu_hit_tokens"] > 0


@pytest.mark.parametrize("how, reason", [("503", "HTTP 503"), ("drop", "connection lost"), ("timeout", "timed out")])
def test_failure_is_recorded_and_a_rerun_resumes(tmp_path, how, reason):
    fake = FakeVllm()
    fake.fail_at, fake.fail_how = 4, how  # cold, hit, evictor 0 succeed; evictor 1 fails
    with pytest.raises(HarnessFailed, match=reason):
        harness(fake, tmp_path / "r").run()
    run = read_run(tmp_path / "r")
    assert run.meta["status"] == "failed"
    assert run.meta["failure"]["phase"] == "evictors.1" and reason in run.meta["failure"]["reason"]
    assert run.meta["phases_completed"] == ["cold", "hit"]
    assert [r["status"] for r in run.requests] == ["ok", "ok", "ok", "failed"]

    fake.fail_at = None  # same server, back up: resume after the last completed phase
    meta = harness(fake, tmp_path / "r").run()
    run = read_run(tmp_path / "r")
    assert meta["status"] == "complete" and meta["attempts"] == 2
    assert [r["phase"] for r in run.requests if r["attempt"] == 2] == ["evictors"] * 5 + ["restore"]
    assert len(run.final("evictors", 1)) == 5 and len([r for r in run.requests if r["phase"] == "cold"]) == 1


def test_restarted_server_is_primed_before_resuming(tmp_path):
    fake = FakeVllm()
    fake.fail_at, fake.fail_how = 8, "503"  # fails at the restore request
    with pytest.raises(HarnessFailed):
        harness(fake, tmp_path / "r").run()
    fresh = FakeVllm(created=2.0e9)  # a new server process: empty cache, new counter stamps
    meta = harness(fresh, tmp_path / "r").run()
    run = read_run(tmp_path / "r")
    second = [r["phase"] for r in run.requests if r["attempt"] == 2]
    assert second == ["prime"] + ["evictors"] * 5 + ["restore"]
    assert meta["status"] == "complete" and meta["checks"]["restore.1"]["evicted"]


def test_ctrl_c_is_recorded(tmp_path):
    fake = FakeVllm()
    fake.fail_at, fake.fail_how = 2, "interrupt"
    with pytest.raises(KeyboardInterrupt):
        harness(fake, tmp_path / "r").run()
    meta = read_run(tmp_path / "r").meta
    assert meta["status"] == "failed" and "Ctrl-C" in meta["failure"]["reason"] and meta["failure"]["phase"] == "hit"


def test_a_complete_run_is_not_overwritten(tmp_path):
    harness(FakeVllm(), tmp_path / "r").run()
    with pytest.raises(HarnessFailed, match="already complete"):
        harness(FakeVllm(), tmp_path / "r").run()


def test_warmup_comes_first_on_an_unrelated_prefix(tmp_path):
    meta = harness(FakeVllm(), tmp_path / "r", warmup_tokens=None).run()
    run = read_run(tmp_path / "r")
    assert [r["phase"] for r in run.requests][:2] == ["warmup", "cold"]
    warm, cold = run.requests[0], run.requests[1]
    assert warm["conversation_seed"] != cold["conversation_seed"] and abs(warm["prompt_tokens_expected"] - 200) <= 1
    assert warm["metrics_before"] is None  # not measured
    # the warm-up shares no block with the conversation: the cold read finds nothing cached
    assert meta["checks"]["restore.1"]["evicted"]


def test_repeat_runs_fresh_conversations_per_cycle(tmp_path):
    meta = harness(FakeVllm(), tmp_path / "r", repeat=3).run()
    run = read_run(tmp_path / "r")
    assert meta["status"] == "complete" and run.cycles == 3
    assert meta["phases_completed"][-4:] == ["c3:cold", "c3:hit", "c3:evictors.1", "c3:restore.1"]
    assert len({c["digest"] for c in meta["conversations"]}) == 3
    assert set(meta["checks"]) == {"cold", "restore.1", "c2:cold", "c2:restore.1", "c3:cold", "c3:restore.1"}
    assert all(meta["checks"][p]["verified_cold"] for p in ("cold", "c2:cold", "c3:cold"))
    for cycle in (1, 2, 3):
        cold = run.final("cold", 0, cycle)[0]
        assert cold["conversation_seed"] == run.conversation(cycle)["seed"]
    # evictors are scraped one by one: the /metrics series through the eviction
    ev = run.final("evictors", 1, 2)
    assert len(ev) == 5 and all(r["metrics_after"] and (tmp_path / "r" / r["metrics_after"]).exists() for r in ev)


def test_show_on_a_run_that_died_at_server_start(tmp_path, capsys):
    from kvtier.harness import main

    h = harness(FakeVllm(), tmp_path / "r")
    h.fail_before_start("server start", "vllm serve exited with code 1; see server.log")
    assert main(["show", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "failed in server start" in out and "no plan" in out
