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
from ..numbers import traced_adder
from ..records import runcontract
from ..records.geometry import lmcache_pool, shape_from
from ..records.labrun import LabRun, read_lab_run, read_run
from ..records.labwriter import METRICS_AFTER
from ..records.prometheus import Snapshot, read_prometheus
from ..records.touch import quiet, sources_of, touch
from ..records.traced import TracedFrame, cell, read
from ..sim import TieredCache
from ..step_budget import step_tokens_of
from .experiments import requests_from_rows

SOURCE_COLUMNS = {"local_cache_hit": "gpu_tokens", "external_kv_transfer": "cpu_tokens", "local_compute": "computed_tokens"}


def run_table(run_dir: str | Path) -> TracedFrame:
    """predict(request_sources(...)) over one reading of the run (read_lab_run checks and hashes
    every snapshot of every setup: once is enough, the LabRun it returns is read-only)."""
    run = read_lab_run(run_dir)
    return predict(run_dir, request_sources(run_dir, run), run=run)


def request_sources(run_dir: str | Path, run: LabRun | None = None) -> TracedFrame:
    """requests.csv plus gpu/cpu/computed tokens per request, cross-checked against usage. Each
    cell keeps the files it was read from (records.traced): a request's columns its requests.csv,
    its tokens by source the two snapshots around it. `run`: run_dir as read_lab_run read it
    (read here when not given)."""
    run_dir = Path(run_dir)
    run = read_lab_run(run_dir) if run is None else run
    path = run.requests_path
    reqs, req_files = read(lambda: run.requests)
    if METRICS_AFTER not in reqs.columns:
        raise RawRecordError(path, "no metrics_after column: this run has no per-request /metrics series", line=1)
    rows, files = [], []
    for setup, group in reqs.groupby("setup", sort=False):
        contract = _RunContract(run.setup(setup).snapshot_paths[0])
        before, before_files = read(contract.last.tokens_by_source)
        for i, r in group.iterrows():
            if not r.metrics_after:
                raise RawRecordError(path, f"request of {setup} has no /metrics snapshot after it", line=int(i) + 2)
            try:
                snap = run.setup(setup).request_snapshot(r.metrics_after)
            except FileNotFoundError:
                raise RawRecordError(path, f"metrics_after names {setup}/{r.metrics_after}, which is missing", line=int(i) + 2) from None
            # counters finite, not negative, not lower than before
            after, after_files = read(lambda: contract.next(snap).tokens_by_source())  # noqa: B023 (called here)
            delta = {col: after[src] - before[src] for src, col in SOURCE_COLUMNS.items()}
            seen = sum(delta.values())
            if seen != r.prompt_tokens:
                raise RawRecordError(path, f"{setup}: the counters moved by {seen:.0f} prompt tokens over this request, "
                                           f"usage says {r.prompt_tokens}", line=int(i) + 2)
            rows.append({**delta, "usage_cached_tokens": int(r.cached_tokens)})
            files.append(before_files | after_files)
            before, before_files = after, after_files
    out = pd.concat([reqs.reset_index(drop=True), pd.DataFrame(rows)], axis=1)
    cells = {c: req_files for c in reqs.columns} | {c: files for c in SOURCE_COLUMNS.values()} | {"usage_cached_tokens": req_files}
    return TracedFrame.of(out, cells).derive("usage_agrees", lambda t: t.usage_cached_tokens == t.gpu_tokens + t.cpu_tokens)


class _RunContract:
    """The run contract (kvtier.production.runcontract.check_series) over a setup's snapshots in
    the order they were scraped: each one's counters, and each against the one before (one
    server run)."""

    def __init__(self, first: Path):
        self.last = Snapshot.read(first)
        with quiet():  # a check: it refuses, it does not make a value
            runcontract.check_series(self.last)

    def next(self, path: Path) -> Snapshot:
        snap = Snapshot.read(path)
        with quiet():
            runcontract.check_series(snap, self.last)
        self.last = snap
        return snap


def server_shape(setup_dir: Path) -> dict[str, int | None]:
    """What the simulator needs, read from the server itself: its KV cache and block size (the
    first /metrics snapshot's cache_config_info) and its pool (the offload worker's startup line).
    Each value carries the files it was read from (records.touch)."""
    return shape_of(setup_dir / "metrics" / "0_start.prom", setup_dir / "server.log")


