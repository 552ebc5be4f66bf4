"""A run's latencies as `vllm bench serve --save-result` writes them, from kvtier replay's client log.

The fields named in `SHARED` are computed as vLLM 0.32's benchmark computes them
(vllm/benchmarks/serve.py `calculate_metrics`, lib/endpoint_request_func.py): TTFT is the time to
the first streamed chunk that carries a choice, ITL the gaps between such chunks, the latency the
time to the last of them, TPOT (latency - TTFT) / (output tokens - 1) over requests with more than
one output token, percentiles by numpy's default (linear) rule, in milliseconds. So a kvtier run's
JSON can sit beside a `vllm bench serve` run's. The fields under "kvtier" have no counterpart in
vLLM's result (`NO_COUNTERPART` says what each is); `vllm bench serve` fields kvtier cannot fill
(generated_texts: the replay keeps no text; request_goodput: no SLO is set) are left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RawRecordError
from ..records import replayrun
from ..records.clientlog import client_lines
from ..records.replayrun import ReplayRun
from ..records.touch import TouchingDict, quiet

PERCENTILES = (50, 90, 99)  # low, mid, high: the note prints low and high
METRICS = ("ttft", "tpot", "itl", "e2el")
SHARED = ("backend", "endpoint_type", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
          "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
          "request_throughput", "output_throughput", "total_token_throughput",
          *[f"{stat}_{m}_ms" for m in METRICS for stat in ("mean", "median", "std", *[f"p{p}" for p in PERCENTILES])],
          "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")
NO_COUNTERPART = {
    "kvtier.run": "the run folder the numbers come from",
    "kvtier.stream_digest": "sha256 of the sent stream (run.yaml stream.digest)",
    "kvtier.pool_gib": "the CPU pool of the run (0: none)",
    "kvtier.cached_tokens": "per request, usage.prompt_tokens_details.cached_tokens (KV cache and pool)",
    "kvtier.failed_reasons": "per failed request: its HTTP status and the server's reason",
    "kvtier.max_in_flight": "the most requests in flight at once, exactly (vLLM's max_concurrent_requests bins by second)",
}


def _ms(values: list[float]) -> dict[str, float]:
    v = values or [0.0]  # vLLM: np.percentile(x or 0, p) -- an empty list counts as one zero
    out = {"mean": float(np.mean(v)) * 1000, "median": float(np.median(v)) * 1000, "std": float(np.std(v)) * 1000}
    out.update({f"p{p}": float(np.percentile(v, p)) * 1000 for p in PERCENTILES})
    return out


FROM_RUN_YAML = ("max_concurrency", "model_id", "tokenizer_id", "kvtier")  # fields run.yaml gives (wholly or in part)


def read_lines(client_log: str | Path) -> list[dict[str, Any]]:
    """Every line of the client log (answered and failed), in send order (`sent_s`), by the
    client log's reader (records.clientlog: the run contract's line checks)."""
    return _in_send_order(Path(client_log), [(i, rec) for i, _, rec in client_lines(client_log)])


def _in_send_order(path: Path, recs: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    for lineno, rec in recs:
        if rec.get("status") not in ("ok", "failed"):
            raise RawRecordError(path, "not a client-log line (status ok or failed)", line=lineno)
        if rec["status"] == "ok" and not (isinstance(rec.get("chunk_s"), list) and rec["chunk_s"]):
            raise RawRecordError(path, "an answered line without chunk_s (the arrival of each streamed chunk: at least one)", line=lineno)
    return sorted((rec for _, rec in recs), key=lambda r: float(r["sent_s"]))


def result(run: "ReplayRun | str | Path") -> TouchingDict:
    """The run's `vllm bench serve`-shaped result, from its record (kvtier.records.replayrun; a
    folder is read as one). A field read in a computation touches the files it came from
    (records.touch): FROM_RUN_YAML run.yaml and the client log, every other the client log alone."""
    if not isinstance(run, ReplayRun):
        run = replayrun.read(run)
    with quiet():  # the record's fields are read here to build the result; its fields touch on use
        meta = run.meta
        lines = _in_send_order(run.file(replayrun.CLIENT), run.client_lines())
        out = _result(run.path, meta, lines)
    client, yaml_ = run.file(replayrun.CLIENT).as_posix(), run.file(replayrun.RUN_YAML).as_posix()
    return TouchingDict(out, {k: (yaml_, client) for k in FROM_RUN_YAML}, default=(client,))


def _result(run_dir: Path, meta: dict[str, Any], lines: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in lines if r["status"] == "ok"]
    ttfts = [float(r["chunk_s"][0]) for r in ok]
    latencies = [float(r["chunk_s"][-1]) for r in ok]
    itls = [[float(b) - float(a) for a, b in zip(r["chunk_s"], r["chunk_s"][1:])] for r in ok]
    outs = [int(r["completion_tokens"]) for r in ok]
    tpots = [(lat - t) / (n - 1) for lat, t, n in zip(latencies, ttfts, outs) if n > 1]
    starts = [float(r["sent_s"]) for r in ok]
    duration = max((s + lat for s, lat in zip(starts, latencies)), default=0.0) - min(starts, default=0.0)
    total_in, total_out = sum(int(r["usage_prompt_tokens"]) for r in ok), sum(outs)
    stream = meta.get("stream") or {}
    server = meta.get("server") or {}
    out: dict[str, Any] = {
        "backend": "openai", "endpoint_type": "openai", "model_id": None, "tokenizer_id": None, "num_prompts": len(lines), "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": stream.get("in_flight"), "duration": duration, "completed": len(ok),
        "failed": len(lines) - len(ok), "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
    }
    cmd = server.get("command") or []
    if "serve" in cmd:
        out["tokenizer_id"] = cmd[cmd.index("serve") + 1]
    if "--served-model-name" in cmd:
        out["model_id"] = cmd[cmd.index("--served-model-name") + 1]
    for m, values in (("ttft", ttfts), ("tpot", tpots), ("itl", [x for r in itls for x in r]), ("e2el", latencies)):
        for stat, v in _ms(values).items():
            out[f"{stat}_{m}_ms"] = v
    out.update(input_lens=[int(r["usage_prompt_tokens"]) for r in ok], output_lens=outs, ttfts=ttfts, itls=itls,
               latencies=latencies, start_times=starts, errors=["" for _ in ok])
    out["kvtier"] = {"run": run_dir.as_posix(), "stream_digest": stream.get("digest"),
                     "pool_gib": float(server.get("offload_gib") or 0.0) if server.get("tier") != "none" else 0.0,
                     "cached_tokens": [int(r["cached_tokens"]) for r in ok],
                     "failed_reasons": [{"order": r.get("order"), "http_status": r.get("http_status"), "error": r.get("error")}
                                        for r in lines if r["status"] != "ok"],
                     "max_in_flight": max_concurrent(starts, latencies),
                     "no_counterpart": NO_COUNTERPART}
    return out


def max_concurrent(starts: list[float], latencies: list[float]) -> int:
    """The most requests in flight at once (vLLM bins by second; here, exactly)."""
    events = sorted([(s, 1) for s in starts] + [(s + lat, -1) for s, lat in zip(starts, latencies)], key=lambda e: (e[0], e[1]))
    now = best = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def dump(res: dict[str, Any], out: str | Path) -> None:
    """Write a result as `vllm bench serve --save-result` does (json.dump; "inf" as vLLM's rate)."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
