"""Issue 13, item 1: the restore correction comes from the eviction records; Figure 1b's top
edge from the data and max_model_len."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.coldread import model_from_csv
from kvtier.errors import RawRecordError
from kvtier.eviction.analysis import load
from kvtier.eviction.records import find_runs
from kvtier.production.correction import derive
from kvtier.production.outputs import figure_edges, restore_histogram

REPO = Path(__file__).resolve().parent.parent
RUN_C = "raw/eviction/C/2026-10-16T20-15-44Z"


def _load(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    files = [str(p) for p in root.rglob("run.yaml")]
    return load(find_runs(files), REPO / "workflow/schemas/eviction-run.schema.yaml",
                REPO / "workflow/schemas/eviction-request.schema.yaml")


def _samples(path: Path) -> dict[tuple[str, tuple], float]:
    """The snapshot through prometheus_client's own parser, not ours."""
    out = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _independent_extra(run: Path) -> int:
    """Blocks moved minus blocks served in the restore, from the two raw snapshots alone."""
    before, after = (_samples(run / f"metrics/015_restore1_{w}.prom") for w in ("before", "after"))

    def get(d: dict, name: str, **labels: str) -> float:
        return next(v for (n, ls), v in d.items() if n == name and all((k, v2) in ls for k, v2 in labels.items()))

    info = next(ls for (n, ls) in after if n == "vllm:kv_offload_config_info")
    info = dict(info)
    bytes_per_block = float(info["cpu_kv_cache_size_bytes"]) / float(info["cpu_num_chunks"])
    tokens_per_block = float(info["cpu_kv_cache_size_tokens"]) / float(info["cpu_num_chunks"])
    moved = (get(after, "vllm:kv_offload_load_bytes_total") - get(before, "vllm:kv_offload_load_bytes_total")) / bytes_per_block
    src = "vllm:prompt_tokens_by_source_total"
    served = (get(after, src, source="external_kv_transfer") - get(before, src, source="external_kv_transfer")) / tokens_per_block
    return round(moved) - int(served)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "raw" / "eviction"
    shutil.copytree(REPO / "raw" / "eviction", root)
    return root


def test_correction_is_derived_from_the_eviction_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    requests, runs = _load(Path("raw/eviction"))
    c = derive(requests, runs, "C", None)
    assert c.blocks == c.derived == _independent_extra(REPO / RUN_C) and not c.overridden
    assert all(f.startswith(RUN_C + "/") for f in c.files)  # only setup C's valid run
    assert f"{RUN_C}/metrics/015_restore1_after.prom" in c.files

    # one more block loaded in the restore: the correction follows the record
    after = root / "C" / "2026-10-16T20-15-44Z" / "metrics" / "015_restore1_after.prom"
    info = dict(next(ls for (n, ls) in _samples(after) if n == "vllm:kv_offload_config_info"))
    block = float(info["cpu_kv_cache_size_bytes"]) / float(info["cpu_num_chunks"])
    text = after.read_text()
    old = next(ln for ln in text.splitlines() if ln.startswith("vllm:kv_offload_load_bytes_total"))
    name, value = old.rsplit(" ", 1)
    after.write_text(text.replace(old, f"{name} {float(value) + block:.10e}"))
    requests, runs = _load(Path("raw/eviction"))
    assert derive(requests, runs, "C", None).blocks == _independent_extra(root / "C" / "2026-10-16T20-15-44Z") == c.blocks + 1


def test_config_override_is_kept_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    requests, runs = _load(Path("raw/eviction"))
    c = derive(requests, runs, "C", 6)
    assert (c.blocks, c.derived, c.overridden) == (6, _independent_extra(REPO / RUN_C), True)


def test_no_valid_run_of_the_setup_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    requests, runs = _load(Path("raw/eviction"))
    with pytest.raises(RawRecordError, match="eviction_requests.csv: no valid eviction run of setup B"):
        derive(requests, runs, "B", None)
    assert derive(requests, runs, "B", 4).blocks == 4


def test_figure_top_edge_follows_the_data_and_max_model_len() -> None:
    edges = [0, 25e3, 50e3, 100e3, 200e3, 300e3, 500e3, 700e3]
    assert figure_edges(edges, 881_600, 1_000_000, 100e3)[-2:] == [700e3, 900e3]
    assert figure_edges(edges, 950_000, 1_000_000, 100e3)[-1] == 1_000_000  # capped at max_model_len
    assert figure_edges(edges, 150_000, 1_000_000, 100e3) == [0, 25e3, 50e3, 100e3, 200e3]
    with pytest.raises(ValueError, match="max_model_len"):
        figure_edges(edges, 1_200_000, 1_000_000, 100e3)
    # a restore larger than the published largest now plots
    restores = pd.DataFrame({"tokens": [30_000.0, 950_000.0]})
    bins = restore_histogram(restores, figure_edges(edges, 950_000, 1_000_000, 100e3),
                             model_from_csv(REPO / "raw/production/C/coldreads.csv"))
    assert int(bins["restores"].sum()) == 2 and bins["upper"].iloc[-1] == 1_000_000


def test_from_records_reads_only_the_setups_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.production.correction import from_records

    _copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    schemas = (REPO / "workflow/schemas/eviction-run.schema.yaml", REPO / "workflow/schemas/eviction-request.schema.yaml")
    c = from_records(sorted(Path("raw/eviction/C").glob("*")), *schemas, "C", None)
    assert c.blocks == _independent_extra(REPO / RUN_C)
    with pytest.raises(RawRecordError, match="raw/eviction/B: no valid eviction run of setup B"):
        from_records([], *schemas, "B", None)
    assert from_records([], *schemas, "B", 4).blocks == 4
