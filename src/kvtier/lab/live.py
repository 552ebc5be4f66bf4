"""A live lab run's requests by where their prompt tokens came from, from the server's own counters.

Requests go one at a time, and /metrics is scraped after each (kvtier.lab.cyclic on the CPU build),
so the counters' change between consecutive snapshots is that request's: tokens from the GPU
(here: the server's KV cache), from the CPU tier (external_kv_transfer) and computed. The usage
field `cached_tokens` the server returns with each answer is an independent second reading of
GPU + CPU tokens; the two must agree request by request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import RawRecordError
from ..serving.metrics import Snapshot
from ..offload_worker import worker_facts
from ..sim import TieredCache
from ..step_budget import step_tokens_of
from .experiments import requests_from_rows
from .records import read_requests
from ..yamlio import load_yaml

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
            snap = run_dir / setup / r.metrics_after
            if not snap.exists():
                raise RawRecordError(path, f"metrics_after names {setup}/{r.metrics_after}, which is missing", line=int(i) + 2)
            after = Snapshot.read(snap).tokens_by_source()
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


def server_shape(setup_dir: Path) -> dict[str, int | None]:
    """What the simulator needs, read from the server itself: its KV cache and block size (the
    first /metrics snapshot's cache_config_info) and its pool (the offload worker's startup line)."""
    return shape_of(setup_dir / "metrics" / "0_start.prom", setup_dir / "server.log")


def shape_of(metrics: Path, server_log: Path) -> dict[str, int | None]:
    """server_shape from a /metrics snapshot (cache_config_info) and the server log (the offload
    worker's startup line; no line: no pool, cpu_chunks and chunk_blocks None)."""
    return shape_from(metrics, worker_facts(Path(server_log).read_text(encoding="utf-8", errors="replace")))


def shape_from(metrics: Path, worker: dict[str, int] | None) -> dict[str, int | None]:
    """shape_of, given the worker's startup line already read (kvtier.offload_worker)."""
    info = Snapshot.read(metrics).labels_of("vllm:cache_config_info")
    try:
        block, blocks = int(info["block_size"]), int(info["num_gpu_blocks"])
    except (KeyError, ValueError):
        raise RawRecordError(metrics, "cache_config_info lacks block_size / num_gpu_blocks") from None
    return {"block_tokens": block, "kv_blocks": blocks, "chunk_blocks": (worker or {}).get("blocks_per_chunk"),
            "cpu_chunks": (worker or {}).get("host_chunks")}


def predict(run_dir: str | Path, measured: pd.DataFrame, null_blocks: int = 1) -> pd.DataFrame:
    """The simulator's outcome of every request, given only each server's configuration and the
    request stream as sent (prompt lengths, documents, order, answer length); measured columns beside it.

    `null_blocks`: vLLM's block pool keeps block 0 as its null block, so the usable KV cache is
    num_gpu_blocks - 1 (BlockPool in vllm/v1/core/block_pool.py)."""
    run_dir = Path(run_dir)
    max_tokens = int(load_yaml((run_dir / "run.yaml").read_text(encoding="utf-8"))["max_tokens"])
    frames = []
    for setup, rows in measured.groupby("setup", sort=False):
        shape = server_shape(run_dir / setup)
        B = int(shape["block_tokens"])  # type: ignore[arg-type]
        cache = TieredCache(int(shape["kv_blocks"]) - null_blocks, B, cpu_chunks=shape["cpu_chunks"],  # type: ignore[arg-type]
                            chunk_blocks=shape["chunk_blocks"] or 1, flavor="vllm",
                            step_tokens=step_tokens_of(run_dir / setup / "server.log"))
        outs = cache.replay(requests_from_rows(rows, B, generated=max_tokens - 1))
        pred = pd.DataFrame([{"pred_gpu_tokens": o.gpu_tokens, "pred_cpu_tokens": o.cpu_tokens,
                              "pred_computed_tokens": o.computed_tokens} for o in outs], index=rows.index)
        frames.append(rows.join(pred).assign(**shape))  # the server's sizes travel with its rows
    out = pd.concat(frames)
    out["agrees"] = ((out.gpu_tokens == out.pred_gpu_tokens) & (out.cpu_tokens == out.pred_cpu_tokens)
                     & (out.computed_tokens == out.pred_computed_tokens))
    return out


SETUPS = ("vllm", "native", "native-small")
PASS_NAMES = ("first", "second", "reverse")
SETUP_TITLES = {"vllm": "vLLM alone", "native": "native CPU tier", "native-small": "native CPU tier, pool too small"}


def register_numbers(writer: Any, table: pd.DataFrame) -> None:
    """lablive.*: per setup the server's sizes, tokens by source per pass (measured and predicted),
    TTFT medians, agreement counts, and every request's outcome for the side-by-side table.
    `table` is predict()'s: measured and predicted tokens and each server's sizes, per request."""
    docs = table[table.phase == "doc"]
    first = docs[docs.setup == docs.setup.iloc[0]]
    first = first[first["pass"] == "first"]
    writer.add("lablive.docs", len(first), "count")
    writer.add("lablive.doc_tokens_total", int(first.prompt_tokens.sum()), "tokens")
    base = table.iloc[0]
    writer.add("lablive.docs_over_cache", float(first.prompt_tokens.sum()) / (int(base.kv_blocks) * int(base.block_tokens)), "x")
    for setup, g in table.groupby("setup", sort=False):
        p = f"lablive.{setup}."
        shape = g.iloc[0]
        writer.add(p + "kv_cache_tokens", int(shape["kv_blocks"]) * int(shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
        writer.add(p + "block_tokens", int(shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
        if pd.notna(shape["cpu_chunks"]):
            writer.add(p + "cpu_chunks", int(shape["cpu_chunks"]), "count")
            writer.add(p + "chunk_tokens", int(shape["chunk_blocks"]) * int(shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
            writer.add(p + "cpu_tokens_capacity", int(shape["cpu_chunks"]) * int(shape["chunk_blocks"]) * int(shape["block_tokens"]), "tokens")  # type: ignore[arg-type]
        writer.add(p + "requests", len(g), "requests")
        writer.add(p + "agree", int(g.agrees.sum()), "requests")
        writer.add(p + "usage_agrees", int(g.usage_agrees.sum()), "requests")
        for pass_name, q in g[g.phase == "doc"].groupby("pass", sort=False):
            for col in ("gpu_tokens", "cpu_tokens", "computed_tokens", "pred_gpu_tokens", "pred_cpu_tokens", "pred_computed_tokens"):
                writer.add(p + f"{pass_name}.{col}", float(q[col].sum()), "tokens")
            writer.add(p + f"{pass_name}.ttft_p50", float(q.ttft_ms.median()), "ms")
            writer.add(p + f"{pass_name}.docs_from_cpu", int((q.cpu_tokens > 0).sum()), "count")
            writer.add(p + f"{pass_name}.docs_hit", int((q.gpu_tokens + q.cpu_tokens > 0).sum()), "count")
        for i, r in enumerate(g.to_dict("records")):
            q = p + f"req.{i}."
            writer.add(q + "order", int(r["order"]), "count")
            writer.add(q + "pass_index", PASS_NAMES.index(r["pass"]), "count")
            writer.add(q + "doc", int(r["doc"]) if pd.notna(r["doc"]) else -1, "count")
            for col in ("gpu_tokens", "cpu_tokens", "computed_tokens", "pred_gpu_tokens", "pred_cpu_tokens", "pred_computed_tokens"):
                writer.add(q + col, float(r[col]), "tokens")
            writer.add(q + "agrees", int(r["agrees"]), "count")
            writer.add(q + "ttft", float(r["ttft_ms"]), "ms")
    writer.add("lablive.requests", len(table), "requests")
    writer.add("lablive.agree", int(table.agrees.sum()), "requests")


def figure(table: pd.DataFrame, out: str | Path) -> None:
    """Per setup, each request's prompt tokens by source as measured (stacked bars), with the
    simulator's prediction of the cached part (GPU, then GPU + CPU) as ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..render.svg import save_svg

    setups = [s for s in SETUPS if s in set(table.setup)]
    fig, axes = plt.subplots(len(setups), 1, figsize=(9, 2.2 * len(setups)), sharex=True)
    axes = [axes] if len(setups) == 1 else list(axes)
    colors = {"gpu_tokens": "#6a9fd4", "cpu_tokens": "#d4793a", "computed_tokens": "#c8c8c8"}
    labels = {"gpu_tokens": "from the KV cache", "cpu_tokens": "from the CPU tier", "computed_tokens": "computed"}
    for ax, setup in zip(axes, setups):
        g = table[table.setup == setup].reset_index(drop=True)
        x = range(len(g))
        bottom = pd.Series(0.0, index=g.index)
        for col, color in colors.items():
            ax.bar(x, g[col], bottom=bottom, color=color, width=0.8, label=labels[col])
            bottom = bottom + g[col]
        ax.scatter(x, g.pred_gpu_tokens, marker="_", s=60, color="#1f3b66", linewidths=1.5, zorder=3,
                   label="simulator: KV cache")
        ax.scatter(x, g.pred_gpu_tokens + g.pred_cpu_tokens, marker="_", s=60, color="#7a3300", linewidths=1.5, zorder=3,
                   label="simulator: KV cache + CPU tier")
        edges = g.index[g["pass"].ne(g["pass"].shift())].tolist()[1:]
        for e in edges:
            ax.axvline(e - 0.5, color="#888", lw=0.6)
        ax.set_title(SETUP_TITLES.get(setup, setup), fontsize=9, loc="left")
        ax.set_ylabel("prompt tokens", fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("request, in the order sent (passes: first, same order, reverse; then one check prompt)", fontsize=8)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_svg(fig, out, "lab_live")
