"""A live lab run's requests by where their prompt tokens came from, from the server's own counters.

Requests go one at a time, and /metrics is scraped after each (kvtier.lab.cyclic on the CPU build),
so the counters' change between consecutive snapshots is that request's: tokens from the GPU
(here: the server's KV cache), from the CPU tier (external_kv_transfer) and computed. The usage
field `cached_tokens` the server returns with each answer is an independent second reading of
GPU + CPU tokens; the two must agree request by request.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import RawRecordError
from ..serving.metrics import Snapshot
from .records import read_requests

SOURCE_COLUMNS = {"local_cache_hit": "gpu_tokens", "external_kv_transfer": "cpu_tokens", "local_compute": "computed_tokens"}


def request_sources(run_dir: str | Path) -> pd.DataFrame:
    """requests.csv plus gpu/cpu/computed tokens per request, cross-checked against usage."""
    run_dir = Path(run_dir)
    path = run_dir / "requests.csv"
    reqs = read_requests(path)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "metrics_after" not in raw.columns:
        raise RawRecordError(path, "no metrics_after column: this run has no per-request /metrics series", line=1)
    reqs["metrics_after"] = raw["metrics_after"]
    rows = []
    for setup, group in reqs.groupby("setup", sort=False):
        before = Snapshot.read(run_dir / setup / "metrics" / "0_start.prom").tokens_by_source()
        for i, r in group.iterrows():
            if not r.metrics_after:
                raise RawRecordError(path, f"request of {setup} has no /metrics snapshot after it", line=int(i) + 2)
            after = Snapshot.read(run_dir / setup / r.metrics_after).tokens_by_source()
            delta = {col: after[src] - before[src] for src, col in SOURCE_COLUMNS.items()}
            before = after
            seen = sum(delta.values())
            if seen != r.prompt_tokens:
                raise RawRecordError(path, f"{setup}: the counters moved by {seen:.0f} prompt tokens over this request, "
                                           f"usage says {r.prompt_tokens}", line=int(i) + 2)
            rows.append({**delta, "usage_cached_tokens": int(r.cached_tokens)})
    out = pd.concat([reqs.reset_index(drop=True), pd.DataFrame(rows)], axis=1)
    out["usage_agrees"] = out.usage_cached_tokens == out.gpu_tokens + out.cpu_tokens
    return out
