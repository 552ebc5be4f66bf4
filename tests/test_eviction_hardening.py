"""The harness under failure and hostile input (issue: no lost or misjudged run, nothing leaked).

Against the in-process fake vLLM of tests/fixtures/eviction (a token is a word; 640-token cache,
200-token conversations, five evictors). Each case failed on the harness before its fix.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kvtier.eviction import analysis
from kvtier.eviction.records import REQUEST_SCHEMA, RUN_SCHEMA, RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan
from kvtier.serving.client import ServingClient
from kvtier.serving.redact import MARK, redact_argv, redact_env, scrub_file, secret_values

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from fake_vllm import FakeVllm  # noqa: E402

STATIC = {"host": {"hostname": "test"}, "model": {"path": "fake", "served_name": "fake", "params": None},
          "server": {"mode": "attached", "url": "http://fake", "tier": "none", "offload_block_tokens": None},
          "versions": {"python": "3"}}


def harness(fake: FakeVllm, run_dir: Path, api_key: str | None = None, deadline_s: float | None = None, **plan) -> Harness:
    client = ServingClient("http://fake", transport=fake.transport(), api_key=api_key, deadline_s=deadline_s)
    return Harness(client, RunWriter(run_dir), "test", Plan(target_tokens=200, **{"warmup_tokens": 0, **plan}), STATIC,
                   progress=False)


# ---------------------------------------------------------------- 1. a resumed cold read stays cold
def test_a_cold_read_resumed_on_the_same_server_uses_a_fresh_conversation(tmp_path):
    fake = FakeVllm()
    fake.fail_at, fake.fail_how = 1, "drop_after"  # the server prefilled (cached) the conversation, then dropped
    with pytest.raises(HarnessFailed, match="connection lost"):
        harness(fake, tmp_path / "r").run()
    fake.fail_at = None  # the same server, still holding the first conversation
    meta = harness(fake, tmp_path / "r").run()
    assert meta["fresh_conversations"] == [{"cycle": 1, "seed": 1, "attempt": 2}]
    assert meta["conversation"]["seed"] == 1
    cold = meta["checks"]["cold"]
    assert cold["verified_cold"] and cold["gpu_hit_tokens"] == 0 and not meta["cold_not_verified"]
    _, runs = analysis.load([tmp_path / "r"], RUN_SCHEMA, REQUEST_SCHEMA)
    assert runs.iloc[0].cold_verified


def test_a_warm_cold_read_is_flagged_and_keeps_the_run_out_of_table_1(tmp_path):
    fake = FakeVllm(answer="")
    h = harness(fake, tmp_path / "r")
    from kvtier.eviction import conversation as conv

    warm = conv.build(200, 0, lambda m: len(FakeVllm.tokens(m)))
    fake.prefill(FakeVllm.tokens(warm.messages))  # someone read this conversation before the run
    meta = h.run()
    assert meta["cold_not_verified"] == ["cold"] and meta["checks"]["cold"]["gpu_hit_tokens"] == 192
    _, runs = analysis.load([tmp_path / "r"], RUN_SCHEMA, REQUEST_SCHEMA)
    assert not runs.iloc[0].cold_verified and not runs.iloc[0].valid


# ---------------------------------------------------------------- 3. malformed answers end as recorded failures
@pytest.mark.parametrize("how, reason", [("malformed", "malformed stream chunk at line 1"),
                                         ("keepalive", "no complete answer within the 1 s deadline")])
def test_bad_streams_fail_the_request_with_a_reason(tmp_path, how, reason):
    fake = FakeVllm()
    fake.fail_at, fake.fail_how = 2, how
    t0 = time.monotonic()
    with pytest.raises(HarnessFailed, match=reason):
        harness(fake, tmp_path / "r", deadline_s=1.0).run()
    assert time.monotonic() - t0 < 30
    run = read_run(tmp_path / "r")
    assert run.meta["status"] == "failed" and reason in run.meta["failure"]["reason"]
    assert [r["status"] for r in run.requests] == ["ok", "failed"] and reason in run.requests[-1]["error"]


def test_metrics_that_are_not_prometheus_fail_the_run_with_a_reason(tmp_path):
    fake = FakeVllm()
    fake.bad_metrics_at = 4  # plan scrape, phase scrape, cold before, cold after: the fourth is HTML
    with pytest.raises(HarnessFailed, match="/metrics answer is not Prometheus text"):
        harness(fake, tmp_path / "r").run()
    run = read_run(tmp_path / "r")
    assert run.meta["status"] == "failed" and run.meta["failure"]["phase"] == "cold"
    # the cold request itself completed: it is kept, with the scrape's failure
    (cold,) = run.requests
    assert cold["status"] == "ok" and cold["metrics_after"] is None and "scrape after the request failed" in cold["error"]


# ---------------------------------------------------------------- 4. API keys
def test_a_server_with_an_api_key(tmp_path):
    with pytest.raises(HarnessFailed, match="wants an API key"):
        harness(FakeVllm(api_key="sk-test"), tmp_path / "a").run()
    meta = harness(FakeVllm(api_key="sk-test"), tmp_path / "b", api_key="sk-test").run()
    assert meta["status"] == "complete"


def test_the_cli_finds_the_key_where_users_put_it(monkeypatch):
    from kvtier.harness import api_key, build_parser

    parse = lambda *a: build_parser().parse_args(["run", "--setup", "x", *a])  # noqa: E731
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai-env")
    assert api_key(parse()) == "from-openai-env"
    monkeypatch.setenv("VLLM_API_KEY", "from-vllm-env")
    assert api_key(parse()) == "from-vllm-env"
    assert api_key(parse("--server-arg=--api-key=from-server-arg")) == "from-server-arg"
    assert api_key(parse("--api-key", "given")) == "given"


# ---------------------------------------------------------------- 5. secrets never reach a record
def test_secrets_are_redacted_from_the_command_env_and_log(tmp_path):
    from kvtier.harness import launched_server_meta
    from kvtier.serving.server import ServerSpec

    spec = ServerSpec(model="/m", tier="none", extra_args=["--api-key=sk-live-123", "--tokenizer", "/tok"],
                      env={"HF_TOKEN": "hf_secret", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"})
    meta = launched_server_meta(spec)
    text = yaml.safe_dump(meta)
    assert "sk-live-123" not in text and "hf_secret" not in text
    assert f"--api-key={MARK}" in meta["command"] and "/tok" in meta["command"]
    assert meta["env"] == {"HF_TOKEN": MARK, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    log = tmp_path / "server.log"
    log.write_text("INFO non-default args: {'api_key': ['sk-live-123'], 'model': '/m'}\nHF_TOKEN=hf_secret\n")
    assert scrub_file(log, secret_values(spec.command(), spec.env))
    assert "sk-live-123" not in log.read_text() and "hf_secret" not in log.read_text() and "'/m'" in log.read_text()
    assert redact_argv(["--api-key", "k", "--port", "1"]) == ["--api-key", MARK, "--port", "1"]
    assert redact_env({"DB_PASSWORD": "x", "PATH": "/bin"}) == {"DB_PASSWORD": MARK, "PATH": "/bin"}


# ---------------------------------------------------------------- 2. SIGTERM
FAKE_SERVE = """#!/bin/bash
# a stand-in for `vllm serve` that never becomes healthy, with a child like the engine core
if [ "$1" = "--version" ]; then echo 0.0.0; exit 0; fi
sleep 300 &
echo $! > "{pidfile}"
wait
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_marks_the_run_failed_and_stops_the_server(tmp_path):
    exe = tmp_path / "vllm"
    pidfile = tmp_path / "child.pid"
    exe.write_text(FAKE_SERVE.format(pidfile=pidfile))
    exe.chmod(0o755)
    cmd = [sys.executable, "-m", "kvtier.harness", "run", "--setup", "t", "--out", str(tmp_path / "out"), "--run-id", "r",
           "--model", "/m", "--vllm-bin", str(exe), "--tier", "none", "--platform", "cuda", "--port", str(free_port()),
           "--health-timeout", "120", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.1)
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    meta = yaml.safe_load((tmp_path / "out" / "t" / "r" / "run.yaml").read_text())
    assert meta["status"] == "failed" and meta["failure"] == {**meta["failure"], "phase": "server start",
                                                               "reason": "terminated (SIGTERM)"}
    time.sleep(0.3)
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()  # the server's process group is gone
    assert "terminated (SIGTERM)" in err


# ---------------------------------------------------------------- field checks in the run record
def test_refused_stores_in_the_server_log_are_recorded(tmp_path):
    from kvtier.serving.server import ServerSpec, VllmServer

    log = tmp_path / "server.log"
    log.write_text("INFO ready\nWARNING [offloading_connector.py:1] Request abc: cannot store blocks\n")
    h = harness(FakeVllm(), tmp_path / "r")
    h.server = VllmServer(ServerSpec(model="/m", tier="none"), log)  # never started: only its log is read
    meta = h.run()
    assert len(meta["field_checks"]) == 1 and "server.log:2" in meta["field_checks"][0]
