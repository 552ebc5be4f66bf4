"""The compiled replay (kvtier.sim.fast) against the readable reference (TieredCache): equal
outcomes on every request, on the lab, streams built to reach the copy and eviction cases, the
public traces and the counterfactual's synthetic workload, for both flavors and both policies."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from kvtier.lab import experiments as ex
from kvtier.sim import Request, TieredCache, fast, prompt_request
from kvtier.workloads import traces

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("KVTIER_TRACES", REPO.parent / "shared" / "traces"))
if not TRACES.exists():  # a worktree under /work/wt/: the shared folder is two levels up
    TRACES = REPO.parent.parent / "shared" / "traces"

CASES = [("lmcache", "write_through"), ("lmcache", "store_on_evict"), ("vllm", "write_through"),
         ("vllm", "store_on_evict")]


def _stream(seed: int, n: int = 500) -> list[Request]:
    """Growing, repeated sessions; whole-block prompts (recomputed cached blocks); scratch and
    generated blocks; a few very long prompts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        doc = rng.randrange(15)
        tokens = rng.choice([16 * rng.randint(1, 14), rng.randint(3, 230), rng.randint(300, 700)])
        out.append(prompt_request(iter(range(doc << 20, (doc << 20) + 64)), tokens, 16,
                                  generated=rng.choice([0, 1, 15, 40]), label=str(i)))
    return out


def _same(reqs: list[Request], gpu: int, B: int, **kw) -> None:
    """Equal outcomes on every request, and equal chunks stored by every request (the reference
    counts them in TieredCache.stored_chunks, read after each request)."""
    cache = TieredCache(gpu, B, **kw)
    want, stored = [], []
    for r in reqs:
        want.append(cache.access(r))
        stored.append(cache.stored_chunks)
    cols = fast.replay_flat(fast.flatten(reqs), gpu, B, **kw)
    got = cols.outcomes([r.label for r in reqs])
    bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
    assert len(got) == len(want) and not bad, f"{len(bad)} of {len(reqs)} differ; first {bad[0]}: {want[bad[0]]} vs {got[bad[0]]}"
    assert np.cumsum(cols.stored_chunks).tolist() == stored


@pytest.mark.parametrize("flavor, policy", CASES)
@pytest.mark.parametrize("gpu, cpu, k", [(30, 40, 1), (60, 25, 3), (8, 6, 1), (120, 400, 2), (0, 5, 1), (45, None, 1),
                                         (200, 0, 4)])
@pytest.mark.parametrize("unhashed_first", [True, False])
def test_streams(flavor: str, policy: str, gpu: int, cpu: int | None, k: int, unhashed_first: bool) -> None:
    _same(_stream(gpu * 7 + k), gpu, 16, cpu_chunks=cpu, chunk_blocks=k, policy=policy, flavor=flavor,
          unhashed_first=unhashed_first)


@pytest.mark.parametrize("flavor, policy", CASES)
@pytest.mark.parametrize("cpu", [None, 150, 189, 190, 10_000])
def test_lab(flavor: str, policy: str, cpu: int | None) -> None:
    shape = ex.LabShape(docs=10, doc_tokens=5011, gpu_cache_tokens=21_520, block_tokens=16, generated=7)
    _same(ex.requests(shape), shape.gpu_blocks, 16, cpu_chunks=cpu, chunk_blocks=16, policy=policy, flavor=flavor)


def test_refuses_an_id_listed_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        fast.flatten([Request((1, 2, 1), 48, max_hit=2)])


@pytest.mark.parametrize("flavor, policy", CASES)
def test_public_traces(flavor: str, policy: str) -> None:
    moon = TRACES / "mooncake" / "conversation_trace.jsonl"
    agentic = TRACES / "kv-cache-tester" / "traces_0001-0100.tgz"
    if not moon.exists() or not agentic.exists():
        pytest.skip(f"public traces not found under {TRACES} (set KVTIER_TRACES)")
    w = traces.mooncake(moon, 512)
    _same(w.requests, 3_000, 512, cpu_chunks=2_000, chunk_blocks=1, policy=policy, flavor=flavor)
    a = traces.kv_cache_tester(agentic, 1_600)
    _same(a.requests, 400, 1_600, cpu_chunks=900, chunk_blocks=1, policy=policy, flavor=flavor)


