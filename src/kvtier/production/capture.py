"""A production-style capture's own records (kvtier replay): what was replayed, and the client's
count of every request checked against the server's counters.

The client log has one line per answered request: prompt tokens sent, the server's usage
(prompt and cached tokens), tokens generated. Summed, they must equal what /metrics counts for
the same server run — prompt tokens, GPU + pool tokens, generated tokens, finished requests —
exactly, since every request of the run went through the client. A difference means a record
from another run, a lost line, or a request the server counted twice.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RawRecordError
from ..records import runcontract
from ..records import vllm as V
from ..records.clientlog import SUM_FAILED_FIELDS as FAILED_FIELDS, SUM_FIELDS as FIELDS, read_client  # noqa: F401 (re-exported)
from ..records.prometheus import Snapshot
from ..records.replayrun import HOST_YAML, observation_seconds, read_meta
from ..records.touch import quiet


def capture_facts(run_yaml: str | Path, client: str | Path, snap: Snapshot) -> dict[str, float]:
    """The replay's settings (run.yaml) and the client's sums, after checking them against the
    counters: the values come from run.yaml and the client log; the counters only check them
    (quietly: a number computed from these facts names run.yaml and the client log)."""
    run_dir = Path(run_yaml).parent
    with quiet():  # checks: they refuse a record, they make no value
        runcontract.check_run_folder(run_dir, snap)  # counters, one server run, one geometry, job lines
    meta = read_meta(run_yaml)
    rows = read_client(client, observation_seconds(run_dir / HOST_YAML))
    ok = [r for r in rows if r["status"] == "ok"]
    sums = {
        "requests": float(len(ok)),
        "prompt": float(sum(r["usage_prompt_tokens"] for r in ok)),
        "cached": float(sum(r["cached_tokens"] for r in ok)),
        "generated": float(sum(r["completion_tokens"] for r in ok)),
    }
    sent = [r for r in ok if r["prompt_tokens_sent"] != r["usage_prompt_tokens"]]
    if sent:
        r = sent[0]
        raise RawRecordError(client, f"sent {r['prompt_tokens_sent']} prompt tokens but the server counted "
                                     f"{r['usage_prompt_tokens']}", line=r["_line"])
    with quiet():  # the counters check the sums; they make no value here
        by = snap.by_label(V.PROMPT_BY_SOURCE, "source")
        server = {
            "requests": float(snap.select(V.REQUEST_SUCCESS)["value"].sum()),
            "prompt": float(snap.value(V.PROMPT_TOTAL)),
            "cached": float(by["local_cache_hit"] + by["external_kv_transfer"]),
            "generated": float(snap.value(V.GENERATION_TOTAL)),
        }
    what = {"requests": f"finished requests ({V.REQUEST_SUCCESS})", "prompt": f"prompt tokens ({V.PROMPT_TOTAL})",
            "cached": f"GPU + pool tokens ({V.PROMPT_BY_SOURCE})", "generated": f"generated tokens ({V.GENERATION_TOTAL})"}
    for k, v in sums.items():
        if v != server[k]:
            raise RawRecordError(client, f"the client log sums to {v:,.0f} {what[k]}, the server's counters in "
                                         f"{snap.path} to {server[k]:,.0f}: records of different runs?")
    scaling = meta.get("scaling") or {}
    try:
        return {"sessions": float(meta["sessions"]), "scale": float(scaling["scale"]),
                "compress": float(scaling["compress"]), "turns": float(meta["turns"]),
                "max_duration": float(meta["max_duration_s"]), "answered": sums["requests"],
                "failed": float(len(rows) - len(ok)), "cached_tokens": sums["cached"]}
    except (KeyError, TypeError, ValueError) as e:
        raise RawRecordError(run_yaml, f"run.yaml lacks the replay's settings ({e})") from None
