"""The measured curve's analysis (kvtier.production.curve), the bench-shaped results JSON, and runs
that survive a failed request. Small runs written here (the sweep tests' fixture), the committed
capture with a refused request added, and vLLM's own benchmark code where its venv is present."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvtier.errors import RawRecordError
from kvtier.numbers import NumbersWriter
from kvtier.production import benchjson, curve, sweep
from kvtier.production.capture import capture_facts
from kvtier.production.promtext import read_prometheus
from kvtier.replay.monitor import HOST_FIELDS, HOST_SERIES, METRICS_SERIES

sys.path.insert(0, str(Path(__file__).parent))
from test_sweep import trace, write_run  # noqa: E402,F401  (the fixture is used by name)

REPO = Path(__file__).resolve().parents[1]
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
REFUSED = {"session": 9, "index": 0, "status": "failed", "sent_s": 0.5, "prompt_tokens_sent": 20000, "max_tokens": 2,
           "at_s": 0.5, "http_status": 400, "error": "POST /v1/completions: HTTP 400: maximum context length is 12288 tokens"}


def fixed_run(d: Path, tgz: Path, digest: str = "ab" * 32, load: float = 3.0, failed: bool = False) -> Path:
    """A sweep-test run made a --fixed-order run: the stream's digest, a load series, chunk times."""
    write_run(d, tgz)
    meta = yaml.safe_load((d / "run.yaml").read_text())
    meta["stream"] = {"mode": "fixed-order", "in_flight": 1, "count": None, "requests": 4, "digest": digest}
    meta["sessions"] = 3
    (d / "run.yaml").write_text(yaml.safe_dump(meta))
    lines = [json.loads(l) for l in (d / "client.jsonl").read_text().splitlines()]
    for r in lines:
        r.update(completion_tokens=2, chunk_s=[0.1, 0.15, 0.2])
    if failed:
        lines.insert(1, REFUSED)
    (d / "client.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (d / "host.yaml").write_text("host: {cpus: 2}\n")  # the load rule's threshold is per CPU
    rows = [",".join(HOST_FIELDS)] + [f"{2 * i},{load},{load},{load},0.9,0.01" for i in range(5)]
    (d / HOST_SERIES).write_text("\n".join(rows) + "\n")
    (d / METRICS_SERIES).write_bytes(b"")
    return d


def test_a_run_with_a_refused_request_is_read_and_the_failure_counted(tmp_path: Path, trace: Path):
    run = fixed_run(tmp_path / "run", trace, failed=True)
    r = sweep.read_run(run)  # the counters are checked against the answered requests only
    assert r.requests.attrs["failed"] == 1 and r.requests.attrs["failed_lines"] == [2] and len(r.requests) == 4
    res = benchjson.result(run)
    assert res["failed"] == 1 and res["completed"] == 4 and res["num_prompts"] == 5
    assert res["kvtier"]["failed_reasons"][0]["http_status"] == 400


def test_a_capture_with_a_refused_request_rebuilds_and_prints_the_count(tmp_path: Path):
    """The committed capture, one request over max_model_len added as kvtier replay logs it: the
    sums still equal the counters (the server never counted the refused prompt) and the count of
    failed requests is what the production appendix prints (prodcpu.capture.failed)."""
    cap = REPO / "raw" / "production" / "cpu"
    shutil.copy(cap / "run.yaml", tmp_path / "run.yaml")
    lines = (cap / "client.jsonl").read_text().splitlines()
    (tmp_path / "client.jsonl").write_text("\n".join(lines[:5] + [json.dumps(REFUSED)] + lines[5:]) + "\n")
    snap = read_prometheus(cap / "metrics.prom")
    base = capture_facts(cap / "run.yaml", cap / "client.jsonl", snap)
    facts = capture_facts(tmp_path / "run.yaml", tmp_path / "client.jsonl", snap)
    assert facts["failed"] == base["failed"] + 1 and facts["answered"] == base["answered"]
    template = (REPO / "paper/templates/sections/appendix_production_cpu.md.j2").read_text()
    assert "p.capture.failed | count" in template  # the count the note prints
    bad = dict(REFUSED)
    del bad["error"]
    (tmp_path / "client.jsonl").write_text("\n".join(lines + [json.dumps(bad)]) + "\n")
    with pytest.raises(RawRecordError, match=rf"client.jsonl:{len(lines) + 1}: client record lacks error"):
        capture_facts(tmp_path / "run.yaml", tmp_path / "client.jsonl", snap)


def test_runs_of_different_streams_are_refused(tmp_path: Path, trace: Path):
    a = fixed_run(tmp_path / "a", trace)
    b = fixed_run(tmp_path / "b", trace, digest="cd" * 32)
    with pytest.raises(RawRecordError, match=r"b/run.yaml: sent stream cdcd.*did not send the same requests"):
        curve.analyse([a, b], 8.0, 0.1)
    meta = yaml.safe_load((b / "run.yaml").read_text())
    del meta["stream"]
    (b / "run.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(RawRecordError, match="not a kvtier replay --fixed-order run"):
        curve.analyse([a, b], 8.0, 0.1)


def test_loaded_runs_are_flagged_and_kept_out_of_the_medians(tmp_path: Path, trace: Path):
    # 4 per CPU on the fixture's two CPUs: a median load above 8 is flagged (the one load rule)
    runs = curve.analyse([fixed_run(tmp_path / f"r{i}", trace, load=load) for i, load in enumerate((3.0, 9.0, 4.0))], 4.0, 0.1)
    assert [x.flagged for x in runs] == [False, True, False]
    w = NumbersWriter(topic="curve", rule="test", inputs=[])
    curve.register_numbers(w, runs, 4.0, 0.1)
    n = {k: v["value"] for k, v in w.numbers.items()}
    assert n["curve.flagged"] == 1 and n["curve.size.0.kept"] == 2 and n["curve.size.0.runs"] == 3
    assert n["curve.load1_max"] == 9.0 and n["curve.worst_spread_points"] == 0.0
    assert n["curve.size.0.measured.share_gpu.median"] == pytest.approx(64 / 640)  # the fixture's counters
    # the registry's latencies are the results JSON's, field for field
    for j, x in enumerate(runs):
        for m in ("ttft", "tpot", "itl"):
            for p in benchjson.PERCENTILES:
                assert n[f"curve.size.0.run.{j}.p{p}_{m}_ms"] == x.bench[f"p{p}_{m}_ms"]


def test_the_results_json_is_what_vllms_benchmark_computes(tmp_path: Path, trace: Path):
    """vLLM 0.32's own calculate_metrics (vllm/benchmarks/serve.py), fed the run's requests as its
    request function would have recorded them (RequestFuncOutput: ttft, itl, latency), must give
    the values of the shared fields; and every shared name is one its result JSON uses."""
    if not VLLM_PY.exists():
        pytest.skip("no vLLM venv (.venv-vllm) beside the repository")
    run = fixed_run(tmp_path / "run", trace)
    lines = [json.loads(l) for l in (run / "client.jsonl").read_text().splitlines()]
    lines[0]["chunk_s"] = [0.05, 0.3, 0.31]
    (run / "client.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    ours = benchjson.result(run)
    code = (
        "import json, sys\n"
        "from vllm.benchmarks.serve import calculate_metrics\n"
        "from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput\n"
        "rows, dur = json.load(sys.stdin)\n"
        "outs = [RequestFuncOutput(success=True, ttft=r['chunk_s'][0], latency=r['chunk_s'][-1], output_tokens=r['completion_tokens'],\n"
        "        itl=[b - a for a, b in zip(r['chunk_s'], r['chunk_s'][1:])], prompt_len=r['usage_prompt_tokens']) for r in rows]\n"
        "m, lens = calculate_metrics([], outs, dur, None, [50, 90, 99], {})\n"
        "out = {k: v for k, v in vars(m).items() if not k.startswith('percentiles_')}\n"
        "for k, v in vars(m).items():\n"
        "    if k.startswith('percentiles_'):\n"
        "        out.update({'p%d_%s' % (p, k[len('percentiles_'):]): float(x) for p, x in v})\n"
        "print(json.dumps({k: float(v) for k, v in out.items()}))\n")
    got = subprocess.run([str(VLLM_PY), "-c", code], input=json.dumps([lines, ours["duration"]]), capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    theirs = json.loads(got.stdout.strip().splitlines()[-1])
    for m in benchjson.METRICS:
        for stat in ("mean", "median", "std", *[f"p{p}" for p in benchjson.PERCENTILES]):
            assert ours[f"{stat}_{m}_ms"] == pytest.approx(theirs[f"{stat}_{m}_ms"]), (stat, m)
    for k in ("completed", "failed", "request_throughput", "output_throughput", "total_token_throughput"):
        assert ours[k] == pytest.approx(theirs[k]), k
    assert ours["total_input_tokens"] == theirs["total_input"] and ours["total_output_tokens"] == theirs["total_output"]
    src = (VLLM_PY.parent.parent / "lib/python3.11/site-packages/vllm/benchmarks/serve.py").read_text()
    for name in benchjson.SHARED:
        stem = name.split("_", 1)[1] if name.startswith(("mean_", "median_", "std_", "p50_", "p90_", "p99_")) else None
        assert f'"{name}"' in src or (stem and f'"{stem.rsplit("_", 1)[0]}"' in src), name


def test_the_results_json_matches_what_the_note_prints(built_repo: Path):
    """After the workflow: each size's TTFT medians in the rendered note are the medians of its kept
    runs' results JSON (results/bench/curve_cpu), as the renderer formats them."""
    bench, note = built_repo / "results/bench/curve_cpu", built_repo / "paper/validation-pool.md"  # Table V7
    assert bench.is_dir() and note.is_file(), "the default build writes the curve's results JSON and the validation page's part two"
    import numpy as np
    import pandas as pd

    from kvtier.render.formats import ms

    tidy = pd.read_csv(built_repo / "results/tidy/curve_cpu.csv")
    text = re.sub("[●△◇◈]", "", note.read_text())  # the class marks after each number (kvtier.classes)
    for size, g in tidy.groupby("size"):
        kept = g[~g.flagged] if (~g.flagged).any() else g
        js = [json.loads((bench / f"{Path(r).name}.json").read_text()) for r in kept.run]
        for field in ("p50_ttft_ms", "p99_ttft_ms"):
            med = float(np.median([j[field] for j in js]))
            assert f"{ms(med, 'ms', 0)} ({ms(min(j[field] for j in js), 'ms', 0)}–{ms(max(j[field] for j in js), 'ms', 0)})" in text, (size, field)
