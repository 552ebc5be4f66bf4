"""kvtier replay: replay public agentic sessions against a live vLLM and keep what the note keeps.

Examples
  # eight kv-cache-tester sessions at 1/20 of their token counts, ten times faster than recorded,
  # against vLLM's CPU build with its native CPU tier (launched here, stopped at the end)
  kvtier replay --trace kv-cache-tester:../shared/traces/kv-cache-tester/traces_0001-0100.tgz \
      --sessions 8 --scale 0.05 --compress 10 --out raw/production/cpu --model data/tiny-model \
      --served-model-name tiny --tier native --offload-gib 0.125 --vllm-bin .venv-vllm/bin/vllm \
      --server-arg=--block-size=64 --server-arg=--kv-cache-memory-bytes=67108864

  # a fixed stream (the measured pool-size curve): 24 sessions by name order, the first 240 turns
  # in trace arrival order, one request in flight, a new folder per launch
  kvtier replay --trace kv-cache-tester:TRACES.tgz --sessions 24 --session-gap 0 --fixed-order --count 240 \
      --in-flight 1 --out raw/production/cpu-curve/pool-0.03125-r1 ...

  # the same against a server that is already running
  kvtier replay --trace mooncake:conversation_trace.jsonl --limit 500 --scale 0.01 --url http://127.0.0.1:8000 --out out/

Writes to --out: client.jsonl (one line per request: sent tokens, usage's cached tokens, time to
first chunk), run.yaml (trace, scaling, server), host.yaml (the host, and for a launched server the
observation period its counters cover, as the production pipeline reads it), metrics.prom (the
/metrics snapshot at the end), metrics_start.prom, sent_blocks.npz (every answered prompt as the
server's prefix cache sees it: chained block ids at its block size, kvtier.replay.sent), and
server.log for a launched server, host_series.csv (load and CPU steal every few seconds) and
metrics_series.csv.gz (the cache's /metrics families every second; kvtier.replay.monitor). Rerun
with the same --out to resume after the last answered request of each session; a --fixed-order
run needs a new --out (it is sent whole or not at all) and records the sent stream's sha256 in
run.yaml (stream.digest).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import time
import sys
from pathlib import Path

import yaml

from .. import cliargs as A
from ..eviction.host import host_info, load_average, versions
from ..errors import ManifestError, RawRecordError
from ..harness import Terminated, _on_sigterm, _platform, _server_args, _spec, api_key, launched_server_meta, resolve_vllm
from ..records.replaywrite import write_meta
from ..runfolder import claim, differences, hold, repair_cut_last_line
from ..serving.client import RequestFailed, ServingClient
from ..serving import redact
from ..serving.redact import scrub_file, secret_values
from ..serving.server import PreflightError, ServerDied, VllmServer, preflight, preflight_lines
from .client import replay, replay_fixed
from . import sent
from .monitor import HostSeries, MetricsSeries
from .schedule import OVER_LIMIT, TRACE_KINDS, Scaling, Turn, fixed_order, limit_prompts, schedule_for, stream_digest


def trace_arg(text: str) -> str:
    """KIND:PATH with a known kind and a file that is there (refused by argparse: exit 2)."""
    kind, sep, path = text.partition(":")
    if not sep or kind not in TRACE_KINDS:
        raise argparse.ArgumentTypeError(f"must start with {' or '.join(k + ':' for k in TRACE_KINDS)}, not {text!r}")
    if not Path(path).exists():  # a kv-cache-tester archive may be an unpacked folder
        raise argparse.ArgumentTypeError(f"{path}: no such file or folder")
    return text


def build_parser(prog: str = "kvtier replay") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, type=trace_arg, help="kv-cache-tester:PATH.tgz or mooncake:PATH.jsonl")
    p.add_argument("--out", required=True, help="a new folder for the records (refused if it exists, unless --resume)")
    p.add_argument("--resume", action="store_true", help="continue the unpinned run in --out after its last answered request")
    p.add_argument("--sessions", type=A.COUNT, default=8, help="kv-cache-tester: conversations replayed, in file order")
    p.add_argument("--session-ids", help="kv-cache-tester: comma-separated conversation file names or stems (instead of the first --sessions)")
    p.add_argument("--session-gap", type=A.NONNEG, default=30.0, help="kv-cache-tester: seconds between session starts (after compression)")
    p.add_argument("--limit", type=A.COUNT, help="mooncake: requests replayed")
    p.add_argument("--scale", type=A.POSITIVE, default=0.05, help="token counts x this factor")
    p.add_argument("--compress", type=A.POSITIVE, default=10.0, help="trace seconds / this factor")
    p.add_argument("--vocab-size", type=A.integer(2), default=2048, help="token ids are drawn below this")
    p.add_argument("--max-tokens-cap", type=A.COUNT, default=16)
    p.add_argument("--seed", type=A.SEED, default=0)
    p.add_argument("--max-duration", type=A.POSITIVE, default=600.0, help="seconds after which no new request is sent")
    p.add_argument("--workers", type=A.COUNT, default=8, help="requests in flight at most")
    p.add_argument("--fixed-order", action="store_true",
                   help="send a fixed stream: trace arrival order, --in-flight at most, no clock (needs a new --out)")
    p.add_argument("--count", type=A.COUNT, help="--fixed-order: the first COUNT requests of the stream (default: all)")
    p.add_argument("--in-flight", type=A.COUNT, default=1, help="--fixed-order: requests in flight at most")
    p.add_argument("--prompt-limit", type=A.COUNT, help="prompt + answer tokens a request may have (default: --max-model-len)")
    p.add_argument("--over-limit", choices=OVER_LIMIT, default="send",
                   help="a prompt over --prompt-limit: send it (the server refuses it: a failed line), truncate it, or refuse the run")
    p.add_argument("--metrics-interval", type=A.POSITIVE, default=1.0, help="seconds between /metrics samples (metrics_series.csv.gz)")
    p.add_argument("--host-interval", type=A.POSITIVE, default=2.0, help="seconds between load samples (host_series.csv)")
    p.add_argument("--report-wait", type=A.NONNEG, help="seconds to wait after the last answer so the server logs the report "
                                                     "covering it (default: its report interval + 2 s; 0 where no one reads the log's reports)")
    p.add_argument("--url", help="attach to a running server instead of launching one")
    p.add_argument("--api-key")
    p.add_argument("--request-timeout", type=A.POSITIVE, default=600.0, help="seconds without a byte before a request fails")
    p.add_argument("--request-deadline", type=A.POSITIVE,
                   help="seconds for a whole request, checked as bytes arrive (default: twice --request-timeout)")
    p.add_argument("--no-progress", action="store_true")
    _server_args(p)
    return p


def schedule(a: argparse.Namespace, s: Scaling) -> list[Turn]:
    if a.trace.partition(":")[0] not in TRACE_KINDS:
        raise SystemExit(f"error: --trace must start with kv-cache-tester: or mooncake:, not {a.trace!r}")
    members = [m.strip() for m in a.session_ids.split(",") if m.strip()] if a.session_ids else None
    turns = schedule_for(a.trace, s, sessions=a.sessions, session_gap_s=a.session_gap, limit=a.limit, members=members)
    return fixed_order(turns, a.count) if a.fixed_order else turns


STATS_INTERVAL_S = 10  # vLLM's default report interval (--disable-log-stats off)


def end_log_with_newline(path: Path) -> None:
    """The server has exited: its last line is complete, even when its exit handlers print no
    final newline (vLLM 0.32's nanobind leak report). Ending the file with one keeps the log
    reader's check for a copy cut mid-line meaningful."""
    if path.exists() and path.stat().st_size:
        with open(path, "rb+") as f:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")


def server_block_tokens(metrics: Path) -> int:
    """The server's block size, from its own /metrics (vllm:cache_config_info), by the records'
    reader (it needs no pandas, which the vLLM venv lacks)."""
    from ..records.geometry import server_block_tokens as block_of
    from ..records.prometheus import Snapshot

    try:
        return block_of(Snapshot.read(metrics))
    except RawRecordError:
        raise SystemExit(f"error: {metrics} has no vllm:cache_config_info block_size") from None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def host_record(facts: dict, software: dict, started: dt.datetime | None, ended: dt.datetime,
                series: dict | None = None) -> dict:
    """host.yaml: the host facts, and (launched server) the observation period in the production
    pipeline's terms — from the launch (its counters start then) to the server's stop, after the
    final /metrics snapshot (no request was sent in between), the year its log lines omit, and vLLM's report interval (its default: ten seconds)."""
    rec: dict = {"host": {**facts, "load_average_end": load_average(), **({"series": series} if series else {})},
                 "server": {"vllm_version": software.get("vllm"), "stats_interval_s": STATS_INTERVAL_S}}
    if started is not None:  # attached: the counters' start is not ours to know
        rec["observation"] = {"start": started.isoformat(), "end": ended.isoformat(), "log_year": started.year}
    return rec


def run_identity(out: Path, tier: str, offload_gib: float | None) -> dict:
    """run.yaml's identity (records.identity): the folder's name, tier, pool and, for a launch of the
    curve (r<launch>-pool-<GiB>, kvtier repeats), its launch; and a random run token. A resumed run
    keeps the one it stated first."""
    from ..records.identity import CURVE_NAME, new_identity
    from ..yamlio import load_yaml

    old = out / "run.yaml"
    if old.is_file():
        stated = (load_yaml(old.read_text(encoding="utf-8")) or {}).get("identity")
        if isinstance(stated, dict) and stated.get("nonce"):
            return stated
    m = CURVE_NAME.match(out.name)
    return new_identity(out.name, launch=int(m["launch"]) if m else None, tier=tier,
                        size=float(offload_gib or 0) if tier != "none" else 0.0)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    s = Scaling(scale=a.scale, compress=a.compress, vocab_size=a.vocab_size, max_tokens_cap=a.max_tokens_cap, seed=a.seed)
    if a.fixed_order and a.resume:
        print("error: a --fixed-order stream is sent whole by one launch: no --resume (use a new --out)", file=sys.stderr)
        return 2
    try:
        turns = schedule(a, s)
    except RawRecordError as e:  # the trace: not what its kind says (names the file and line)
        print(f"error: {e}", file=sys.stderr)
        return 2
    limit = a.prompt_limit or a.max_model_len
    try:
        turns, over = limit_prompts(turns, limit, a.over_limit)
    except ValueError as e:  # --over-limit refuse, and a prompt over it: the options, not the run, are wrong
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        out = claim(a.out, resume=a.resume, flag="--out")  # before any server: a new folder, or an unpinned run resumed
        lock = hold(out)  # one launch at a time: a second --resume of a run still going is refused, naming it
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return _launch(a, s, turns, over, limit, out)
    finally:
        lock.release()


# what a resume must replay as recorded (run.yaml's entries): the stream, its scaling, the pool
RESUME_KEYS = ("trace", "sessions", "limit", "scaling", "session_ids", "max_duration_s", "prompt_limit")


def resume_check(a: argparse.Namespace, out: Path, meta: dict) -> list[str]:
    """Before a resumed replay starts a server: its options equal run.yaml's (else the differences,
    one each), and client.jsonl's last line, if a crash cut it, dropped (reported, and recorded
    in meta['repairs']; any other bad line: RawRecordError naming it)."""
    if not a.resume or not (out / "run.yaml").exists():
        return []
    from ..records.replayrun import read_meta

    old = read_meta(out / "run.yaml")
    now = {k: meta.get(k) for k in RESUME_KEYS}
    now["prompt_limit"] = {k: meta["prompt_limit"][k] for k in ("tokens", "over_limit")}
    diffs = differences({k: old.get(k) for k in RESUME_KEYS}, now)
    server = {k: v for k, v in meta["server"].items() if k in ("mode", "tier", "offload_gib", "offload_block_tokens")}
    diffs += differences(old.get("server") or {}, server, "server")
    if a.served_name and (old.get("served_model") or {}).get("requested") not in (None, a.served_name):
        diffs.append(f"--served-model-name: recorded {old['served_model']['requested']!r}, now {a.served_name!r}")
    if diffs:
        return diffs
    repair = repair_cut_last_line(out / "client.jsonl")
    if repair:
        print(f"{out / repair['file']}:{repair['line']}: {repair.get('reason', '')}; "
              + (f"dropped its {repair['bytes']} bytes (recorded in run.yaml: repairs)" if repair["action"] == "dropped"
                 else repair["action"]), file=sys.stderr)
        meta["repairs"] = [*(old.get("repairs") or []), repair]
    elif old.get("repairs"):
        meta["repairs"] = old["repairs"]
    return []


def _launch(a: argparse.Namespace, s: Scaling, turns: list[Turn], over: object, limit: int | None, out: Path) -> int:
    """The launch itself, in its claimed and locked folder."""
    software = versions(None if a.url else resolve_vllm(a).path)
    spec = _spec(a, "cuda" if a.url and a.platform == "auto" else _platform(a, software))
    key = api_key(a)
    server = None
    signal.signal(signal.SIGTERM, _on_sigterm)  # stopped by a scheduler or `kill`: stop the server too
    meta = {"record": "replay of public agentic sessions (kvtier replay)", "class": "measured", "trace": a.trace,
            "sessions": a.sessions if a.trace.startswith("kv-cache-tester") else None, "limit": a.limit,
            "scaling": {"scale": s.scale, "compress": s.compress, "session_gap_s": a.session_gap, "vocab_size": s.vocab_size,
                        "max_tokens_cap": s.max_tokens_cap, "seed": s.seed},
            "session_ids": a.session_ids.split(",") if a.session_ids else None,
            "turns": len(turns), "max_duration_s": None if a.fixed_order else a.max_duration, "versions": software,
            "prompt_limit": {"tokens": limit, "over_limit": a.over_limit, "over": over},
            "server": {"mode": "attached", "url": a.url} if a.url else launched_server_meta(spec)}
    meta["identity"] = run_identity(out, a.tier, a.offload_gib)
    if a.fixed_order:
        meta["stream"] = {"mode": "fixed-order", "order": "trace arrival time, then session, then turn",
                          "count": a.count, "requests": len(turns), "in_flight": a.in_flight,
                          "digest": stream_digest(turns), "digest_of": "sha256 of each request's token ids and max_tokens, in send order"}
    try:
        diffs = resume_check(a, out, meta)
    except RawRecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if diffs:
        print(f"error: {out / 'run.yaml'}: a resume must replay the recorded run; these options differ: " + "; ".join(diffs)
              + " (resume with the recorded options, or use a new --out)", file=sys.stderr)
        return 2
    meta["status"] = "running"
    facts = host_info()
    host_series = HostSeries(out, a.host_interval).start()
    metrics_series = None
    started, done = None, False
    try:
        if not a.url:
            for line in preflight_lines(preflight(spec)):
                print(line, file=sys.stderr)
            server = VllmServer(spec, out / "server.log")
            started = _now()
            server.start()
            print(f"starting vllm serve (log: {server.log_path})", file=sys.stderr)
            meta["server"]["health_wait_s"] = round(server.wait_healthy(a.health_timeout), 1)  # type: ignore[index]
        url = a.url or spec.url
        write_meta(out, redact.record(meta))
        model = a.served_name if a.url else spec.served_name  # attached without a name: the one model it lists
        with ServingClient(url, model, timeout_s=a.request_timeout, api_key=key, deadline_s=a.request_deadline) as probe:
            meta["served_model"] = probe.served_record()  # another model served: RequestFailed, a failed run
            write_meta(out, redact.record(meta))
            if not (out / "metrics_start.prom").exists():
                (out / "metrics_start.prom").write_text(probe.metrics_text(), encoding="utf-8")
            name = probe.model
        scraper = ServingClient(url, name, timeout_s=30.0, api_key=key)
        metrics_series = MetricsSeries(out, scraper.metrics_text, a.metrics_interval).start()
        new_client = lambda: ServingClient(url, name, timeout_s=a.request_timeout, api_key=key, deadline_s=a.request_deadline)  # noqa: E731
        if a.fixed_order:
            counts = replay_fixed(turns, new_client, out / "client.jsonl", in_flight=a.in_flight, progress=not a.no_progress)
        else:
            counts = replay(turns, new_client, out / "client.jsonl", max_duration_s=a.max_duration, workers=a.workers,
                            progress=not a.no_progress)
        if server is not None:  # let the server print the report that covers the last requests
            time.sleep(STATS_INTERVAL_S + 2 if a.report_wait is None else a.report_wait)
            server.check_tier()  # a degraded mode logged during the replay: a failed run (ServerDied)
        meta["metrics_series"] = metrics_series.stop()
        metrics_series = None
        with ServingClient(url, name, timeout_s=a.request_timeout, api_key=key, deadline_s=a.request_deadline) as probe:
            (out / "metrics.prom").write_text(probe.metrics_text(), encoding="utf-8")
        meta["counts"] = counts
        meta["status"] = "complete"
        write_meta(out, redact.record(meta))
        sent.write(out, turns, server_block_tokens(out / "metrics.prom"))  # the stream, in the server's blocks
        done = True
    except (PreflightError, ServerDied, RequestFailed) as e:
        _failed(out, meta, str(e))
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        _failed(out, meta, str(e) or "interrupted (Ctrl-C)")
        print(f"{e or 'interrupted'}; the client log in {out} keeps every answered request; rerun with --resume to resume",
              file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except SystemExit as e:  # a check that stops the launch with its message (no block size in the scrape)
        _failed(out, meta, str(e.code))
        raise
    except Exception as e:  # anything else: a failed run with its reason, never one left running
        _failed(out, meta, f"{type(e).__name__}: {e}")
        raise
    finally:
        if metrics_series is not None:
            metrics_series.stop()
        if server is not None:
            server.stop()
            end_log_with_newline(out / "server.log")
        if done:  # the observation ends when the server stops (its log ends there), after the final snapshot
            (out / "host.yaml").write_text(yaml.safe_dump(host_record(facts, software, started, _now(), host_series.stop()),
                                                          sort_keys=False), encoding="utf-8")
        else:
            host_series.stop()
        scrub_file(out / "server.log", secret_values(spec.command(), {**os.environ, **spec.env, "API_KEY": key or ""}))
    print(f"{out}: {counts}")
    return 0


def _failed(out: Path, meta: dict, reason: str) -> None:
    """run.yaml of a launch that stopped: status failed, and why (a fault is never a measurement)."""
    meta.update(status="failed", failure={"reason": reason, "at": _now().isoformat()})
    write_meta(out, redact.record(meta))


if __name__ == "__main__":
    raise SystemExit(main())
