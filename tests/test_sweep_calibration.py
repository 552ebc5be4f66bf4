"""The counterfactual's calibration procedure applied to the CPU capture, predicting the measured
pool-size sweep (kvtier.counterfactual.sweepcheck, rule sweep_cpu): the capture's service-time
model, session starts inside a period shorter than an hour, and the check on the pinned records.

Expected values of the service model are worked out by hand in the comments; the check on the
pinned records asserts structure and invariants, not the values the code computes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from kvtier.coldread import model_from_csv
from kvtier.counterfactual import sweepcheck
from kvtier.counterfactual.fit import calibrate, targets_from_registry
from kvtier.counterfactual.run import hour_weights
from kvtier.errors import RawRecordError
from kvtier.numbers import NumbersWriter
from kvtier.production import setups, sweep
from kvtier.production.correction import from_records
from kvtier.production.pipeline import analyse, ingest
from kvtier.workloads.synthetic import AgenticParams, Targets, assemble, draw, start_window

REPO = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())


# ---------------------------------------------------------------- the service model, by hand

def line(i: int, prompt: int, cached: int, first: float, total: float, completion: int, **kw) -> str:
    rec = {"session": 0, "index": i, "status": "ok", "sent_s": float(i), "total_s": total, "prompt_tokens_sent": prompt,
           "max_tokens": 16, "cached_tokens": cached, "usage_prompt_tokens": prompt, "first_chunk_s": first,
           "completion_tokens": completion, **kw}
    return json.dumps({k: v for k, v in rec.items() if v is not None})


# computed = prompt - cached; decoding time = total - first
SIX = [line(0, 100, 0, 0.2, 0.5, 4),      # 100 computed, 0.2 s to first token, 0.3 s decoding
       line(1, 120, 100, 0.05, 0.25, 3),  # 20, 0.05 s, 0.2 s
       line(2, 500, 120, 0.6, 1.0, 5),    # 380, 0.6 s, 0.4 s
       line(3, 40, 0, 0.1, 0.2, 1),       # 40, 0.1 s, 0.1 s
       line(4, 1000, 500, 0.9, 1.5, 6),   # 500, 0.9 s, 0.6 s
       line(5, 300, 0, 0.4, 0.8, 5)]      # 300, 0.4 s, 0.4 s


def write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "client.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_service_model_is_bin_medians_and_the_summed_decoding_rate(tmp_path: Path):
    m = sweepcheck.service_model(write(tmp_path, SIX), bins=3)
    # sorted by computed tokens: 20 (0.05 s), 40 (0.1), | 100 (0.2), 300 (0.4), | 380 (0.6), 500 (0.9)
    # three bins of two: medians 30 tokens / 0.075 s, 200 / 0.3 s, 440 / 0.75 s
    assert m.latency.tokens.tolist() == [30.0, 200.0, 440.0]
    assert m.latency.seconds == pytest.approx([0.075, 0.3, 0.75])
    # 4 + 3 + 5 + 1 + 6 + 5 = 24 tokens in 0.3 + 0.2 + 0.4 + 0.1 + 0.6 + 0.4 = 2.0 s
    assert m.decode_tokens_per_s == pytest.approx(12.0)
    assert m.requests == 6
    # 100 tokens: between (30, 0.075) and (200, 0.3): 0.075 + 70 / 170 * 0.225
    assert m.latency.predict(100.0) == pytest.approx(0.075 + 70 / 170 * 0.225)
    # below the first point, through the origin: 15 tokens -> half of 0.075
    assert m.latency.predict(15.0) == pytest.approx(0.0375)


def test_bins_with_the_same_median_are_merged(tmp_path: Path):
    lines = [line(i, 10, 0, 0.1 * (i + 1), 1.0, 2) for i in range(4)]  # four prompts computing 10 tokens
    lines += [line(4, 50, 0, 0.5, 1.0, 2), line(5, 60, 0, 0.7, 1.0, 2)]
    m = sweepcheck.service_model(write(tmp_path, lines), bins=3)
    # bins [10, 10], [10, 10], [50, 60]: the first two have the same median and merge into one bin
    # of four, latencies 0.1, 0.2, 0.3, 0.4 -> median 0.25; the last: 55 tokens, 0.6 s
    assert m.latency.tokens.tolist() == [10.0, 55.0]
    assert m.latency.seconds == pytest.approx([0.25, 0.6])


@pytest.mark.parametrize("bad, message", [
    (line(2, 500, 120, 1.2, 1.0, 5), r"client\.jsonl:3: first_chunk_s 1\.2 outside"),
    (line(2, 500, 120, 0.6, 1.0, 0), r"client\.jsonl:3: completion_tokens 0"),
    (line(2, 500, 120, None, 1.0, 5), r"client\.jsonl:3: field 'first_chunk_s' is None"),
    (line(2, 500, 120, 0.6, 1.0, "5"), r"client\.jsonl:3: field 'completion_tokens' is '5'"),
])
def test_a_bad_client_line_names_file_and_line(tmp_path: Path, bad: str, message: str):
    with pytest.raises(RawRecordError, match=message):
        sweepcheck.service_model(write(tmp_path, SIX[:2] + [bad] + SIX[3:]), bins=3)


def test_a_log_with_one_size_of_computed_prompt_has_no_model(tmp_path: Path):
    with pytest.raises(RawRecordError, match="fewer than two distinct"):
        sweepcheck.service_model(write(tmp_path, [line(i, 10, 0, 0.1, 1.0, 2) for i in range(4)]), bins=2)


# ---------------------------------------------------------------- session starts in a short period

def targets(period_s: float, hours: int, requests: int = 200) -> Targets:
    return Targets(requests=requests, period_s=period_s, active_hours=hours, mean_prompt=4_000, share_above_200k=0.3,
                   share_above_500k=0.01, max_running=4, max_model_len=12_288, mean_output=10, gpu_share=0.8,
                   low_edge=5_000, high_edge=10_000)


PARAMS = AgenticParams(first_prompt_median=600, growth_median=40, turns_mean=8, think_median_s=0.5, system_tokens=320)
MODEL = model_from_csv(REPO / "raw/production/C/coldreads.csv")


def old_starts(d, weights: np.ndarray, seed: int) -> np.ndarray:
    """The formula before the change, computed here from the same dice: (hour + U) * 3600."""
    rng = np.random.default_rng(seed + 2)
    n = d.prompts.shape[0]
    hour = rng.choice(len(weights), size=n, p=weights / weights.sum())
    return (hour + rng.random(n)) * 3600.0


def test_starts_fall_inside_a_period_shorter_than_an_hour():
    t = targets(601.4, 1)
    d = draw(t, PARAMS, MODEL, np.array([1.0]), seed=5)
    assert d.timing.start.max() < t.period_s and d.timing.start.min() >= 0
    assert d.timing.start.max() > 0.9 * t.period_s  # spread over the period, not bunched at its start
    # the old formula put most starts after the period: the same dice, stretched to the hour
    old = old_starts(d, np.array([1.0]), 5)
    assert d.timing.start == pytest.approx(old * t.period_s / 3600.0)


def test_a_period_of_whole_hours_keeps_the_old_starts_exactly():
    weights = np.array([3.0, 0.0, 1.0, 2.0, 5.0, 1.0])
    t = targets(6 * 3600.0, 6)
    d = draw(t, PARAMS, MODEL, weights, seed=9)
    assert np.array_equal(d.timing.start, old_starts(d, weights, 9))  # bit for bit


def test_only_the_last_hour_is_cut_where_the_period_ends_inside_it():
    weights = np.array([1.0, 1.0, 1.0])
    t = targets(2.5 * 3600.0, 3)
    d = draw(t, PARAMS, MODEL, weights, seed=2)
    old = old_starts(d, weights, 2)
    last = old >= 2 * 3600.0
    assert last.any() and (~last).any()
    assert np.array_equal(d.timing.start[~last], old[~last])
    assert np.all(d.timing.start[last] < t.period_s)
    assert start_window(np.array([0, 1, 2, 3]), 2.5 * 3600.0).tolist() == [1.0, 1.0, 0.5, 0.0]


def test_a_think_time_too_long_for_the_period_counts_as_too_long(monkeypatch):
    """A target GPU share of zero drives the bisection to ever longer think times; with a
    ten-minute period the longer ones leave too few requests inside it. The calibration must
    treat those as too long and end on a think time that fills the period."""
    from kvtier.counterfactual import fit
    from kvtier.workloads.synthetic import TooFewRequests

    t = replace(targets(600.0, 1, requests=300), gpu_share=0.0)
    refused: list[float] = []

    def counting(d, think, block_tokens):
        try:
            return assemble(d, think, block_tokens)
        except TooFewRequests:
            refused.append(think)
            raise

    monkeypatch.setattr(fit, "assemble", counting)
    params, w, gpu = calibrate(t, replace(PARAMS, think_median_s=13.0), MODEL, np.array([1.0]), 1_600, 16_384, seed=4)
    assert refused, "the test must reach think times too long for the period"
    assert params.think_median_s < min(refused)
    assert len(w.requests) == t.requests and w.times.max() < t.period_s
    assert 0.0 <= gpu <= 1.0


# ---------------------------------------------------------------- the check on the pinned records

@pytest.fixture(scope="module")
def check(tmp_path_factory) -> dict:
    """What rule sweep_cpu computes: the capture's numbers and hourly table through the production
    pipeline (as rule production_numbers makes them), the sweep, and the calibrated prediction."""
    sw = CONFIG["sweep"]
    if not sw["runs"]:
        pytest.skip("config sweep.runs is empty")
    cal = sw["calibration"]
    prod = CONFIG["production"]["setups"][cal["setup"]]
    settings = setups.settings(CONFIG["production"], cal["setup"])
    rec = ingest(REPO / prod["metrics"], REPO / prod["log"], REPO / prod["host"], settings)
    runs = sorted(p for p in (REPO / "raw/eviction" / prod["eviction_setup"]).iterdir() if p.is_dir())
    corr = from_records(runs, REPO / "workflow/schemas/eviction-run.schema.yaml",
                        REPO / "workflow/schemas/eviction-request.schema.yaml", prod["eviction_setup"], None)
    pw = NumbersWriter(topic=prod["numbers_prefix"], rule="test", inputs=[])
    tables = analyse(rec, None, settings, None, pw, corr, capture=(str(REPO / prod["capture_run"]), str(REPO / prod["capture_client"])))
    tmp = tmp_path_factory.mktemp("cal")
    pw.write(tmp / "production.json")
    tables["hours"].to_csv(tmp / "hours.csv", index=False)
    reg = sweepcheck.registry(tmp / "production.json")  # its numbers touch the file when read (records.touch)
    results = sweep.analyse([REPO / r for r in sw["runs"]])
    service = sweepcheck.service_model(REPO / prod["capture_client"], cal["service_bins"], CONFIG["coldread"]["above_last"])
    cf = CONFIG["counterfactual"]
    w, record, table = sweepcheck.predict(reg, results, service, hour_weights(tmp / "hours.csv"), cf["think_time"]["median_s"],
                                          cf["think_time"]["sigma"], cf["reusable_share"], cf["seed"], prefix=prod["numbers_prefix"])
    table.to_csv(tmp / "calibrated.csv", index=False)
    writer = NumbersWriter(topic="sweepcpu", rule="test", inputs=[])
    sweepcheck.register(writer, record, table, service, w)
    return {"reg": reg, "prefix": prod["numbers_prefix"], "results": results, "w": w, "record": record,
            "csv": pd.read_csv(tmp / "calibrated.csv"), "n": {k: v["value"] for k, v in writer.numbers.items()},
            "capture": (REPO / prod["capture_run"]).parent.as_posix(), "reusable": cf["reusable_share"]}


def test_the_check_registers_per_run_shares_errors_and_the_fits_residuals(check):
    n, runs = check["n"], check["results"]
    for s in sweep.SOURCES:
        for k in (f"fit.residual_points_{s}", f"fit.share_{s}", f"target.share_{s}"):
            assert f"sweepcpu.cal.{k}" in n
    for k in ("fit.restores_per_traffic_hour", "target.restores_per_traffic_hour", "fit.worst_residual_points",
              "model.think_median", "model.reusable_share", "model.turns_mean", "service.decode_rate", "worst_points"):
        assert f"sweepcpu.cal.{k}" in n
    for i in range(len(runs)):
        for s in sweep.SOURCES:
            assert f"sweepcpu.cal.run.{i}.share_{s}" in n and f"sweepcpu.cal.run.{i}.error_points_{s}" in n
    assert f"sweepcpu.cal.run.{len(runs)}.share_gpu" not in n


def test_the_calibration_point_is_the_capture_and_the_residuals_are_its_row(check):
    csv, reg, P = check["csv"], check["reg"], check["prefix"]
    point = csv[csv.calibration_point]
    assert set(point.run) == {check["capture"]}
    assert int(point.pool_tokens.iloc[0]) == int(reg[f"{P}.pool.blocks"].value) * int(reg[f"{P}.pool.block_tokens"].value)
    assert check["n"]["sweepcpu.cal.calibration_run"] == list(dict.fromkeys(csv.run)).index(check["capture"])
    # the fit's residuals: the replay at the capture's sizes less the capture's own shares (its registry)
    target = {s: float(reg[f"{P}.tokens.share_{s}"].value) for s in sweep.SOURCES}
    for s in sweep.SOURCES:
        row = point[point.source == s].iloc[0]
        assert check["n"][f"sweepcpu.cal.fit.residual_points_{s}"] == pytest.approx(100 * (row.model - target[s]), abs=1e-9)
        assert row.measured == pytest.approx(target[s])  # the sweep's counters of that run are the capture's


def test_errors_are_model_less_measured_and_shares_sum_to_one(check):
    csv, n = check["csv"], check["n"]
    measured = sweep.tidy(check["results"])
    measured = measured[measured.model == "measured"].set_index(["run", "source"]).share
    for i, (run, g) in enumerate(csv.groupby("run", sort=False)):
        assert g.model.sum() == pytest.approx(1.0) and g.measured.sum() == pytest.approx(1.0)
        for r in g.itertuples():
            assert r.measured == pytest.approx(measured[(run, r.source)])
            assert n[f"sweepcpu.cal.run.{i}.error_points_{r.source}"] == pytest.approx(100 * (r.model - r.measured), abs=1e-9)
        blocks = g.pool_blocks.iloc[0]
        assert blocks == g.pool_tokens.iloc[0] // int(check["reg"][f"{check['prefix']}.pool.block_tokens"].value)
    assert list(dict.fromkeys(csv.run)) == [x.run.path.as_posix() for x in check["results"]]
    assert n["sweepcpu.cal.worst_points"] == pytest.approx(csv.error_points.abs().max())


def test_the_fitted_workload_is_the_captures_size_and_the_fit_stays_in_its_bracket(check):
    w, record, reg, P = check["w"], check["record"], check["reg"], check["prefix"]
    t = targets_from_registry(reg, P)
    assert len(w.requests) == t.requests and w.times.max() < t.period_s
    lo, hi = check["reusable"]
    assert lo <= record["reusable"] <= hi and record["reusable_fitted"]
    assert record["params"]["decode_tokens_per_s"] == pytest.approx(check["n"]["sweepcpu.cal.service.decode_rate"])
    # sessions, not single prompts (at setup C's start the prompt fit of this small server collapsed to one turn each)
    assert record["params"]["turns_mean"] > 1.5
