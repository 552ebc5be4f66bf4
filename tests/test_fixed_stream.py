"""The fixed stream (kvtier replay --fixed-order), the run series, the repeats driver, and a run
that survives a failed request. Against the in-process fake vLLM and small traces written here."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from kvtier.replay import monitor, repeats
from kvtier.replay.client import replay_fixed
from kvtier.replay.schedule import Scaling, Turn, fixed_order, kv_cache_tester, limit_prompts, stream_digest
from kvtier.serving.client import ServingClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
sys.path.insert(0, str(Path(__file__).parent))
from fake_vllm import FakeVllm  # noqa: E402
from test_replay import conv, req, write_tgz  # noqa: E402


def _trace(tmp_path: Path) -> Path:
    return write_tgz(tmp_path / "t.tgz", {
        "a": conv(req(0.0, 64, [1]), req(2.0, 128, [1, 2]), req(5.0, 192, [1, 2, 3])),
        "b": conv(req(1.0, 64, [7]), req(3.0, 128, [7, 8])),
        "c": conv(req(0.5, 64, [9]))})


def test_the_fixed_order_is_trace_arrival_and_its_digest_names_tokens_and_answer_lengths(tmp_path):
    turns = fixed_order(kv_cache_tester(_trace(tmp_path), Scaling(scale=0.25), sessions=3, session_gap_s=0))
    assert [(t.session, t.index) for t in turns] == [(0, 0), (2, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    assert [(t.session, t.index) for t in fixed_order(turns, 3)] == [(0, 0), (2, 0), (1, 0)]
    d = stream_digest(turns)
    assert d == stream_digest(list(turns)) and len(d) == 64
    t0 = turns[0]
    assert stream_digest([Turn(t0.session, t0.index, t0.at_s, t0.prompt, t0.max_tokens + 1, t0.trace_tokens), *turns[1:]]) != d
    assert stream_digest(turns[::-1]) != d  # the order is part of the stream


def test_sessions_are_chosen_by_name_or_from_a_folder(tmp_path):
    tgz = _trace(tmp_path)
    picked = kv_cache_tester(tgz, Scaling(scale=0.25), sessions=0, session_gap_s=0, members=["c", "a.json"])
    assert sorted({len(t.prompt) for t in picked if t.session == 0}) == [16]  # c first: one turn
    assert sum(1 for t in picked if t.session == 1) == 3  # then a: three turns
    folder = tmp_path / "convs"
    folder.mkdir()
    import tarfile
    with tarfile.open(tgz) as tar:
        for m in tar.getmembers():
            (folder / Path(m.name).name).write_bytes(tar.extractfile(m).read())
    from_dir = kv_cache_tester(folder, Scaling(scale=0.25), sessions=3, session_gap_s=0)
    from_tgz = kv_cache_tester(tgz, Scaling(scale=0.25), sessions=3, session_gap_s=0)
    assert stream_digest(fixed_order(from_dir)) == stream_digest(fixed_order(from_tgz))
    from kvtier.errors import RawRecordError
    with pytest.raises(RawRecordError, match="no conversation zz.json"):
        kv_cache_tester(tgz, Scaling(), sessions=0, session_gap_s=0, members=["zz"])


def test_prompts_over_the_limit_are_truncated_sent_or_refused():
    turns = [Turn(0, 0, 0.0, list(range(100)), 8, 100), Turn(0, 1, 1.0, list(range(20)), 8, 20)]
    cut, over = limit_prompts(turns, 64, "truncate")
    assert over == 1 and len(cut[0].prompt) == 56 and cut[0].prompt == turns[0].prompt[:56] and cut[1] == turns[1]
    assert limit_prompts(turns, 64, "send") == (turns, 1)
    with pytest.raises(ValueError, match="1 prompts exceed the limit of 64"):
        limit_prompts(turns, 64, "refuse")


class _Slow(FakeVllm):
    """The fake server, answering after a delay, recording the order it received and how many were in flight."""

    def __init__(self, delay_s: float):
        super().__init__(cache_tokens=4096)
        self.delay_s, self.order, self.now, self.most, self.lock = delay_s, [], 0, 0, threading.Lock()

    def handle(self, request):
        if request.url.path != "/v1/completions":
            return super().handle(request)
        with self.lock:
            self.order.append(json.loads(request.content)["prompt"][:1])
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.delay_s)
        with self.lock:
            self.now -= 1
            return super().handle(request)


@pytest.mark.parametrize("in_flight", [1, 3])
def test_the_server_receives_the_same_stream_at_any_speed(tmp_path, in_flight):
    turns = fixed_order(kv_cache_tester(_trace(tmp_path), Scaling(scale=0.25), sessions=3, session_gap_s=0))
    seen = []
    for k, delay in enumerate((0.0, 0.02)):
        fake = _Slow(delay)
        counts = replay_fixed(turns, lambda: ServingClient("http://fake", "fake", transport=fake.transport()),
                              tmp_path / f"log{k}.jsonl", in_flight=in_flight, progress=False)
        assert counts["sent"] == counts["ok"] == len(turns)
        lines = [json.loads(l) for l in (tmp_path / f"log{k}.jsonl").read_text().splitlines()]
        assert sorted(r["order"] for r in lines) == list(range(len(turns)))
        assert fake.most <= in_flight
        if in_flight == 1:
            seen.append(fake.order)
            assert [r["order"] for r in lines] == list(range(len(turns)))  # one at a time: finished in order
        by = {r["order"]: r for r in lines}
        for i, t in enumerate(turns):  # a session's next turn is sent only after its answer
            later = [j for j, u in enumerate(turns) if u.session == t.session and j > i]
            if later:
                nxt = by[later[0]]
                assert nxt["sent_s"] >= by[i]["sent_s"] + by[i]["total_s"] - 1e-3
    if seen:
        assert seen[0] == seen[1] == [t.prompt[:1] for t in turns]
    with pytest.raises(FileExistsError):
        replay_fixed(turns, lambda: None, tmp_path / "log0.jsonl")  # type: ignore[arg-type,return-value]


def test_a_refused_request_is_a_failed_line_and_the_stream_goes_on(tmp_path):
    turns = fixed_order(kv_cache_tester(_trace(tmp_path), Scaling(scale=0.25), sessions=3, session_gap_s=0))
    fake = FakeVllm()
    fake.refuse = {2}
    counts = replay_fixed(turns, lambda: ServingClient("http://fake", "fake", transport=fake.transport()),
                          tmp_path / "log.jsonl", progress=False)
    assert counts == {"sent": 6, "ok": 5, "failed": 1, "skipped": 0, "unsent": 0}
    lines = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    bad = [r for r in lines if r["status"] == "failed"]
    assert len(bad) == 1 and bad[0]["order"] == 1 and bad[0]["http_status"] == 400 and "maximum context length" in bad[0]["error"]


def test_cpu_shares_and_load_come_from_proc(tmp_path):
    # user nice system idle iowait irq softirq steal: 100 jiffies, 50 idle+iowait, 10 steal
    assert monitor.cpu_shares([0] * 8, [20, 0, 10, 40, 10, 5, 5, 10]) == (0.5, 0.1)
    (tmp_path / "loadavg").write_text("3.50 2.25 1.00 3/120 999\n")
    (tmp_path / "stat").write_text("cpu  1 0 1 10 0 0 0 0 0 0\ncpu0 1 0 1 10 0 0 0 0 0 0\n")
    s = monitor.HostSeries(tmp_path, interval_s=0.01, proc=tmp_path).start()
    time.sleep(0.05)
    summary = s.stop()
    assert summary["samples"] >= 2 and summary["load1_mean"] == 3.5
    rows = (tmp_path / monitor.HOST_SERIES).read_text().splitlines()
    assert rows[0] == ",".join(monitor.HOST_FIELDS) and rows[1].split(",")[1:4] == ["3.5", "2.25", "1.0"]


def test_the_metrics_series_keeps_the_cache_families():
    text = ('# TYPE vllm:prompt_tokens_by_source counter\n'
            'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 12.0\n'
            '# TYPE vllm:other counter\nvllm:other_total 3.0\n'
            '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 1.0\n')
    assert monitor.series_rows(text, 1.5) == [(1.5, "vllm:prompt_tokens_by_source_total", "source=local_compute", 12.0),
                                               (1.5, "vllm:num_requests_running", "", 1.0)]


def test_repeats_interleave_and_refuse_an_existing_folder(tmp_path):
    launches = repeats.plan(tmp_path, [0, 0.5], 2)
    assert [f.name for f, _ in launches] == ["r1-pool-0", "r1-pool-0.5", "r2-pool-0", "r2-pool-0.5"]
    cmd = repeats.launch_command("py", "/tmp/x.lock", launches[1][0], 0.5, ["--fixed-order"], 60)
    assert cmd[:3] == ["flock", "/tmp/x.lock", "timeout"] and cmd[-4:] == ["0.5", "--out", str(launches[1][0]), "--no-progress"]
    (tmp_path / "r2-pool-0").mkdir()
    with pytest.raises(SystemExit, match="exist already"):
        repeats.main(["--out", str(tmp_path), "--pools", "0", "0.5", "--repeats", "2", "--python", "true", "--", "--fixed-order"])
    # an options error: exit 2 with the message (issue 35, item 9)
    assert repeats.main(["--out", str(tmp_path / "new"), "--pools", "0", "--python", "true", "--", "--count", "3"]) == 2
