"""The compiled admitted replay (kvtier.sim.fast.replay_admitted_flat) against its readable reference
(kvtier.sim.resident: ResidentCache + replay_admitted): equal outcomes on every request, equal chunks
stored by every request, equal admission counts -- on streams built to reach the held-copy, forced
admission and eviction cases (pools of 0 and 1 blocks, tied event times, repeated prefixes), on every
committed sweep run's stream at its own times and shape and at smaller pools, and on the curve check's
synthetic workload."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from kvtier.sim import Request, fast, prompt_request
from kvtier.sim.resident import Admission, ResidentCache, replay_admitted

REPO = Path(__file__).resolve().parent.parent


class _Counted(ResidentCache):
    """ResidentCache recording the chunks each request's start stored (stored_chunks, per request)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.per_request: dict = {}

    def begin(self, key, req):
        before = self.stored_chunks
        out = super().begin(key, req)
        self.per_request[key] = self.stored_chunks - before
        return out


def _same(reqs: list[Request], arrive, finish, gpu: int, B: int, **kw) -> Admission:
    cache = _Counted(gpu, B, **kw)
    want, want_adm = replay_admitted(cache, reqs, list(arrive), list(finish))
    cols, adm = fast.replay_admitted_flat(fast.flatten(reqs), arrive, finish, gpu, B, **kw)
    got = cols.outcomes([r.label for r in reqs])
    bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
    assert len(got) == len(want) and not bad, f"{len(bad)} of {len(reqs)} differ; first {bad[0]}: {want[bad[0]]} vs {got[bad[0]]}"
    assert adm == want_adm
    assert cols.stored_chunks.tolist() == [cache.per_request[i] for i in range(len(reqs))]
    assert fast.replay_admitted(reqs, arrive, finish, gpu, B, **kw) == (want, want_adm)
    return adm


def _stream(seed: int, n: int = 400) -> tuple[list[Request], list[float], list[float]]:
    """Growing, repeated sessions (shared prefixes); whole-block prompts (a cached block recomputed:
    a second copy); scratch and generated blocks; a few long prompts. Whole-second times, so events
    tie (a finish and an arrival at once, several arrivals at once)."""
    rng = random.Random(seed)
    reqs, arrive, finish, t = [], [], [], 0
    for i in range(n):
        doc = rng.randrange(15)
        tokens = rng.choice([16 * rng.randint(1, 14), rng.randint(3, 230), rng.randint(300, 700)])
        reqs.append(prompt_request(iter(range(doc << 20, (doc << 20) + 64)), tokens, 16,
                                   generated=rng.choice([0, 1, 15, 40]), label=str(i)))
        t += rng.choice([0, 0, 1, 2, 5])
        arrive.append(float(t))
        finish.append(float(t + rng.choice([1, 2, 3, 10, 30])))
    return reqs, arrive, finish


@pytest.mark.parametrize("flavor", ["vllm", "lmcache"])
@pytest.mark.parametrize("gpu, cpu, k", [(0, 5, 1), (1, None, 1), (1, 3, 2), (8, 6, 1), (30, 40, 1), (45, None, 1),
                                         (60, 25, 3), (120, 400, 2), (200, 0, 4), (2_000, 10, 1)])
def test_streams(flavor: str, gpu: int, cpu: int | None, k: int) -> None:
    reqs, arrive, finish = _stream(gpu * 7 + k)
    _same(reqs, arrive, finish, gpu, 16, cpu_chunks=cpu, chunk_blocks=k, flavor=flavor)


@pytest.mark.parametrize("gpu, cpu, k, step", [(30, 40, 1, 32), (60, 5, 3, 48), (20, 3, 1, 16), (45, 2, 1, 17),
                                               (16, 6, 2, 700), (0, 4, 1, 32), (1, 2, 1, 16)])
def test_streams_stepwise_stores(gpu: int, cpu: int, k: int, step: int) -> None:
    reqs, arrive, finish = _stream(gpu * 11 + k + step)
    _same(reqs, arrive, finish, gpu, 16, cpu_chunks=cpu, chunk_blocks=k, flavor="vllm", step_tokens=step)


def test_pressure_reaches_the_cases() -> None:
    """The streams above are not vacuous: requests wait, some are forced with slots short, several run."""
    reqs, arrive, finish = _stream(3)
    adm = _same(reqs, arrive, finish, 8, 16, cpu_chunks=6, chunk_blocks=1, flavor="vllm")
    assert adm.waited > 0 and adm.forced > 0 and adm.short > 0 and adm.max_running > 1
    none = _same(reqs, arrive, finish, 0, 16)  # no GPU blocks: one runs at a time (nothing fits beside it), others are forced
    assert none.max_running == 1 and none.forced > 0 and none.short > adm.short


