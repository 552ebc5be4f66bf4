"""Issue 25, item 1: the lab run is one records kind, written by one writer (kvtier.records.labwriter)
and read by one reader (kvtier.records.labrun). A run written with the writer reads back equal; the
live capture (kvtier.lab.cyclic, against a stand-in server) writes through the same writer; the
replica generator, rerun into a scratch folder, writes the pinned bytes (tests/test_lab_replica.py
and the command line here); its geometry comes from records.geometry, cross-checked."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvtier.errors import RawRecordError
from kvtier.lab import cyclic
from kvtier.manifest import read_manifest
from kvtier.records import labwriter as W
from kvtier.records.labrun import read_lab_run
from kvtier.records.touch import scope
from kvtier.serving.client import StreamResult

REPO = Path(__file__).resolve().parent.parent
BUCKETS = (0.01, 0.1, 1.0, 10.0)
BLOCK, BLOCKS = 16, 64


def _rows() -> list[W.RequestRow]:
    rows, t = [], 0.0
    for setup in ("vllm", "lmcache"):
        for p in W.PASSES:
            order = [0, 1, 2] if p != "reverse" else [2, 1, 0]
            for i, d in enumerate(order, 1):
                cached = 0 if p == "first" else (256 if setup == "lmcache" else 0)
                rows.append(W.RequestRow(setup, p, "doc", i, d, 300, cached, t, 41.256 + i, 80.5 + i, 4))
                t += 0.1234567
        rows.append(W.RequestRow(setup, "reverse", "check", 4, None, 20, 0, t, 9.0, 12.0, 4))
    return rows


def _write(root: Path) -> tuple[list[W.RequestRow], dict]:
    rows = _rows()
    run = {"record": "lab cyclic-access measurement", "documents": {"count": 3, "tokens": 300}, "passes": list(W.PASSES),
           "concurrency": 1, "max_tokens": 4, "versions": {"vllm": "0.24.0"},
           "setups": {"vllm": {"args": ["--block-size", str(BLOCK)]},
                      "lmcache": {"env": {"LMCACHE_CHUNK_SIZE": "256", "LMCACHE_MAX_LOCAL_CPU_SIZE": "0.5"}}}}
    W.write_run(root, run)
    W.write_requests(root / "requests.csv", rows)
    for setup in run["setups"]:
        mine = [r for r in rows if r.setup == setup]
        for k in range(len(W.SNAPSHOTS)):
            served = [W.Served(r.prompt_tokens, 0, r.cached_tokens, 4, r.ttft_ms / 1000) for r in mine
                      if W.PASSES.index(r.pass_) < k]
            W.write_snapshot(W.snapshot_path(root / setup, k), W.vllm_metrics_text(
                served, model_name="m", block_size=BLOCK, num_gpu_blocks=BLOCKS, created=1.7e9, ttft_buckets=BUCKETS,
                connector=setup == "lmcache"))
        lines = ["INFO [kv_cache_utils.py:1087] " + W.kv_cache_size_line(BLOCK * BLOCKS)]
        if setup == "lmcache":
            lines += [W.lmcache_line("(EngineCore pid=1) ", "2026-10-14 09:40:38,538", "INFO",
                                     W.lmcache_lookup(f"r{i}", r.prompt_tokens, 0, r.cached_tokens, r.cached_tokens), "a.py:1")
                      for i, r in enumerate(mine)]
            lines.append(W.lmcache_line("(EngineCore pid=1) ", "2026-10-14 09:40:39,000", "INFO",
                                        W.lmcache_retrieved("r3", 256, 300, 300, 0.0073, 8.25), "cache_engine.py:607"))
            lines.append(W.lmcache_line("(EngineCore pid=1) ", "2026-10-14 09:40:39,100", "WARNING",
                                        W.lmcache_stored("r0", 256, 300, 0.0073, 11.0, 8.8, 2.2), "cache_engine.py:359"))
        W.write_log(root / setup, lines)
    return rows, run


def test_a_run_written_by_the_writer_reads_back_equal(tmp_path: Path) -> None:
    rows, run = _write(tmp_path)
    rec = read_lab_run(tmp_path)
    assert rec.meta == run and rec.setup_names == ("vllm", "lmcache")
    req = rec.requests
    assert len(req) == len(rows)
    for got, want in zip(req.to_dict("records"), rows):
        assert (got["setup"], got["pass"], got["phase"], got["order"], got["prompt_tokens"], got["cached_tokens"],
                got["output_tokens"]) == (want.setup, want.pass_, want.phase, want.order, want.prompt_tokens,
                                          want.cached_tokens, want.output_tokens)
        assert (None if pd.isna(got["doc"]) else int(got["doc"])) == want.doc
        assert got["start_s"] == round(want.start_s, 4) and got["ttft_ms"] == round(want.ttft_ms, 2)
        assert got["e2e_ms"] == round(want.e2e_ms, 2)
    for setup in ("vllm", "lmcache"):
        s = rec.setup(setup)
        assert (s.block_tokens, s.kv_blocks, s.kv_cache_tokens) == (BLOCK, BLOCKS, BLOCK * BLOCKS)
        for p in W.PASSES:
            mine = [r for r in rows if r.setup == setup and r.pass_ == p]
            c = s.pass_counters(p)
            assert c["prompt_tokens"] == sum(r.prompt_tokens for r in mine) and c["requests"] == len(mine)
            assert c["external_hits"] == (sum(r.cached_tokens for r in mine) if setup == "lmcache" else 0)
    lm = rec.setup("lmcache").lmcache_lines
    assert list(lm["kind"]) == ["lookup"] * 10 + ["retrieve", "store"]
    assert list(lm.loc[lm.kind.eq("lookup"), "hit"]) == [r.cached_tokens for r in rows if r.setup == "lmcache"]
    assert (int(lm.tokens.iloc[10]), int(lm.required.iloc[10]), float(lm.ms.iloc[10])) == (256, 300, 8.25)
    assert rec.setup("vllm").lmcache_lines.empty
    assert set(rec.hashes) == {p.as_posix() for p in tmp_path.rglob("*") if p.is_file()}


def test_each_value_touches_the_file_it_comes_from(tmp_path: Path) -> None:
    _write(tmp_path)
    rec = read_lab_run(tmp_path)
    with scope() as seen:
        rec.setup("lmcache").block_tokens
    assert seen == {(tmp_path / "lmcache/metrics/0_start.prom").as_posix()}
    with scope() as seen:
        rec.setup("vllm").pass_counters("second")
    assert seen == {(tmp_path / f"vllm/metrics/{n}.prom").as_posix() for n in ("1_first", "2_second")}
    with scope() as seen:
        rec.documents, rec.setup("vllm").kv_cache_tokens
    assert seen == {(tmp_path / "run.yaml").as_posix(), (tmp_path / "vllm/server.log").as_posix()}


@pytest.mark.parametrize(("edit", "error"), [
    (lambda d: _sub(d / "vllm/server.log", "1,024 tokens", "1,040 tokens"), r"vllm/server\.log:1: KV cache size 1,040"),
    (lambda d: _sub(d / "lmcache/metrics/2_second.prom", 'num_gpu_blocks="64"', 'num_gpu_blocks="65"'), "not one server"),
    (lambda d: _sub(d / "run.yaml", "tokens: 300", "tokens: 301"), r"requests\.csv: document prompts are not all 301"),
    (lambda d: _sub(d / "run.yaml", "count: 3", "count: 4"), "expected each of 4 documents once"),
    # the prompt tokens down, with the computed tokens that add up to them (check_prompt_sources)
    (lambda d: [_sub(d / "vllm/metrics/3_reverse.prom", f"vllm:{name}{{engine=\"0\",model_name=\"m\"{src}}} 2720.0",
                     f"vllm:{name}{{engine=\"0\",model_name=\"m\"{src}}} 1.0")
                for name, src in (("prompt_tokens_total", ""), ("prompt_tokens_by_source_total", ',source="local_compute"'))],
     r"3_reverse\.prom: a counter went down"),
])
def test_the_records_contract_runs_in_the_reader(tmp_path: Path, edit, error: str) -> None:
    _write(tmp_path)
    edit(tmp_path)
    with pytest.raises(RawRecordError, match=error):
        read_lab_run(tmp_path)


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


class _Server:
    """A stand-in for a live server: answers with usage, /metrics from the writer's exposition."""

    def __init__(self) -> None:
        self.served: list[W.Served] = []

    def stream_completion(self, text: str, max_tokens: int, **_: object) -> StreamResult:
        n = len(text.split())
        self.served.append(W.Served(n, 0, 0, max_tokens, 0.05))
        return StreamResult(0.05, 0.05, 0.04, 0.0612345, "x", "length", {"prompt_tokens": n, "completion_tokens": max_tokens})

    def metrics_text(self) -> str:
        return W.vllm_metrics_text(self.served, model_name="tiny", block_size=BLOCK, num_gpu_blocks=BLOCKS, created=1.7e9,
                                   ttft_buckets=BUCKETS, connector=False)