@pytest.mark.parametrize("policy", ["write_through", "store_on_evict"])
@pytest.mark.parametrize("pool", [None, 300, 2_688])
def test_counterfactual_workload(policy: str, pool: int | None) -> None:
    """The synthetic agentic workload at production-like sizes (1,600-token blocks)."""
    from kvtier.coldread import model_from_csv
    from kvtier.workloads.synthetic import AgenticParams, Targets, build

    targets = Targets(requests=3_000, period_s=8 * 3600.0, active_hours=8, mean_prompt=127_000, share_above_200k=0.15,
                      share_above_500k=0.04, max_running=13, max_model_len=1_000_000, mean_output=940, gpu_share=0.855)
    w = build(targets, AgenticParams(first_prompt_median=50_000, growth_median=3_000, turns_mean=15, think_median_s=60),
              model_from_csv(REPO / "raw/production/C/coldreads.csv"), np.ones(8), 1_600, seed=2)
    _same(w.requests, 1_320, 1_600, cpu_chunks=pool, chunk_blocks=1, policy=policy, flavor="vllm")


@pytest.mark.parametrize("high", [5, 300, 10**12])  # the table of present ids (small ids) and the sort
def test_dense_ids_are_the_ranks_np_unique_gives(high: int) -> None:
    ids = np.random.default_rng(high).integers(0, high, 600)
    n, dense = fast.dense_ids(ids)
    uniq, inv = np.unique(ids, return_inverse=True)
    assert n == len(uniq) and dense.dtype == np.int64 and np.array_equal(dense, inv)


def test_refuses_an_id_listed_twice_naming_the_first_such_request() -> None:
    ok = [Request((1, 2, 3), 48, max_hit=2), Request((3, 4), 32, max_hit=1)]
    with pytest.raises(ValueError, match="request 2 lists"):
        fast.flatten(ok + [Request((5, 6, 5), 48, max_hit=2), Request((7, 7), 32, max_hit=1)])
    fast.flatten(ok)


@pytest.mark.parametrize("policy", ["write_through", "store_on_evict"])
@pytest.mark.parametrize("gpu, cpu, k, step", [(30, 40, 1, 32), (60, 5, 3, 48), (20, 3, 1, 16), (120, 8, 2, 100), (45, 2, 1, 17),
                                               (200, 0, 4, 64), (16, 6, 2, 700)])
def test_streams_stepwise_stores(policy: str, gpu: int, cpu: int, k: int, step: int) -> None:
    """Stores offered per scheduler step (step_tokens): small pools, prefills of many steps, so offers
    fail, meet the previous step's stores in flight and evict the request's own chunks."""
    _same(_stream(gpu * 11 + k + step), gpu, 16, cpu_chunks=cpu, chunk_blocks=k, policy=policy, flavor="vllm",
          step_tokens=step)


def test_measured_sweep_stepwise() -> None:
    """Every committed sweep run's stream at its own shape and budget, and at smaller pools."""
    from kvtier.production import sweep

    for d in sorted((REPO / "raw/production/cpu-sweep").iterdir()) + [REPO / "raw/production/cpu"]:
        run = sweep.read_run(d)
        s = run.shape
        for pool in {s["cpu_chunks"] or 0, 3, 7}:
            _same(sweep.stream(run), int(s["kv_blocks"]) - 1, int(s["block_tokens"]), cpu_chunks=pool,
                  chunk_blocks=s["chunk_blocks"] or 25, flavor="vllm", step_tokens=s["step_tokens"])
