"""Issue 35, the launch side: resumes (item 4), slow streams (item 5), attached servers' model
(item 6). Each test failed on b8652f7.

Against FakeVllm served on a real socket on 127.0.0.1, an ephemeral port
(tests/fixtures/eviction/socket_vllm.py), which can also trickle an answer: one byte every
0.5 s and never a newline, for at most `trickle_for_s` (so every test here is bounded even on
a client that would wait for ever). The command lines run as the README prints them
(`python -m kvtier ...`), each under a timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kvtier.errors import RawRecordError
from kvtier.eviction.records import RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan
from kvtier.serving.client import RequestFailed, ServingClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from socket_vllm import SocketVllm  # noqa: E402

STATIC = {"host": {"hostname": "test"}, "model": {"path": "fake", "served_name": "fake", "params": None},
          "server": {"mode": "attached", "url": "http://fake", "tier": "none", "offload_block_tokens": None},
          "versions": {"python": "3"}}
MESSAGES = [{"role": "user", "content": "one two three four"}]
KVTIER = [sys.executable, "-m", "kvtier"]


def kvtier(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVTIER, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def harness(server: SocketVllm, run_dir: Path, model: str | None = None, deadline_s: float = 10, **plan: object) -> Harness:
    client = ServingClient(server.url, model, timeout_s=deadline_s, deadline_s=deadline_s)
    return Harness(client, RunWriter(run_dir), "test", Plan(**{"target_tokens": 200, "warmup_tokens": 0, **plan}),  # type: ignore[arg-type]
                   STATIC, progress=False)


def harness_cli(url: str, out: Path, *extra: str) -> list[str]:
    return ["harness", "run", "--setup", "t", "--url", url, "--out", str(out), "--target-tokens", "200", "--warmup-tokens", "0",
            "--evictors", "2", "--no-progress", "--load-interval", "0.5", *extra]


def mooncake_trace(path: Path, n: int = 3) -> Path:
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 64, "output_length": 4, "hash_ids": [i]}) + "\n"
                            for i in range(n)))
    return path


def replay_cli(trace: Path, url: str, out: Path, *extra: str) -> list[str]:
    return ["replay", "--trace", f"mooncake:{trace}", "--url", url, "--out", str(out), "--no-progress", "--report-wait", "0",
            "--scale", "1", "--compress", "100", "--metrics-interval", "0.5", "--host-interval", "0.5", *extra]


# ------------------------------------------------------------------ item 5: a wall-clock deadline while bytes arrive

@pytest.mark.parametrize("call", ["chat", "completion", "metrics"])
def test_a_trickling_answer_is_stopped_at_the_deadline(call: str) -> None:
    """One byte every 0.5 s and never a newline: httpx's read timeout (3 s) restarts with every
    byte, so only a deadline checked as bytes arrive stops it (here at 2 x 3 s)."""
    with SocketVllm() as s:
        s.trickle_for_s = 25
        if call == "metrics":
            s.metrics_fault, s.metrics_fault_at = "trickle", 1
        else:
            s.fault, s.fail_at = "trickle", 1
        c = ServingClient(s.url, "fake", timeout_s=3)
        t0 = time.monotonic()
        with pytest.raises(RequestFailed, match=r"no complete answer within the 6 s deadline"):
            {"chat": lambda: c.stream_chat(MESSAGES, 4), "completion": lambda: c.stream_completion([1, 2, 3], 2),  # type: ignore[arg-type]
             "metrics": c.metrics_text}[call]()
        took = time.monotonic() - t0
        c.close()
    assert 5.5 < took < 15, took  # the server would go on for 25 s
    assert s.trickled >= 8  # the bytes did arrive, one at a time


def test_kvtier_replay_request_timeout_3_is_not_kept_waiting(tmp_path: Path) -> None:
    """The issue's command: `kvtier replay --request-timeout 3` against the trickling server.
    Each request fails at its deadline (twice the timeout, --request-deadline) with the reason in
    client.jsonl; the run does not wait for the server to give up (25 s a request)."""
    trace = mooncake_trace(tmp_path / "m.jsonl", 2)
    with SocketVllm() as s:
        s.trickle_for_s = 25
        s.fault, s.fail_at = "trickle", 1
        t0 = time.monotonic()
        done = kvtier(replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "fake", "--request-timeout", "3"),
                      tmp_path, timeout=90)
        took = time.monotonic() - t0
    assert took < 25, (took, done.stderr)
    lines = [json.loads(x) for x in (tmp_path / "out" / "client.jsonl").read_text().splitlines()]
    assert [x["status"] for x in lines] == ["failed", "failed"]
    assert all("no complete answer within the 6 s deadline" in x["error"] for x in lines), lines
    assert "Traceback" not in done.stderr


def test_the_harness_fails_a_trickling_request_at_its_deadline(tmp_path: Path) -> None:
    with SocketVllm() as s:
        s.trickle_for_s = 25
        s.fault, s.fail_at = "trickle", 2  # the hit read
        t0 = time.monotonic()
        with pytest.raises(HarnessFailed, match="no complete answer within the 4 s deadline"):
            harness(s, tmp_path / "r", deadline_s=4).run()
        took = time.monotonic() - t0
    assert took < 15, took
    run = read_run(tmp_path / "r")
    assert run.meta["status"] == "failed" and "deadline" in run.meta["failure"]["reason"]


class _Launched:
    """Stands in for a launched vLLM in the lab's loop (no process): its URL is the socket server's."""

    def __init__(self, url: str):
        self.url = url

    def __call__(self, spec: object, log: Path) -> "_Launched":
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("fake server\n")
        return self

    def __enter__(self) -> "_Launched":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def wait_healthy(self, timeout: float) -> float:
        return 0.0


def _lab(monkeypatch: pytest.MonkeyPatch, s: SocketVllm, out: Path, served: str, timeout: float = 10) -> list[Path]:
    from kvtier.lab import cyclic
    from kvtier.serving import ServerSpec

    monkeypatch.setattr(cyclic, "VllmServer", _Launched(s.url))
    monkeypatch.setattr(cyclic, "preflight", lambda spec: [])
    monkeypatch.setattr(cyclic, "versions", lambda *a: {"python": "3"}, raising=False)
    spec = ServerSpec(model="fake", served_name=served, tier="none", platform="cpu")
    plan = cyclic.CyclicPlan(docs=2, doc_words=20, check_words=5, setups=["vllm"])
    return cyclic.run(out, plan, lambda setup: spec, progress=False, request_timeout_s=timeout)


def test_the_lab_client_fails_a_trickling_request_at_its_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SocketVllm() as s:
        s.trickle_for_s = 25
        s.fault, s.fail_at = "trickle", 1
        t0 = time.monotonic()
        with pytest.raises(RequestFailed, match="no complete answer within the 4 s deadline"):
            _lab(monkeypatch, s, tmp_path / "lab", "fake", timeout=2)
        took = time.monotonic() - t0
    assert took < 15, took
    meta = yaml.safe_load((tmp_path / "lab" / "run.yaml").read_text())
    assert meta["status"] == "failed" and "deadline" in meta["failure"]["reason"]


# ------------------------------------------------------------------ item 6: the served model, checked and recorded

def test_kvtier_replay_attached_to_another_model_is_a_failed_run(tmp_path: Path) -> None:
    trace = mooncake_trace(tmp_path / "m.jsonl")
    with SocketVllm() as s:
        s.models = ["some-other-model"]
        done = kvtier(replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "tiny"), tmp_path)
        assert s.chat == 0  # nothing was sent
    assert done.returncode == 1, done.stderr
    assert "the server serves ['some-other-model'], not the 'tiny' asked for" in done.stderr
    meta = yaml.safe_load((tmp_path / "out" / "run.yaml").read_text())
    assert meta["status"] == "failed" and "not the 'tiny' asked for" in meta["failure"]["reason"]
    assert not (tmp_path / "out" / "client.jsonl").exists()


def test_kvtier_replay_records_the_model_it_measured(tmp_path: Path) -> None:
    trace = mooncake_trace(tmp_path / "m.jsonl")
    with SocketVllm() as s:
        done = kvtier(replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "fake"), tmp_path)
    assert done.returncode == 0, done.stderr
    meta = yaml.safe_load((tmp_path / "out" / "run.yaml").read_text())
    assert meta["served_model"] == {"requested": "fake", "listed": ["fake"], "used": "fake"}
    assert meta["status"] == "complete"


def test_an_attached_server_listing_several_models_needs_a_name(tmp_path: Path) -> None:
    """Without --served-model-name, the first id /v1/models lists was taken: a guess."""
    trace = mooncake_trace(tmp_path / "m.jsonl")
    with SocketVllm() as s:
        s.models = ["other", "fake"]
        done = kvtier(replay_cli(trace, s.url, tmp_path / "out"), tmp_path)
        assert s.chat == 0
    assert done.returncode == 1 and "the server serves ['other', 'fake']; name the one to measure (--served-model-name)" \
        in done.stderr, done.stderr


def test_kvtier_harness_attached_to_another_model_is_a_failed_run(tmp_path: Path) -> None:
    """The harness wrote served_name: tiny and measured whatever the server served."""
    with SocketVllm() as s:
        s.models = ["some-other-model"]
        done = kvtier(harness_cli(s.url, tmp_path / "raw", "--served-model-name", "tiny", "--run-id", "r1"), tmp_path)
        assert s.chat == 0
    assert done.returncode == 1, done.stderr
    meta = yaml.safe_load((tmp_path / "raw" / "t" / "r1" / "run.yaml").read_text())
    assert meta["status"] == "failed" and meta["failure"]["phase"] == "model"
    assert "the server serves ['some-other-model'], not the 'tiny' asked for" in meta["failure"]["reason"]


def test_the_harness_records_the_model_it_measured(tmp_path: Path) -> None:
    with SocketVllm() as s:
        done = kvtier(harness_cli(s.url, tmp_path / "raw", "--served-model-name", "fake", "--run-id", "r1"), tmp_path)
    assert done.returncode == 0, done.stderr
    meta = read_run(tmp_path / "raw" / "t" / "r1").meta
    assert meta["status"] == "complete"
    assert dict(meta["model"]["served"]) == {"requested": "fake", "listed": ["fake"], "used": "fake"}


def test_the_lab_refuses_a_server_serving_another_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SocketVllm() as s:
        s.models = ["some-other-model"]
        with pytest.raises(RequestFailed, match="not the 'lab' asked for"):
            _lab(monkeypatch, s, tmp_path / "lab", "lab")
        assert s.chat == 0
    meta = yaml.safe_load((tmp_path / "lab" / "run.yaml").read_text())
    assert meta["status"] == "failed" and "not the 'lab' asked for" in meta["failure"]["reason"]


def test_the_lab_records_the_model_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SocketVllm() as s:
        _lab(monkeypatch, s, tmp_path / "lab", "fake")
    meta = yaml.safe_load((tmp_path / "lab" / "run.yaml").read_text())
    assert meta["served_model"] == {"vllm": {"requested": "fake", "listed": ["fake"], "used": "fake"}}


# ------------------------------------------------------------------ item 4: resumes

def _failed_first_attempt(tmp_path: Path, url_server: SocketVllm, *extra: str) -> Path:
    """A run that failed in its hit read (an error answer): what a resume continues."""
    url_server.fault, url_server.fail_at = "error_json", 2
    done = kvtier(harness_cli(url_server.url, tmp_path / "raw", "--run-id", "r1", *extra), tmp_path)
    assert done.returncode == 1, done.stderr
    url_server.fault = None
    run_dir = tmp_path / "raw" / "t" / "r1"
    assert yaml.safe_load((run_dir / "run.yaml").read_text())["status"] == "failed"
    return run_dir


def test_a_second_resume_while_the_first_runs_is_refused_naming_it(tmp_path: Path) -> None:
    with SocketVllm() as s:
        run_dir = _failed_first_attempt(tmp_path, s, "--request-timeout", "10")
        s.trickle_for_s = 20
        s.fault, s.fail_at = "trickle", 0  # the first resume hangs in its first request, holding the folder
        first = subprocess.Popen([*KVTIER, *harness_cli(s.url, tmp_path / "raw", "--run-id", "r1", "--resume",
                                                        "--request-timeout", "10")],
                                 cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while s.trickled == 0 and time.monotonic() < deadline and first.poll() is None:
                time.sleep(0.2)
            assert s.trickled > 0, "the first resume never reached its request"
            second = kvtier(harness_cli(s.url, tmp_path / "raw", "--run-id", "r1", "--resume", "--request-timeout", "10"),
                            tmp_path)
        finally:
            first.send_signal(signal.SIGTERM)
            first.communicate(timeout=60)
    assert second.returncode == 2, second.stderr
    assert re.search(rf"{run_dir}: in use by pid {first.pid} on \S+ since \S+", second.stderr), second.stderr
    assert "Traceback" not in second.stderr
    meta = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert meta["attempts"] == 2  # the refused one never started an attempt
    assert not (run_dir / ".kvtier-run.lock").exists()  # released by the first on its way out


def test_the_lock_names_its_holder_and_is_released() -> None:
    from kvtier.runfolder import RunFolderBusy, hold

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lock = hold(d)
        with pytest.raises(RunFolderBusy, match=rf"in use by pid {os.getpid()} on "):
            hold(d)
        lock.release()
        hold(d).release()  # free again
        assert os.listdir(d) == []


@pytest.mark.parametrize("extra, named", [
    (["--max-tokens", "32"], "--max-tokens: recorded 64, now 32"),
    (["--rounds", "2"], "--rounds: recorded 1, now 2"),
])
def test_a_resume_with_other_options_is_refused_naming_each_difference(tmp_path: Path, extra: list[str], named: str) -> None:
    with SocketVllm() as s:
        run_dir = _failed_first_attempt(tmp_path, s)
        before = (run_dir / "run.yaml").read_text(), (run_dir / "requests.jsonl").read_text()
        chats = s.chat
        done = kvtier(harness_cli(s.url, tmp_path / "raw", "--run-id", "r1", "--resume", *extra), tmp_path)
        assert s.chat == chats  # refused before any request
    assert done.returncode == 2, done.stderr
    assert "a resume must run the recorded plan; these options differ: " + named in done.stderr, done.stderr
    assert ((run_dir / "run.yaml").read_text(), (run_dir / "requests.jsonl").read_text()) == before


def test_a_resume_with_the_recorded_options_completes(tmp_path: Path) -> None:
    with SocketVllm() as s:
        run_dir = _failed_first_attempt(tmp_path, s)
        done = kvtier(harness_cli(s.url, tmp_path / "raw", "--run-id", "r1", "--resume"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert read_run(run_dir).meta["status"] == "complete"


def test_a_cut_last_line_of_requests_jsonl_is_dropped_and_reported(tmp_path: Path) -> None:
    with SocketVllm() as s:
        run_dir = _failed_first_attempt(tmp_path, s)
        jl = run_dir / "requests.jsonl"
        whole = jl.read_text()
        n = len(whole.splitlines())
        cut = whole.splitlines()[-1][: 40]
        jl.write_text(whole + cut)  # a crash in the middle of appending a line
        done = kvtier(harness_cli(s.url, tmp_path / "raw", "--run-id", "r1", "--resume"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{jl}:{n + 1}: the last line was cut in the middle of a write" in done.stderr, done.stderr
    assert f"dropped its {len(cut)} bytes" in done.stderr
    run = read_run(run_dir)
    assert run.meta["status"] == "complete"
    (repair,) = run.meta["repairs"]
    assert dict(repair) | {"sha256": None} == {"file": "requests.jsonl", "line": n + 1, "action": "dropped", "bytes": len(cut),
                                               "sha256": None, "attempt": 2, "reason": repair["reason"]}


def test_a_bad_line_before_the_last_is_refused_with_file_and_line(tmp_path: Path) -> None:
    with SocketVllm() as s:
        run_dir = _failed_first_attempt(tmp_path, s)
        jl = run_dir / "requests.jsonl"
        jl.write_text("{not json\n" + jl.read_text())
        done = kvtier(harness_cli(s.url, tmp_path / "raw", "--run-id", "r1", "--resume"), tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{jl}:1: not JSON" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert yaml.safe_load((run_dir / "run.yaml").read_text())["status"] == "failed"  # untouched, never `running`


def test_a_crash_inside_the_run_leaves_it_failed_not_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any exception the harness does not expect (here a bad record read back) marks the run
    failed with the reason; run.yaml never stays at `running`."""
    with SocketVllm() as s:
        h = harness(s, tmp_path / "r")
        monkeypatch.setattr(h, "_record_cold", lambda *a: (_ for _ in ()).throw(RawRecordError(tmp_path / "x", "broken", line=3)))
        with pytest.raises(RawRecordError):
            h.run()
    meta = yaml.safe_load((tmp_path / "r" / "run.yaml").read_text())
    assert meta["status"] == "failed" and "RawRecordError" in meta["failure"]["reason"] and "x:3: broken" in meta["failure"]["reason"]


