"""Issue 23, part 2: the harness never records a fault as a measurement.

Against FakeVllm served on a real socket on 127.0.0.1 (tests/fixtures/eviction/socket_vllm.py),
so that how a stream ends on the wire (closed, or a chunked body that ends) is the real thing.
Each fault fails the request and the run, with the reason in run.yaml and requests.jsonl; the
records are kept. Each test failed on the code before the fix (the run ended "complete").
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kvtier.eviction.records import RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan
from kvtier.serving.client import RequestFailed, ServingClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from socket_vllm import SocketVllm  # noqa: E402

STATIC = {"host": {"hostname": "test"}, "model": {"path": "fake", "served_name": "fake", "params": None},
          "server": {"mode": "attached", "url": "http://fake", "tier": "none", "offload_block_tokens": None},
          "versions": {"python": "3"}}
MESSAGES = [{"role": "user", "content": "one two three four"}]


def harness(server: SocketVllm, run_dir: Path, model: str | None = None) -> Harness:
    client = ServingClient(server.url, model, timeout_s=10, deadline_s=10)
    return Harness(client, RunWriter(run_dir), "test", Plan(target_tokens=200, warmup_tokens=0), STATIC, progress=False)


def failed_run(server: SocketVllm, run_dir: Path, reason: str, model: str | None = None) -> dict:
    with pytest.raises(HarnessFailed, match=reason):
        harness(server, run_dir, model).run()
    run = read_run(run_dir)
    assert run.meta["status"] == "failed" and re.search(reason, run.meta["failure"]["reason"])
    assert run.requests, "the records are kept"
    return run


def test_a_healthy_socket_server_gives_a_complete_run(tmp_path: Path) -> None:
    with SocketVllm() as s:
        meta = harness(s, tmp_path / "r").run()
    assert meta["status"] == "complete"


@pytest.mark.parametrize("fault, reason", [
    ("error_json", "HTTP 200 error: type InternalServerError; code 500; message the engine is dead"),
    ("error_event", "HTTP 200 with an error event at line 2"),
    ("error_chunk", "HTTP 200 with an error in the stream at line 3"),
])
def test_a_200_with_an_error_body_fails_the_request(tmp_path: Path, fault: str, reason: str) -> None:
    with SocketVllm() as s:
        s.fault, s.fail_at = fault, 2
        run = failed_run(s, tmp_path / "r", reason)
    assert [r["status"] for r in run.requests] == ["ok", "failed"] and reason in run.requests[-1]["error"]


@pytest.mark.parametrize("fault", ["cut_close", "cut_chunked"])
def test_a_stream_that_ends_without_a_finish_reason_fails_the_request(tmp_path: Path, fault: str) -> None:
    with SocketVllm() as s:
        s.fault, s.fail_at = fault, 2
        run = failed_run(s, tmp_path / "r", "the stream ended after .* lines without a finish reason")
    assert [r["status"] for r in run.requests] == ["ok", "failed"]


def test_an_answer_from_another_model_fails_the_request(tmp_path: Path) -> None:
    with SocketVllm() as s:
        s.fault, s.fail_at = "wrong_model", 1
        failed_run(s, tmp_path / "r", "answered by model 'some-other-model', not the 'fake' asked for")


def test_a_server_that_does_not_serve_the_model_asked_for_is_refused_before_any_request() -> None:
    with SocketVllm() as s:
        s.models = ["some-other-model"]
        with ServingClient(s.url, "fake", timeout_s=10) as c, pytest.raises(RequestFailed, match=r"serves \['some-other-model'\], "
                                                                                                r"not the 'fake' asked for"):
            c.stream_chat(MESSAGES, 4)
        assert s.chat == 0


@pytest.mark.parametrize("fault, reason", [("empty", "the /metrics answer is empty"),
                                           ("no_by_source", "/metrics lacks vllm:prompt_tokens_by_source_total")])
def test_metrics_empty_or_without_the_series_the_run_needs_fail_the_run(tmp_path: Path, fault: str, reason: str) -> None:
    with SocketVllm() as s:
        s.metrics_fault, s.metrics_fault_at = fault, 4  # plan, phase, cold before, cold after
        run = failed_run(s, tmp_path / "r", reason)
    assert run.meta["failure"]["phase"] == "cold" and "scrape after the request failed" in run.requests[0]["error"]


def test_counters_that_do_not_move_over_an_answered_request_fail_the_run(tmp_path: Path) -> None:
    with SocketVllm() as s:
        s.metrics_fault, s.metrics_fault_at = "frozen", 4  # the scrape after the cold read repeats the one before
        run = failed_run(s, tmp_path / "r", "the counters did not move over an answered request")
    (cold,) = run.requests
    assert cold["status"] == "ok" and cold["metrics_after"] and "did not move" in cold["error"]


def test_the_client_refuses_each_fault_by_itself() -> None:
    """The same faults one request at a time, on both APIs (chat, and the token-id completions of kvtier replay)."""
    with SocketVllm() as s:
        with ServingClient(s.url, "fake", timeout_s=10) as c:
            assert c.stream_chat(MESSAGES, 4).finish_reason == "stop"
            assert c.stream_completion([1, 2, 3], 2).finish_reason == "length"  # type: ignore[arg-type]
            for fault in ("error_json", "error_event", "error_chunk", "cut_close", "cut_chunked", "wrong_model"):
                s.fault, s.fail_at = fault, 0
                for call in (lambda: c.stream_chat(MESSAGES, 4), lambda: c.stream_completion([1, 2, 3], 2)):  # type: ignore[arg-type]
                    with pytest.raises(RequestFailed):
                        call()
