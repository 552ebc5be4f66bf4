"""The production pipeline on vLLM 0.32 telemetry and on a measured CPU capture (issue 11).

Expected values are derived independently of the pipeline: prometheus_client's own parser for
the counters, plain text searches of the server log for the worker's lines, arithmetic by hand
for the synthetic cases.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from kvtier.errors import RawRecordError
from kvtier.numbers import NumbersWriter
from kvtier.production import analysis as A
from kvtier.production import groundtruth as GT
from kvtier.production.capture import capture_facts
from kvtier.production.correction import from_records
from kvtier.production.pipeline import analyse, ingest
from kvtier.production.promtext import parse_prometheus, read_prometheus
from kvtier.production import setups
from kvtier.production.vllmlog import python_repr
from test_production_correction import _samples as counters  # prometheus_client's parser, not ours

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "raw/production/cpu"
CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())


def cpu_settings() -> dict:
    return setups.settings(CONFIG["production"], "cpu")


# ------------------------------------------------------------------ vLLM 0.32's startup line

def test_dataclass_reprs_in_the_startup_args_are_read_as_dicts():
    text = ("{'model': 'm', 'max_model_len': 12288, 'kv_transfer_config': KVTransferConfig(kv_connector='OffloadingConnector', "
            "kv_port=14579, kv_connector_extra_config={'block_size': 1600, 'cpu_bytes_to_use': 67108864}, "
            "kv_connector_module_path=None, enable_permute_local_kv=False), 'served_model_name': ['tiny'], 'x': -1.5}")
    d = python_repr(text)
    assert d["kv_transfer_config"]["__class__"] == "KVTransferConfig"
    assert d["kv_transfer_config"]["kv_connector_extra_config"] == {"block_size": 1600, "cpu_bytes_to_use": 67108864}
    assert d["kv_transfer_config"]["kv_connector_module_path"] is None and d["x"] == -1.5 and d["served_model_name"] == ["tiny"]


@pytest.mark.parametrize("text", ["{'a': __import__('os').system('true')}", "{'a': Config(1, 2)}", "{'a': x + 1}"])
def test_anything_but_literals_and_keyword_reprs_is_refused(text):
    with pytest.raises((ValueError, SyntaxError, TypeError)):
        python_repr(text)


# ------------------------------------------------------------------ the pinned measured capture

@pytest.fixture(scope="module")
def capture_numbers() -> dict:
    settings = cpu_settings()
    rec = ingest(CAPTURE / "metrics.prom", CAPTURE / "server.log", CAPTURE / "host.yaml", settings)
    runs = sorted(p for p in (REPO / "raw/eviction/cpu").iterdir() if p.is_dir())
    corr = from_records(runs, REPO / "workflow/schemas/eviction-run.schema.yaml",
                        REPO / "workflow/schemas/eviction-request.schema.yaml", "cpu", None)
    w = NumbersWriter(topic="prodcpu", rule="test", inputs=[])
    tables = analyse(rec, None, settings, None, w, corr, capture=(str(CAPTURE / "run.yaml"), str(CAPTURE / "client.jsonl")))
    return {"n": {k: v["value"] for k, v in w.numbers.items()}, "tables": tables, "correction": corr}


def test_the_capture_goes_through_the_same_pipeline_and_its_shares_are_the_counters(capture_numbers):
    n = capture_numbers["n"]
    c = counters(CAPTURE / "metrics.prom")
    by = {dict(k[1])["source"]: v for k, v in c.items() if k[0] == "vllm:prompt_tokens_by_source_total"}
    total = sum(by.values())
    assert n["prodcpu.tokens.share_pool"] == pytest.approx(by["external_kv_transfer"] / total)
    assert n["prodcpu.tokens.share_gpu"] == pytest.approx(by["local_cache_hit"] / total)
    loads = next(v for k, v in c.items() if k[0] == "vllm:kv_offload_load_size_count")
    assert n["prodcpu.restores.count"] == loads
    # the pool from the worker's startup line, read here with a plain split
    line = next(l for l in (CAPTURE / "server.log").read_text().splitlines() if "bytes_per_offloaded_block=" in l)
    kv = dict(part.split("=") for part in line.split("kvtier_cpu_offload: ")[1].split() if "=" in part)
    assert n["prodcpu.pool.blocks"] == int(kv["host_chunks"])
    assert n["prodcpu.pool.block_bytes"] == int(kv["bytes_per_offloaded_block"])
    assert "prodcpu.deferred.count" not in n  # 0.32 exports no deferred lookups


def test_the_restore_correction_of_the_cpu_server_is_zero(capture_numbers):
    """Bytes loaded over bytes per token equal the pool tokens exactly: nothing is moved beyond."""
    c = counters(CAPTURE / "metrics.prom")
    loaded = next(v for k, v in c.items() if k[0] == "vllm:kv_offload_load_bytes_total")
    pool = next(v for k, v in c.items() if k[0] == "vllm:prompt_tokens_by_source_total" and ("source", "external_kv_transfer") in k[1])
    per_token = capture_numbers["n"]["prodcpu.pool.block_bytes"] / capture_numbers["n"]["prodcpu.pool.block_tokens"]
    assert loaded / per_token == pool
    assert capture_numbers["n"]["prodcpu.method.correction_measured"] == 0
    assert capture_numbers["correction"].blocks == 0  # the eviction test's exact counts agree


def test_every_load_job_line_is_one_restore_and_the_method_is_compared_with_it(capture_numbers):
    lines = [l for l in (CAPTURE / "server.log").read_text().splitlines() if "kvtier_cpu_offload: load job " in l]
    n = capture_numbers["n"]
    assert n["prodcpu.method.jobs"] == len(lines) == n["prodcpu.restores.count"]
    tokens = [int(l.split(": ")[-1].split(" blocks")[0]) * 64 for l in lines]  # 64-token server blocks
    assert n["prodcpu.method.median_tokens_true"] == pd.Series(tokens).median()
    assert n["prodcpu.method.largest_true"] == max(tokens)
    m = capture_numbers["tables"]["method"]
    assert m["true_tokens"].sum() == sum(tokens)


def test_the_client_log_must_add_up_to_the_counters(tmp_path):
    shutil.copy(CAPTURE / "run.yaml", tmp_path / "run.yaml")
    rows = [json.loads(l) for l in (CAPTURE / "client.jsonl").read_text().splitlines()]
    (tmp_path / "client.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))  # one line lost
    snap = read_prometheus(CAPTURE / "metrics.prom")
    with pytest.raises(RawRecordError, match=r"client.jsonl: the client log sums to .* finished requests"):
        capture_facts(tmp_path / "run.yaml", tmp_path / "client.jsonl", snap)
    (tmp_path / "client.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    with pytest.raises(RawRecordError, match=rf"client.jsonl:{len(rows) + 1}: not a JSON object"):
        capture_facts(tmp_path / "run.yaml", tmp_path / "client.jsonl", snap)


def test_cached_by_source_must_agree_with_by_source(tmp_path):
    text = (CAPTURE / "metrics.prom").read_text().splitlines()
    i = next(k for k, l in enumerate(text) if l.startswith('vllm:prompt_tokens_cached_by_source_total{') and 'source="host"' in l)
    head, value = text[i].rsplit(" ", 1)
    text[i] = f"{head} {float(value) + 64}"
    (tmp_path / "metrics.prom").write_text("\n".join(text) + "\n")
    for f in ("server.log", "host.yaml"):
        shutil.copy(CAPTURE / f, tmp_path / f)
    with pytest.raises(RawRecordError, match=r'metrics.prom:\d+: vllm:prompt_tokens_cached_by_source_total\{source="host"\}'):
        ingest(tmp_path / "metrics.prom", tmp_path / "server.log", tmp_path / "host.yaml", cpu_settings())


# ------------------------------------------------------------------ synthetic: the matching and the errors

GEO = A.PoolGeometry(block_tokens=100, bytes_per_block=1000, blocks=8, server_block_tokens=10)  # 10 B a token


def test_jobs_are_matched_to_reports_in_order_and_the_even_split_error_is_measured():
    # two reports: one load of 30 tokens; then two loads of 10 and 50 tokens (method: 30 each)
    restores = pd.DataFrame({"line": [5, 9, 9], "shared_by": [1, 2, 2], "tokens": [30.0, 30.0, 30.0],
                             "bytes": [300.0, 300.0, 300.0]})
    jobs = pd.DataFrame({"line": [3, 7, 8], "job": [1, 2, 3], "blocks": [3, 1, 5], "bytes": [300, 100, 500],
                         "seconds": [0.1, 0.1, 0.1]})
    m = GT.match(jobs, restores, GEO, "server.log")
    assert m["true_tokens"].tolist() == [30, 10, 50]
    r = GT.compare(m, jobs, GEO, pool_tokens=90, counter_loads=3, large_tokens=40)
    assert r["median_abs_error"] == pytest.approx(0.4)      # errors 0, 2.0, 0.4
    assert r["max_abs_error"] == pytest.approx(2.0)
    assert r["share_within_10pct"] == pytest.approx(1 / 3)
    assert r["n_at_least_large_true"] == 1 and r["n_at_least_large_method"] == 0
    assert r["correction_measured"] == 0 and r["share_partial_blocks"] == 1.0


def test_a_report_whose_bytes_differ_from_its_jobs_is_refused():
    restores = pd.DataFrame({"line": [5, 9], "shared_by": [1, 1], "tokens": [30.0, 30.0], "bytes": [300.0, 300.0]})
    jobs = pd.DataFrame({"line": [3, 7], "job": [1, 2], "blocks": [3, 4], "bytes": [300, 400], "seconds": [0.1, 0.1]})
    with pytest.raises(RawRecordError, match=r"server.log:9: the report at this line moved 300 bytes but the load jobs"):
        GT.match(jobs, restores, GEO, "server.log")


def test_a_job_line_in_another_format_is_refused(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("x\n(Worker pid=1) INFO 12-01 10:00:00 [worker.py:1] kvtier_cpu_offload: load job 3: 12 blocks\n")
    with pytest.raises(RawRecordError, match=r"server.log:2: a kvtier_cpu_offload load-job line not in the format"):
        GT.load_jobs(log)


def test_without_config_info_or_the_worker_line_the_pool_geometry_is_refused(tmp_path):
    snap = parse_prometheus('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="64"} 1\n', "m.prom")

    class NoFacts:
        path = "server.log"
        segments: list = []

        def facts(self):
            return {}

    with pytest.raises(RawRecordError, match=r"m.prom: no pool geometry: neither vllm:kv_offload_config_info"):
        A.pool_geometry(snap, NoFacts())


def test_the_capture_keeps_what_it_sent_in_the_servers_blocks():
    """sent_blocks.npz: one chain per answered request, a full block per 64 tokens, the client's counts."""
    from kvtier.replay import sent

    chains = sent.read(CAPTURE / "sent_blocks.npz", CAPTURE / "client.jsonl")
    rows = [json.loads(l) for l in (CAPTURE / "client.jsonl").read_text().splitlines()]
    assert len(chains) == len(rows)
    for r in rows[:200]:
        tokens, blocks = chains[(r["session"], r["index"])]
        assert tokens == r["prompt_tokens_sent"] and len(blocks) == tokens // 64
    # a session's next turn extends its previous prompt: their chains share a prefix
    first, second = chains[(0, 0)][1], chains[(0, 1)][1]
    assert (second[: len(first) - 1] == first[: len(first) - 1]).all()


def test_a_sent_record_that_disagrees_with_the_client_log_is_refused(tmp_path):
    from kvtier.replay import sent

    rows = [json.loads(l) for l in (CAPTURE / "client.jsonl").read_text().splitlines()]
    rows[3]["prompt_tokens_sent"] += 1
    (tmp_path / "client.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RawRecordError, match=r"client.jsonl:4: session \d+ turn \d+: sent_blocks.npz has \d+ tokens, the client sent"):
        sent.read(CAPTURE / "sent_blocks.npz", tmp_path / "client.jsonl")


def test_a_log_without_any_restore_gets_a_clear_error():
    """Before: 'attempt to get argmax of an empty sequence' from pandas."""
    from kvtier.production.logsummary import LogSummary

    log = LogSummary("server.log", [], "flat")  # its loads table is empty
    with pytest.raises(RawRecordError, match=r"server.log: no report shows a load from the pool"):
        A.size_restores(log, GEO, 0.0)