def shape_of(metrics: Path, server_log: Path) -> dict[str, int | None]:
    """server_shape from a /metrics snapshot (cache_config_info) and the server log (the offload
    worker's startup line; no line: no pool, cpu_chunks and chunk_blocks None)."""
    log = runcontract.read_log_facts(server_log)  # a worker line repeated with other values is refused
    run_yaml = Path(server_log).parent.parent / "run.yaml"
    setups = read_run(run_yaml).get("setups") or {} if run_yaml.is_file() else {}
    setup = dict(setups.get(Path(server_log).parent.name) or {})
    server = {**{k: setup[k] for k in ("tier", "offload_gib", "offload_block_tokens") if k in setup}, "command": setup.get("args")}
    with quiet():  # run.yaml, connector, worker, cache_config_info: checked against each other
        runcontract.check_geometry(run_yaml, server, log, [read_prometheus(metrics)])
    cache = cell(shape_from, metrics, None)  # the KV cache and block: cache_config_info
    worker = cell(lambda: log.worker) or {}  # the pool: the worker's line
    return {**cache, "chunk_blocks": worker.get("blocks_per_chunk"), "cpu_chunks": worker.get("host_chunks")}


def lmcache_shape(setup_dir: Path, setup: dict[str, Any]) -> dict[str, int | None]:
    """server_shape of an LMCache server: its pool in chunks (kvtier.records.geometry.lmcache_pool,
    from the configuration it was given and the bytes a token takes, as kvtier's connector logs)."""
    shape = cell(shape_from, setup_dir / "metrics" / "0_start.prom", None)
    chunk_blocks, cpu_chunks = cell(lmcache_pool, setup.get("env") or {}, setup_dir.parent / "run.yaml", setup_dir / "server.log",
                                    shape["block_tokens"])
    return {**shape, "chunk_blocks": chunk_blocks, "cpu_chunks": cpu_chunks}


def predict(run_dir: str | Path, measured: TracedFrame, null_blocks: int = 1, run: LabRun | None = None) -> TracedFrame:
    """The simulator's outcome of every request, given only each server's configuration and the
    request stream as sent (prompt lengths, documents, order, answer length); measured columns beside it.
    A native CPU tier is replayed with vLLM's policy (flavor 'vllm'), LMCache with LMCache 0.5.6's
    (flavor 'lmcache': looked up only on a KV-cache miss, from the first chunk; written through).

    `null_blocks`: vLLM's block pool keeps block 0 as its null block, so the usable KV cache is
    num_gpu_blocks - 1 (BlockPool in vllm/v1/core/block_pool.py). `run`: run_dir as read_lab_run
    read it (read here when not given)."""
    run_dir = Path(run_dir)
    # the run's contract, its servers' KV cache cross-checked (records.geometry)
    run = read_lab_run(run_dir) if run is None else run
    meta, meta_files = read(lambda: run.meta)
    max_tokens = int(meta["max_tokens"])
    frames = []
    for setup, rows in measured.groupby("setup", sort=False):
        conf = (meta.get("setups") or {}).get(setup) or {}
        lmcache = conf.get("tier") == "lmcache"
        traced_shape = lmcache_shape(run_dir / setup, conf) if lmcache else server_shape(run_dir / setup)
        files = {k: sources_of(v) for k, v in traced_shape.items()}
        shape = {k: None if v is None else int(v) for k, v in traced_shape.items()}
        B = int(shape["block_tokens"])  # type: ignore[arg-type]
        step, step_files = read(lambda: None if lmcache else _step_tokens(run_dir / setup / "server.log"))  # noqa: B023
        cache = TieredCache(int(shape["kv_blocks"]) - null_blocks, B, cpu_chunks=shape["cpu_chunks"],  # type: ignore[arg-type]
                            chunk_blocks=shape["chunk_blocks"] or 1, flavor="lmcache" if lmcache else "vllm", step_tokens=step)
        outs = cache.replay(requests_from_rows(rows, B, generated=max_tokens - 1))
        pred = pd.DataFrame([{"pred_gpu_tokens": o.gpu_tokens, "pred_cpu_tokens": o.cpu_tokens,
                              "pred_computed_tokens": o.computed_tokens} for o in outs], index=rows.index)
        # a prediction read the stream as sent, the server's sizes and step, and the answer length
        pred_files = frozenset().union(*(rows.files(c) for c in STREAM_COLUMNS), *files.values(), step_files, meta_files)
        extra = pred.assign(**shape)  # the server's sizes travel with its rows
        frames.append(rows.join(TracedFrame.of(extra, {c: pred_files for c in pred.columns} | files)))
    out = pd.concat(frames)
    return out.derive("agrees", lambda t: (t.gpu_tokens == t.pred_gpu_tokens) & (t.cpu_tokens == t.pred_cpu_tokens)
                      & (t.computed_tokens == t.pred_computed_tokens))


