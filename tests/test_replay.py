"""kvtier replay: traces -> token-id prompts that keep the prefix structure, and the threaded sender.

Against the in-process fake vLLM (a token is an id; 16-token blocks, LRU) and small traces written
here, so every expected value is worked out by hand.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path


from kvtier.replay.client import finished, replay
from kvtier.replay.schedule import Scaling, block_ids, kv_cache_tester, mooncake, prompt_of
from kvtier.serving.client import ServingClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from fake_vllm import FakeVllm  # noqa: E402


def write_tgz(path: Path, convs: dict[str, dict]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, conv in convs.items():
            data = json.dumps(conv).encode()
            info = tarfile.TarInfo(f"traces/{name}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def conv(*requests: dict) -> dict:
    return {"block_size": 64, "hash_id_scope": "local", "models": ["m"], "requests": list(requests)}


def req(t: float, n: int, ids: list[int], out: int = 100) -> dict:
    return {"t": t, "type": "n", "in": n, "out": out, "hash_ids": ids}


def test_equal_ids_give_equal_tokens_and_scale_shrinks_blocks():
    s = Scaling(scale=1 / 16, vocab_size=500)
    a = prompt_of("s0", [1, 2, 3], 192, 64, s)
    b = prompt_of("s0", [1, 2, 7], 160, 64, s)
    assert len(a) == 12 and len(b) == 10            # 192 / 16 and 160 / 16 tokens
    assert a[:8] == b[:8] and a[8:] != b[8:10]       # blocks 1, 2 shared (4 tokens each), then they differ
    assert prompt_of("s1", [1], 64, 64, s) != a[:4]  # ids are local to a session
    assert all(16 <= x < 500 for x in a) and block_ids("s0", 1, 4, s) == a[:4]


def test_sessions_start_apart_keep_their_times_and_subagents_get_their_own_ids(tmp_path):
    # a sub-agent on another model cannot share its parent's KV: its ids get their own namespace
    sub = {"t": 5.0, "type": "subagent", "models": ["other-model"], "requests": [req(1.0, 128, [1, 2])]}
    tgz = write_tgz(tmp_path / "t.tgz", {"a": conv(req(0.0, 128, [1, 2]), sub, req(20.0, 192, [1, 2, 3])),
                                         "b": conv(req(0.0, 64, [1]))})
    turns = kv_cache_tester(tgz, Scaling(scale=0.25, compress=2.0), sessions=2, session_gap_s=3.0)
    by = {(t.session, t.index): t for t in turns}
    # session 0: t = 0, sub-agent at 5 + 1 = 6 -> 3 s, then 20 -> 10 s; session 1 starts 3 s later
    assert [(t.session, t.at_s) for t in turns] == [(0, 0.0), (0, 3.0), (1, 3.0), (0, 10.0)]
    parent, child = by[(0, 0)].prompt, by[(0, 1)].prompt
    assert len(parent) == 32 and parent != child     # same ids, but the sub-agent's namespace
    assert by[(0, 2)].prompt[:32] == parent          # the parent's next turn extends its prefix
    assert by[(1, 0)].prompt != parent[:16]
    assert by[(0, 0)].max_tokens == 16               # 100 x 0.25 = 25, capped at 16


def test_mooncake_times_from_the_first_request(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(json.dumps({"timestamp": ts, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]})
                           for ts in (5000, 7000)) + "\n")
    turns = mooncake(p, Scaling(scale=1 / 64, compress=2.0))
    assert [t.at_s for t in turns] == [0.0, 1.0] and len(turns[0].prompt) == 16 and turns[0].prompt == turns[1].prompt


def test_replay_sends_sessions_in_order_logs_cached_tokens_and_resumes(tmp_path):
    s = Scaling(scale=0.25, vocab_size=10_000)
    tgz = write_tgz(tmp_path / "t.tgz", {"a": conv(req(0.0, 128, [1, 2]), req(0.2, 192, [1, 2, 3])),
                                         "b": conv(req(0.0, 128, [1, 2]))})
    turns = kv_cache_tester(tgz, s, sessions=2, session_gap_s=0.1)
    fake = FakeVllm(cache_tokens=640)
    log = tmp_path / "client.jsonl"
    counts = replay(turns[:2], lambda: ServingClient("http://fake", "fake", transport=fake.transport()), log,
                    max_duration_s=30, workers=2, progress=False)
    assert counts == {"sent": 2, "ok": 2, "failed": 0, "skipped": 0, "unsent": 0}
    counts = replay(turns, lambda: ServingClient("http://fake", "fake", transport=fake.transport()), log,
                    max_duration_s=30, workers=2, progress=False)
    assert counts["skipped"] == 2 and counts["ok"] == 1 and finished(log) == {(0, 0), (0, 1), (1, 0)}
    recs = {(r["session"], r["index"]): r for r in map(json.loads, log.read_text().splitlines())}
    # session 0's second turn (48 tokens) finds its first 32 tokens cached: two 16-token blocks
    assert recs[(0, 1)]["prompt_tokens_sent"] == 48 and recs[(0, 1)]["cached_tokens"] == 32
    assert recs[(1, 0)]["cached_tokens"] == 0  # another session's ids: nothing shared


def test_a_failed_turn_keeps_its_reason_and_its_session_goes_on(tmp_path):
    tgz = write_tgz(tmp_path / "t.tgz", {"a": conv(req(0.0, 64, [1]), req(0.0, 128, [1, 2]), req(0.0, 192, [1, 2, 3]))})
    turns = kv_cache_tester(tgz, Scaling(scale=0.25), sessions=1, session_gap_s=0)
    fake = FakeVllm()
    fake.refuse = {2}
    counts = replay(turns, lambda: ServingClient("http://fake", "fake", transport=fake.transport()), tmp_path / "log.jsonl",
                    max_duration_s=30, workers=1, progress=False)
    assert counts == {"sent": 3, "ok": 2, "failed": 1, "skipped": 0, "unsent": 0}
    lines = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["status"] for r in lines] == ["ok", "failed", "ok"]
    assert lines[1]["http_status"] == 400 and "maximum context length" in lines[1]["error"]