def test_requests_that_never_overlap_and_the_same_times() -> None:
    reqs, _, _ = _stream(5, 120)
    _same(reqs, [2.0 * i for i in range(120)], [2.0 * i + 1 for i in range(120)], 40, 16, cpu_chunks=10, flavor="vllm")
    _same(reqs, [0.0] * 120, [1.0] * 120, 40, 16, cpu_chunks=10, flavor="vllm")  # all at once, all end at once


def test_refuses_a_finish_before_its_arrival() -> None:
    reqs, arrive, finish = _stream(1, 10)
    finish[4] = arrive[4]
    with pytest.raises(ValueError):
        replay_admitted(ResidentCache(40, 16), reqs, arrive, finish)
    with pytest.raises(ValueError, match="request 4 finishes"):
        fast.replay_admitted_flat(fast.flatten(reqs), arrive, finish, 40, 16)
    with pytest.raises(ValueError, match="one entry per request"):
        fast.replay_admitted_flat(fast.flatten(reqs), arrive[:-1], finish, 40, 16)


def test_measured_sweep_runs() -> None:
    """Every committed sweep run's stream at its own times, shape and budget, and at smaller pools and GPU caches."""
    from kvtier.production import sweep

    for d in sorted((REPO / "raw/production/cpu-sweep").iterdir()) + [REPO / "raw/production/cpu"]:
        run = sweep.read_run(d)
        s, r = run.shape, run.requests
        reqs, arrive, finish = sweep.stream(run), r.sent_s.to_numpy(), (r.sent_s + r.total_s).to_numpy()
        kv = int(s["kv_blocks"]) - 1
        for gpu, pool in {(kv, s["cpu_chunks"]), (kv, 3), (kv // 3, 7), (kv, None)}:
            _same(reqs, arrive, finish, gpu, int(s["block_tokens"]), cpu_chunks=pool, chunk_blocks=s["chunk_blocks"] or 25,
                  flavor="vllm", step_tokens=s["step_tokens"])
        # the sweep's own prediction (compiled) equals the reference's, field for field
        assert sweep.admitted(run, reqs) == sweep.admitted_reference(run, reqs)


def test_curve_check_workload() -> None:
    """The curve check's synthetic workload (ids shared by every session's system prefix) under the
    fixed-order client's schedule, at the smallest sweep run's server and a smaller one."""
    from kvtier.counterfactual import curvecheck
    from kvtier.production import sweep
    from kvtier.workloads.synthetic import AgenticParams, Targets, build
    from kvtier.coldread import model_from_csv

    run = sweep.read_run(REPO / "raw/production/cpu-sweep/pool-0.03125")
    server = curvecheck.Server.of(run)
    B = server.block_tokens
    targets = Targets(requests=600, period_s=3600.0, active_hours=1, mean_prompt=6_000, share_above_200k=0.0,
                      share_above_500k=0.0, max_running=16, max_model_len=30_000, mean_output=40, gpu_share=0.6)
    w = build(targets, AgenticParams(first_prompt_median=3_000, growth_median=400, turns_mean=6, think_median_s=5,
                                     system_tokens=2_048), model_from_csv(REPO / "raw/production/C/coldreads.csv"),
              np.ones(1), B, seed=4)
    sessions = np.array([int(str(x)[1:].split("t")[0]) for x in w.requests.labels])
    send = np.arange(len(w.requests), dtype=float)
    done = send + 1.0 + (np.asarray(w.prompt_tokens) % 23)  # overlapping service times
    for srv in (server, server.without_pool(), curvecheck.replace(server, kv_blocks=server.kv_blocks // 4, cpu_chunks=3)):
        _same(list(w.requests), send, done, srv.kv_blocks - 1, B, cpu_chunks=srv.cpu_chunks, chunk_blocks=srv.chunk_blocks,
              flavor="vllm", step_tokens=srv.step_tokens)
        assert curvecheck.replay(w, srv, send, done) == curvecheck.replay_reference(w, srv, send, done)
    assert len(set(sessions)) > 1


def test_a_stream_the_compiled_loop_does_not_model_goes_to_the_reference() -> None:
    """A prompt listing a block twice (no vLLM hash chain does) is refused by flatten; the sweep's
    prediction then replays the whole stream by the readable references."""
    from dataclasses import replace

    from kvtier.production import sweep

    run = sweep.read_run(REPO / "raw/production/cpu-sweep/pool-0.03125")
    reqs = sweep.stream(run)
    i = next(j for j, r in enumerate(reqs) if r.n_blocks >= 2)
    reqs[i] = replace(reqs[i], blocks=reqs[i].blocks[:-1] + reqs[i].blocks[:1])
    with pytest.raises(ValueError, match="twice"):
        fast.flatten(reqs)
    assert sweep.admitted(run, reqs) == sweep.admitted_reference(run, reqs)
    table, adm = sweep.predict(run, reqs)
    assert adm == sweep.admitted_reference(run, reqs)[2] and len(table) == len(reqs)