def test_the_live_capture_writes_what_the_reader_reads(tmp_path: Path) -> None:
    from kvtier.serving import ServerSpec

    plan = cyclic.CyclicPlan(docs=3, doc_words=40, max_tokens=4, setups=["vllm"], per_request_metrics=True)
    server = _Server()
    rows = cyclic.run_passes(server, "vllm", plan, cyclic.documents(plan), tmp_path / "vllm" / "metrics", progress=False)
    W.write_log(tmp_path / "vllm", ["INFO " + W.kv_cache_size_line(BLOCK * BLOCKS, "CPU")])
    spec = ServerSpec(model="tiny-model", served_name="tiny", tier="none", platform="cpu", vllm_bin="/nonexistent/vllm")
    cyclic.write_run(tmp_path, plan, {"vllm": spec}, rows, {"versions": {"vllm": "0.32.0"}})
    rec = read_lab_run(tmp_path)
    req = rec.requests
    assert list(req["metrics_after"]) == [r.metrics_after for r in rows] and len(rows) == 3 * 3 + 1
    assert list(req["prompt_tokens"]) == [r.prompt_tokens for r in rows] and rec.doc_tokens == 42
    assert all(rec.setup("vllm").request_snapshot(r.metrics_after).is_file() for r in rows)
    assert rec.setup("vllm").pass_counters("reverse")["requests"] == 4 and rec.setup("vllm").kv_cache_tokens == 1024


def test_the_replica_command_regenerates_the_pinned_bytes(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "kvtier", "replica", "lab"]
    assert "--out" in subprocess.run([*cli, "--help"], capture_output=True, text=True, check=True, cwd=REPO).stdout
    out = tmp_path / "cyclic"
    subprocess.run([*cli, "--out", str(out), "--no-pin"], capture_output=True, text=True, check=True, cwd=REPO)
    pins = {p: e for p, e in read_manifest(REPO / "raw" / "MANIFEST.tsv").items() if p.startswith("raw/lab/cyclic/")}
    written = {"raw/lab/cyclic/" + f.relative_to(out).as_posix(): f for f in out.rglob("*") if f.is_file()}
    assert set(written) == set(pins)
    for rel, f in written.items():
        assert hashlib.sha256(f.read_bytes()).hexdigest() == pins[rel].sha256, rel
    shutil.rmtree(out)