def _step_tokens(server_log: Path) -> int | None:
    """The server's step budget (kvtier.step_budget), touching the log it is read from."""
    touch(server_log)
    return step_tokens_of(server_log)


STREAM_COLUMNS = ("setup", "pass", "phase", "order", "doc", "prompt_tokens")  # what the simulator is given of each request


SETUPS = ("vllm", "native", "native-small")
PASS_NAMES = ("first", "second", "reverse")
SETUP_TITLES = {"vllm": "vLLM alone", "native": "native CPU tier", "native-small": "native CPU tier, pool too small"}


def register_numbers(writer: Any, table: TracedFrame) -> None:
    """lablive.*: per setup the server's sizes, tokens by source per pass (measured and predicted),
    TTFT medians, agreement counts, and every request's outcome for the side-by-side table.
    `table` is predict()'s: measured and predicted tokens and each server's sizes, per request.
    Each number is computed through traced_adder from the table's cells, so it names the files
    of the cells it read: a request's number its requests.csv and its snapshots, a setup's its own."""
    add = traced_adder(writer)
    docs = table[table.phase == "doc"]
    first = docs[docs.setup == docs.setup.iloc[0]]
    first = first[first["pass"] == "first"]
    base = table.iloc[[0]]
    add("lablive.docs", lambda: len(first["doc"]), "count")
    add("lablive.doc_tokens_total", lambda: int(first.prompt_tokens.sum()), "tokens")
    add("lablive.docs_over_cache", lambda: float(first.prompt_tokens.sum()) / (_cell(base, "kv_blocks") * _cell(base, "block_tokens")), "x")
    for setup, g in table.groupby("setup", sort=False):
        p = f"lablive.{setup}."
        shape = g.iloc[[0]]
        add(p + "kv_cache_tokens", lambda: _cell(shape, "kv_blocks") * _cell(shape, "block_tokens"), "tokens")
        add(p + "block_tokens", lambda: _cell(shape, "block_tokens"), "tokens")
        if pd.notna(g["cpu_chunks"].iloc[0]):
            add(p + "cpu_chunks", lambda: _cell(shape, "cpu_chunks"), "count")
            add(p + "chunk_tokens", lambda: _cell(shape, "chunk_blocks") * _cell(shape, "block_tokens"), "tokens")
            add(p + "cpu_tokens_capacity", lambda: _cell(shape, "cpu_chunks") * _cell(shape, "chunk_blocks") * _cell(shape, "block_tokens"),
                "tokens")
        add(p + "requests", lambda: len(g["order"]), "requests")
        add(p + "agree", lambda: int(g.agrees.sum()), "requests")
        add(p + "usage_agrees", lambda: int(g.usage_agrees.sum()), "requests")
        for pass_name, q in g[g.phase == "doc"].groupby("pass", sort=False):
            for col in ("gpu_tokens", "cpu_tokens", "computed_tokens", "pred_gpu_tokens", "pred_cpu_tokens", "pred_computed_tokens"):
                add(p + f"{pass_name}.{col}", lambda: float(q[col].sum()), "tokens")
            add(p + f"{pass_name}.ttft_p50", lambda: float(q.ttft_ms.median()), "ms")
            add(p + f"{pass_name}.ttft_min", lambda: float(q.ttft_ms.min()), "ms", note="the pass's fastest request (its range)")
            add(p + f"{pass_name}.ttft_max", lambda: float(q.ttft_ms.max()), "ms", note="the pass's slowest request")
            add(p + f"{pass_name}.docs_from_cpu", lambda: int((q.cpu_tokens > 0).sum()), "count")
            add(p + f"{pass_name}.docs_hit", lambda: int((q.gpu_tokens + q.cpu_tokens > 0).sum()), "count")
        docs_g = g[g.phase == "doc"]
        for later in ("second", "reverse"):  # within one setup: one server, one time, one load
            add(p + f"{later}.speedup_within",
                lambda: float(docs_g[docs_g["pass"] == "first"].ttft_ms.median()) / float(docs_g[docs_g["pass"] == later].ttft_ms.median()),  # noqa: B023
                "x", note=f"the setup's first-pass median TTFT over its {later}-pass median")
        for i in range(len(g)):
            r, k = g.iloc[[i]], p + f"req.{i}."
            add(k + "order", lambda: int(r["order"].iloc[0]), "count")
            add(k + "pass_index", lambda: PASS_NAMES.index(r["pass"].iloc[0]), "count")
            add(k + "doc", lambda: int(r["doc"].iloc[0]) if pd.notna(r["doc"].iloc[0]) else -1, "count")
            for col in ("gpu_tokens", "cpu_tokens", "computed_tokens", "pred_gpu_tokens", "pred_cpu_tokens", "pred_computed_tokens"):
                add(k + col, lambda: float(r[col].iloc[0]), "tokens")
            add(k + "agrees", lambda: int(r["agrees"].iloc[0]), "count")
            add(k + "ttft", lambda: float(r["ttft_ms"].iloc[0]), "ms")
    add("lablive.requests", lambda: len(table["order"]), "requests")
    add("lablive.agree", lambda: int(table.agrees.sum()), "requests")
    # vLLM alone's first pass over each tier's: no tier serves anything there, so a ratio far from 1
    # is a difference of the servers, printed beside any comparison across setups
    firsts = docs[docs["pass"] == "first"]
    for setup in [s for s in firsts.setup.unique() if s != "vllm"]:
        add(f"lablive.first_over.{setup}",
            lambda: float(firsts[firsts.setup == "vllm"].ttft_ms.median()) / float(firsts[firsts.setup == setup].ttft_ms.median()),  # noqa: B023
            "x", note=f"vLLM alone's first-pass median TTFT over {setup}'s")


