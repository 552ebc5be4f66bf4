"""Records -> Table 1 and evict.* numbers; bad or doubtful records are caught, not counted.

Expected values are the note's (Results, Table 1) and the consistency notes of DESIGN.md:
A 44.62 s cold, 1.24 s hit, 1.37 s restored; C 12.37 s, 0.72 s, 0.78 s; one block of C is
43,940,327 bytes and the restore on C moves 131 blocks for 127 served.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.eviction import analysis
from kvtier.eviction.records import REQUEST_SCHEMA, RUN_SCHEMA, read_run
from kvtier.numbers import NumbersWriter
from kvtier.replica import eviction as replica

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def replica_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eviction")
    for spec in replica.SPECS:
        replica.write_run(out, spec)
    return out


def numbers(root: Path) -> dict:
    reqs, runs = analysis.load(sorted(root.glob("*/*")), RUN_SCHEMA, REQUEST_SCHEMA)
    w = NumbersWriter("evict", "test", [])
    analysis.register_numbers(w, reqs, runs, ["A", "C"], None)
    return {k: v["value"] for k, v in w.numbers.items()}


def test_note_numbers(replica_dir):
    n = numbers(replica_dir)
    assert round(n["evict.A.ttft.cold"], 2) == 44.62 and round(n["evict.C.ttft.cold"], 2) == 12.37
    assert round(n["evict.A.ttft.restore"], 2) == 1.37 and round(n["evict.C.ttft.restore"], 2) == 0.78
    assert round(n["evict.A.ratio_cold_restore"]) == 33 and round(n["evict.C.ratio_cold_restore"]) == 16
    assert round(n["evict.A.restore_minus_hit"], 2) == 0.13 and round(n["evict.C.restore_minus_hit"], 2) == 0.06
    assert n["evict.C.restore_bytes"] == 131 * 43_940_327
    assert (n["evict.C.blocks_moved"], n["evict.C.blocks_served"]) == (131, 127)
    assert round(n["evict.A.restore_bytes"] / 1e9, 1) == 6.5
    assert (n["evict.A.restored_requests"], n["evict.C.restored_requests"], n["evict.restored_with_codes"]) == (2, 1, 3)
    assert n["evict.excluded_runs"] == 1 and n["evict.runs_per_setup"] == 1
    assert n["evict.A.ram_pool"] == 100 * 2**30


def test_replica_in_raw_is_what_the_generator_writes(replica_dir):
    for spec in replica.SPECS:
        ours = REPO / "raw" / "eviction" / spec.setup / spec.run
        for f in sorted((replica_dir / spec.setup / spec.run).rglob("*")):
            if f.is_file():
                assert (ours / f.relative_to(replica_dir / spec.setup / spec.run)).read_bytes() == f.read_bytes(), f


def _copy(replica_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "eviction"
    shutil.copytree(replica_dir, dst)
    return dst


def _rewrite(path: Path, seq: int, **changes) -> None:
    lines = path.read_text().splitlines()
    rec = json.loads(lines[seq])
    rec.update(changes)
    lines[seq] = json.dumps(rec, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")


def test_cold_read_without_codes_excludes_the_run(replica_dir, tmp_path):
    root = _copy(replica_dir, tmp_path)
    run = root / "C" / replica.SPECS[2].run
    _rewrite(run / "requests.jsonl", 0, answer="I could not find them.")  # codes_found left as recorded: recomputed
    with pytest.raises(RawRecordError, match=r"no valid run .* \['C'\]"):
        numbers(root)


def test_restore_found_in_gpu_memory_is_not_evicted(replica_dir, tmp_path):
    root = _copy(replica_dir, tmp_path)
    run = root / "C" / replica.SPECS[2].run
    after = next((run / "metrics").glob("*restore1_after.prom"))
    text = after.read_text()
    before = next((run / "metrics").glob("*restore1_before.prom")).read_text().splitlines()

    def by_source(lines: list[str], source: str) -> float:
        return float(next(ln for ln in lines if ln.startswith("vllm:prompt_tokens_by_source_total")
                          and f'source="{source}"' in ln).rsplit(" ", 1)[1])
    total = float(next(ln for ln in text.splitlines() if ln.startswith("vllm:prompt_tokens_total{")).rsplit(" ", 1)[1])
    # the restore's prompt from the KV cache: no pool tokens, the rest computed (the sources add up
    # to the prompt tokens, check_prompt_sources)
    new = {"local_cache_hit": by_source(before, "local_cache_hit") + 204_000,
           "external_kv_transfer": by_source(before, "external_kv_transfer")}
    new["local_compute"] = total - new["local_cache_hit"] - new["external_kv_transfer"]
    text = "\n".join(next((f"{ln.rsplit(' ', 1)[0]} {v}" for src, v in new.items() if f'source="{src}"' in ln), ln)
                     if ln.startswith("vllm:prompt_tokens_by_source_total{") else ln for ln in text.splitlines()) + "\n"
    after.write_text(text)
    reqs, runs = analysis.load(sorted(root.glob("*/*")), RUN_SCHEMA, REQUEST_SCHEMA)
    assert not runs.set_index("setup").loc["C"].evicted


def test_broken_request_line_is_named(replica_dir, tmp_path):
    root = _copy(replica_dir, tmp_path)
    run = root / "A" / replica.SPECS[0].run
    lines = (run / "requests.jsonl").read_text().splitlines()
    lines[3] = lines[3][:-10]
    (run / "requests.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=r"requests\.jsonl:4: not JSON"):
        read_run(run)


def test_schema_violation_is_named(replica_dir, tmp_path):
    root = _copy(replica_dir, tmp_path)
    run = root / "A" / replica.SPECS[0].run
    _rewrite(run / "requests.jsonl", 1, ttft_s=-1.0)
    with pytest.raises(RawRecordError, match=r"requests\.jsonl:2: field ttft_s"):
        read_run(run)


def test_missing_snapshot_is_named(replica_dir, tmp_path):
    root = _copy(replica_dir, tmp_path)
    run = root / "A" / replica.SPECS[0].run
    next((run / "metrics").glob("000_cold_after.prom")).unlink()
    with pytest.raises(RawRecordError, match=r"requests\.jsonl:1: metrics_after names metrics/000_cold_after\.prom"):
        read_run(run)


def test_measured_cpu_runs_in_raw_restore_from_the_pool_and_the_control_recomputes():
    """raw/eviction/cpu: vLLM's CPU build with the native tier, and the same cycles without it."""
    runs = sorted(d for d in (REPO / "raw" / "eviction" / "cpu").glob("*") if (d / "run.yaml").exists())
    reqs, table = analysis.load(runs, RUN_SCHEMA, REQUEST_SCHEMA)
    latest = table[table.complete].sort_values("run").groupby("tier").tail(1).set_index("tier")
    assert set(latest.index) >= {"native", "none"} and (latest.provenance == "measured").all()
    assert (latest.cycles >= 5).all() and latest.evicted.all()
    native = reqs[(reqs.run == latest.loc["native", "run"]) & (reqs.phase == "restore")]
    control = reqs[(reqs.run == latest.loc["none", "run"]) & (reqs.phase == "restore")]
    # every restore took tokens from the pool and the logprob check held; without a pool all is computed
    assert (native.pool_tokens > 0).all() and native.logprob_passed.all()
    assert (native.gpu_hit_tokens <= 0.1 * native.prompt_tokens).all()
    assert (control.pool_tokens == 0).all() and (control.computed_tokens >= 0.9 * control.prompt_tokens).all()
