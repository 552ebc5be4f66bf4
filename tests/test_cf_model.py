"""The counterfactual: synthetic workload fit, replay summaries, and the single-pass GPU curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.replay import Config, gpu_only_curve, replay, summarise
from kvtier.workloads.base import Workload, vllm_request
from kvtier.workloads.synthetic import AgenticParams, Targets, build, fit_prompts, fit_report, max_in_service, reusable_share

REPO = Path(__file__).resolve().parent.parent
MODEL = model_from_csv(REPO / "raw/production/C/coldreads.csv")
TARGETS = Targets(requests=2_000, period_s=6 * 3600.0, active_hours=6, mean_prompt=127_000, share_above_200k=0.15,
                  share_above_500k=0.04, max_running=13, max_model_len=1_000_000, mean_output=940, gpu_share=0.855)


def test_reusable_share_by_hand() -> None:
    prompts = np.array([[1_000.0, 1_600.0, np.nan]])  # one session, two turns
    out = np.array([[100.0, 100.0, 100.0]])
    # turn 1 reuses the system prefix (200), turn 2 the previous prompt and answer (1,100) of 2,600 tokens
    assert reusable_share(prompts, out, 200) == pytest.approx((200 + 1_100) / 2_600)


def test_fit_matches_prompt_aggregates_within_stated_tolerances() -> None:
    p = fit_prompts(TARGETS, 0.92, AgenticParams(), seed=3)
    got = fit_report(p, TARGETS, seed=3)  # a fresh draw, not the one fitted on
    assert got["mean_prompt"] == pytest.approx(TARGETS.mean_prompt, rel=0.05)
    assert got["share_above_200k"] == pytest.approx(TARGETS.share_above_200k, abs=0.04)
    assert got["share_above_500k"] == pytest.approx(TARGETS.share_above_500k, abs=0.015)
    assert got["reusable_share"] == pytest.approx(0.92, abs=0.01)
    assert p.turns_mean > 1.5  # sessions, not single prompts


def test_build_is_deterministic_and_keeps_the_requested_count() -> None:
    p = AgenticParams(first_prompt_median=50_000, growth_median=500, turns_mean=10)
    hours = np.ones(6)
    a = build(TARGETS, p, MODEL, hours, 1_600, seed=1)
    b = build(TARGETS, p, MODEL, hours, 1_600, seed=1)
    assert len(a.requests) == TARGETS.requests
    assert np.array_equal(a.times, b.times) and a.requests == b.requests
    assert np.all(np.diff(a.times) >= 0) and a.times.max() < TARGETS.period_s
    # whole sessions are kept, so traffic covers every hour that has weight, not just the first ones
    assert set(np.floor(a.times / 3600).astype(int)) == set(range(6))
    quiet = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    c = build(TARGETS, p, MODEL, quiet, 1_600, seed=1)
    starts = {int(lbl.label.split("t")[0][1:]): t for t, lbl in zip(c.times, c.requests) if lbl.label.endswith("t0")}
    assert {int(t // 3600) for t in starts.values()} <= {0, 2, 4}  # sessions start only in hours with traffic


def test_max_in_service_counts_overlaps() -> None:
    assert max_in_service(np.array([0.0, 1.0, 2.0, 10.0]), np.array([5.0, 5.0, 0.5, 1.0])) == 3
    assert max_in_service(np.array([0.0, 1.0]), np.array([1.0, 1.0])) == 1  # an end before a start at t=1


def _two_turns() -> Workload:
    # two sessions of two turns each, 4 blocks of 100 tokens then 6; session B evicts A from a 6-block GPU
    reqs, t = [], []
    for i, (s, n) in enumerate([(1, 400), (2, 400), (1, 600), (2, 600)]):
        reqs.append(vllm_request(tuple((s << 20) | b for b in range(n // 100)), n, 100, 0))
        t.append(float(i))
    return Workload("toy", 100, np.array(t), reqs, np.zeros(4, dtype=np.int64))


def test_replay_and_summary_by_hand() -> None:
    w = _two_turns()
    no_pool = replay(w, Config(600, None))
    # GPU holds 6 blocks: after A(4) and B(4) only B's 4 + A's first 2 blocks... A's tail goes first
    assert list(no_pool["computed"] + no_pool["gpu"] + no_pool["pool"]) == [400, 400, 600, 600]
    with_pool = replay(w, Config(600, 100))
    s = summarise(with_pool, MODEL)
    total = 2_000
    assert s["share_gpu"] + s["share_pool"] + s["share_computed"] == pytest.approx(1.0)
    assert s["share_pool"] * total == pytest.approx(with_pool["pool"].sum())
    assert s["restores"] == float((with_pool["pool"] > 0).sum())
    assert with_pool["pool"].sum() >= 0 and with_pool["gpu"].sum() == no_pool["gpu"].sum()  # GPU tier ignores the pool


def test_gpu_curve_equals_the_single_stack_pass() -> None:
    from kvtier.sim.stack import hits_by_capacity, stack_positions

    p = AgenticParams(first_prompt_median=50_000, growth_median=2_000, turns_mean=6, think_median_s=30)
    w = build(TARGETS, p, MODEL, np.ones(6), 1_600, seed=2)
    sizes = np.array([500_000, 1_000_000, 2_113_003])
    curve = gpu_only_curve(w, sizes)  # compiled replays, one per size
    hits = hits_by_capacity(stack_positions(w.requests), sizes // 1_600)  # Mattson's stack: an independent path
    tokens = w.prompt_tokens
    want = np.minimum(hits * 1_600, tokens[:, None]).sum(axis=0) / tokens.sum()
    assert curve["share_gpu"].to_numpy() == pytest.approx(want, abs=1e-12)
    assert isinstance(curve, pd.DataFrame) and curve["share_gpu"].is_monotonic_increasing