def test_kvtier_replay_resume_with_another_scale_is_refused(tmp_path: Path) -> None:
    trace = mooncake_trace(tmp_path / "m.jsonl")
    with SocketVllm() as s:
        s.fault, s.fail_at = "error_json", 2
        kvtier(replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "fake"), tmp_path)
        args = replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "fake", "--resume")
        args[args.index("--scale") + 1] = "0.5"
        done = kvtier(args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "a resume must replay the recorded run; these options differ: scaling.scale: recorded 1.0, now 0.5" in done.stderr


def test_kvtier_replay_resume_drops_a_cut_last_client_line(tmp_path: Path) -> None:
    trace = mooncake_trace(tmp_path / "m.jsonl")
    with SocketVllm() as s:
        s.fault, s.fail_at = "error_json", 3
        # one worker: the turns are sent, and logged, in their order (the third fails)
        kvtier(replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "fake", "--workers", "1"), tmp_path)
        s.fault = None
        log = tmp_path / "out" / "client.jsonl"
        lines = log.read_text().splitlines()
        log.write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])  # the third line, cut
        done = kvtier(replay_cli(trace, s.url, tmp_path / "out", "--served-model-name", "fake", "--workers", "1", "--resume"),
                      tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{log}:3: the last line was cut in the middle of a write" in done.stderr, done.stderr
    assert [json.loads(x)["status"] for x in log.read_text().splitlines()] == ["ok", "ok", "ok"]
    assert yaml.safe_load((tmp_path / "out" / "run.yaml").read_text())["repairs"][0]["line"] == 3
