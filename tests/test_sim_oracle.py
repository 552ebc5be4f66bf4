"""vLLM's own managers as the oracle (issue 10, item 4): the same request streams driven through
vLLM 0.32's KVCacheManager and, for the native CPU tier, its CPUOffloadingManager
(tests/oracle/vllm_managers.py, run by the vLLM venv's Python: no model, no server) and through
TieredCache must give equal GPU and CPU tokens on every request -- the lab, streams built to
reach the copy, free-order, alignment and eviction cases, and samples of the public traces."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from kvtier.lab import experiments as ex
from kvtier.sim import Request, TieredCache, fast, prompt_request
from kvtier.workloads import traces

REPO = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_VENV", REPO / ".venv-vllm")) / "bin" / "python"
TRACES = Path(os.environ.get("KVTIER_TRACES", REPO.parent / "shared" / "traces"))
if not TRACES.exists():  # a worktree under /work/wt/: the shared folder is two levels up
    TRACES = REPO.parent.parent / "shared" / "traces"

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM venv at {VLLM_PY.parent.parent}")]


def _stream(seed: int) -> list[tuple[Request, int]]:
    """Sessions that grow and repeat, whole-block prompts (recomputed last block) among them;
    each request with the KV tokens generated after its prompt."""
    rng = random.Random(seed)
    out = []
    for i in range(300):
        doc, gen = rng.randrange(12), rng.choice([0, 1, 15, 40])
        tokens = rng.choice([16 * rng.randint(1, 12), rng.randint(5, 200)])
        out.append((prompt_request(iter(range(doc << 20, (doc << 20) + 64)), tokens, 16, generated=gen, label=str(i)), gen))
    return out


def _jobs() -> list[tuple[str, int, int, list[tuple[Request, int]]]]:
    lab = ex.LabShape(docs=10, doc_tokens=5011, gpu_cache_tokens=21_520, block_tokens=16, generated=7)
    jobs = [("lab", 16, lab.gpu_blocks, [(r, 7) for r in ex.requests(lab)])]
    jobs += [(f"stream/{cap}", 16, cap, _stream(cap)) for cap in (20, 45, 120)]
    # the native CPU tier: (name, B, GPU blocks, requests, CPU chunks, blocks per chunk)
    jobs += [(f"native/{cap}/{cpu}/{k}", 16, cap, _stream(cap + cpu + k), cpu, k)
             for cap, cpu, k in ((20, 30, 1), (45, 40, 2), (30, 12, 4), (120, 60, 3), (20, 200, 1))]
    jobs.append(("native/lab", 16, lab.gpu_blocks, [(r, 7) for r in ex.requests(lab)], 120, 16))
    # stores per scheduler step of chunked prefill (issue 21): pools that the stream fills, prefills of
    # several steps, so offers evict chunks of the same request and meet the previous step's stores
    # in flight: (..., CPU chunks, blocks per chunk, tokens per step)
    jobs += [(f"native-steps/{cap}/{cpu}/{k}/{S}", 16, cap, _stream(7 * cap + cpu + k + S), cpu, k, S)
             for cap, cpu, k, S in ((20, 3, 1, 32), (45, 4, 1, 48), (18, 8, 2, 40), (120, 5, 1, 16), (16, 6, 2, 40),
                                    (45, 2, 1, 64))]
    moon = TRACES / "mooncake" / "conversation_trace.jsonl"
    if moon.exists():
        w = traces.mooncake(moon, 512)
        pairs = [(r, max(int(o) - 1, 0)) for r, o in zip(w.requests[:1_500], w.output_tokens)]
        longest = max(r.n_blocks + r.unique + r.scratch for r, _ in pairs)
        jobs += [("mooncake", 512, 1_500, pairs[:400]), ("native/mooncake", 512, longest + 10, pairs, 3_000, 1)]
    agentic = TRACES / "kv-cache-tester" / "traces_0001-0100.tgz"
    if agentic.exists():
        w = traces.kv_cache_tester(agentic, 64)
        pairs = [(r, max(int(o) - 1, 0)) for r, o in zip(w.requests[:600], w.output_tokens)]
        longest = max(r.n_blocks + r.unique + r.scratch for r, _ in pairs)
        jobs += [("kv-cache-tester", 64, 20_000, pairs[:300]), ("native/kv-cache-tester", 64, longest + 50, pairs, 10_000, 4)]
    # the measured sweep's smallest pool: its own stream (committed), shape and budget -- 64-token blocks,
    # 1,600-token chunks, a 10-chunk pool, 2,048 tokens a step
    from kvtier.production import sweep

    run = sweep.read_run(REPO / "raw/production/cpu-sweep/pool-0.03125")
    s = run.shape
    pairs = list(zip(sweep.stream(run), (run.requests.max_tokens - 1).tolist()))[:700]
    jobs.append(("native-steps/sweep-32MiB", int(s["block_tokens"]), int(s["kv_blocks"]) - 1, pairs, s["cpu_chunks"],
                 s["chunk_blocks"], s["step_tokens"]))
    return jobs


def _payload(jobs) -> list[dict]:
    out = []
    for _, B, cap, pairs, *cpu in jobs:
        for r, gen in pairs:  # the request says what vLLM will hold: check it agrees with the tokens sent
            kv = r.tokens + gen
            assert (r.scratch, r.unique) == (1 if kv % B else 0, kv // B - len(r.blocks)), r.label
        job = {"block_tokens": B, "gpu_blocks": cap, "requests": [[list(r.blocks), r.tokens, g] for r, g in pairs]}
        if cpu:
            job["cpu_chunks"], job["chunk_blocks"] = cpu[:2]
            job["step_tokens"] = cpu[2] if len(cpu) > 2 else None
        out.append(job)
    return out


def test_gpu_hits_equal_vllm_kv_cache_manager() -> None:
    jobs = _jobs()
    done = subprocess.run([str(VLLM_PY), str(REPO / "tests" / "oracle" / "vllm_managers.py")],
                          input=json.dumps(_payload(jobs)), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    oracle = json.loads(done.stdout)
    stepwise_differs = {}
    for (name, B, cap, pairs, *cpu), want in zip(jobs, oracle):
        reqs = [r for r, _ in pairs]
        kw = dict(cpu_chunks=cpu[0], chunk_blocks=cpu[1], flavor="vllm", step_tokens=cpu[2] if len(cpu) > 2 else None) \
            if cpu else {}
        outs = TieredCache(cap, B, **kw).replay(reqs)
        # the scheduler computes a prompt's last token again when a load reached it
        want = [(gt, ext - (1 if ext and gt + ext == r.tokens else 0)) for (gt, ext), r in zip(want, reqs)]
        got = [(o.gpu_tokens, o.cpu_tokens) for o in outs]
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        assert not bad, f"{name}: {len(bad)} of {len(reqs)} requests differ, first {bad[0]}: sim {got[bad[0]]} vLLM {want[bad[0]]}"
        assert [(o.gpu_tokens, o.cpu_tokens) for o in fast.replay(reqs, cap, B, **kw)] == got, name  # the compiled core
        assert sum(w[0] for w in want) > 0, name
        if cpu:
            assert sum(w[1] for w in want) > 0, name
        if len(cpu) > 2:  # the offers' timing shows: all offers at once misses some requests
            once = TieredCache(cap, B, **dict(kw, step_tokens=None)).replay(reqs)
            stepwise_differs[name] = sum((o.gpu_tokens, o.cpu_tokens) != w for o, w in zip(once, want))
    assert sum(stepwise_differs.values()) > 0, stepwise_differs
    assert sum(w[0] for w in oracle[0][20:]) == 21_488  # the lab's reverse pass, by vLLM's own code