def _cell(row: TracedFrame, column: str) -> int:
    """A one-row table's integer cell (read inside a traced computation: it touches its files)."""
    return int(row[column].iloc[0])


def figure(table: pd.DataFrame, out: str | Path) -> None:
    """Per setup, each request's prompt tokens by source as measured (stacked bars), with the
    simulator's prediction of the cached part (GPU, then GPU + CPU) as ticks."""
    from ..render.svg import OKABE_ITO, WIDTH, panels, save_svg

    setups = [s for s in SETUPS if s in set(table.setup)]
    fig, axes = panels(len(setups), 1.7, sharex=True)
    fig.set_size_inches(WIDTH, 1.7 * len(setups) + 1.1)
    axes = [axes] if len(setups) == 1 else list(axes)
    colors = {"gpu_tokens": OKABE_ITO["sky"], "cpu_tokens": OKABE_ITO["orange"], "computed_tokens": "#d9d9d9"}
    labels = {"gpu_tokens": "from the KV cache", "cpu_tokens": "from the CPU tier", "computed_tokens": "computed"}
    for ax, setup in zip(axes, setups):
        g = table[table.setup == setup].reset_index(drop=True)
        x = range(len(g))
        bottom = pd.Series(0.0, index=g.index)
        for col, color in colors.items():
            ax.bar(x, g[col], bottom=bottom, color=color, width=0.8, label=labels[col])
            bottom = bottom + g[col]
        ax.scatter(x, g.pred_gpu_tokens, marker="_", s=40, color=OKABE_ITO["black"], linewidths=1.6, zorder=3,
                   label="simulator: KV cache")
        ax.scatter(x, g.pred_gpu_tokens + g.pred_cpu_tokens, marker="v", s=14, color=OKABE_ITO["vermillion"],
                   linewidths=0, zorder=3, label="simulator: + CPU tier")
        edges = g.index[g["pass"].ne(g["pass"].shift())].tolist()[1:]
        for e in edges:
            ax.axvline(e - 0.5, color="#888", lw=0.6)
        ax.set_title(SETUP_TITLES.get(setup, setup), loc="left")
        ax.set_ylabel("tokens")
    axes[-1].set_xlabel("request in the order sent (first pass, same order,\nreverse, then one check prompt)")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=2, handletextpad=0.3, columnspacing=0.8)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    save_svg(fig, out, "lab_live")
