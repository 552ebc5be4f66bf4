"""Long-context eviction runs: the sizing, the evictor derivation and stop rule, the preflight,
the launch order and a killed run's resume, against the in-process fake vLLM.

Sizes by hand (fake: a token is a word, its cache holds 640 tokens in 16-token blocks, LRU):
short evictors of 100 tokens, margin 0.1 -> upper bound ceil((640 + 200) x 1.1 / 100) = 10, and
the stop rule wants 640 x 1.1 = 704 tokens placed: ceil(704 / 100) = 8 evictors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from kvtier.eviction import longctx
from kvtier.eviction.records import RunWriter, read_run
from kvtier.eviction.runner import Harness, HarnessFailed, Plan, derive_evictors, out_threshold
from kvtier.serving.client import ServingClient
from kvtier.serving.server import PreflightError

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from fake_vllm import FakeVllm  # noqa: E402

STATIC = {"host": {"hostname": "test"}, "model": {"path": "fake", "served_name": "fake", "params": None},
          "server": {"mode": "attached", "url": "http://fake", "tier": "none", "offload_block_tokens": None},
          "versions": {"python": "3"}}
GiB = 2**30


def harness(fake: FakeVllm, run_dir: Path, **plan) -> Harness:
    client = ServingClient("http://fake", transport=fake.transport())
    return Harness(client, RunWriter(run_dir), "test", Plan(target_tokens=200, **{"warmup_tokens": 0, **plan}), STATIC,
                   progress=False)


def test_short_evictor_derivation_by_hand():
    assert derive_evictors(640, 200, 0.1, 100) == 10
    assert derive_evictors(640, 200, 0.1) == 5          # unchanged without a length: the conversation's
    assert out_threshold(640, 0.1) == 704


def test_sizing_by_hand():
    s = longctx.size_for(200_000)
    # 200,000 x 1.01 + 16 + 64 = 202,080 -> 127 blocks of 1,600 = 203,200; 1.25 x that = 254,000 -> 254,400
    assert s.max_model_len == 203_200 and s.model_positions == 262_144
    assert s.kv_cache_tokens == 254_400 and s.kv_cache_bytes == 254_400 * 2048
    # (254,400 + 200,000) x 1.1 / 16,384 = 30.5 -> 31 evictors at most; pool (31 x 16,384 + 203,200) x 2,048 x 1.2
    # = 1,748,268,646 B = 1.628 GiB -> 1.6875 GiB (sixteenths)
    assert s.evictor_tokens == 16_384 and s.evictors_max == 31 and s.pool_gib == 1.6875
    assert s.out_threshold_tokens == 279_840 and s.warmup_tokens == 8192
    small = longctx.size_for(8000)
    assert small.evictor_tokens == 8000 and small.model_positions == 32768 and small.warmup_tokens == 8000


def test_short_evictors_stop_once_the_counters_show_it_out(tmp_path):
    meta = harness(FakeVllm(), tmp_path / "r", evictor_tokens=100, stop_when_out=True).run()
    run = read_run(tmp_path / "r")
    ev = [r for r in run.requests if r["phase"] == "evictors"]
    assert meta["plan"]["evictors"] == 10 and len(ev) == 8
    assert all(abs(r["prompt_tokens_expected"] - 100) <= 1 for r in ev)
    e = meta["evictions"]["evictors.1"]
    assert e["sent"] == 8 and e["out_by_counters"] and e["placed_tokens"] >= 704
    chk = meta["checks"]["restore.1"]
    assert chk["evicted"] and chk["gpu_hit_tokens"] == 0


def test_each_round_has_fresh_short_evictors(tmp_path):
    meta = harness(FakeVllm(), tmp_path / "r", evictor_tokens=100, stop_when_out=True, rounds=2).run()
    run = read_run(tmp_path / "r")
    seeds = {rnd: {r["conversation_seed"] for r in run.requests if r["phase"] == "evictors" and r["round"] == rnd} for rnd in (1, 2)}
    assert not seeds[1] & seeds[2]
    # round 2 places as many new tokens as round 1: nothing of round 1 is hit again
    assert meta["evictions"]["evictors.2"]["sent"] == 8
    assert meta["checks"]["restore.1"]["evicted"] and meta["checks"]["restore.2"]["evicted"]


def test_killed_run_resumes_without_redoing_the_cold_read(tmp_path):
    fake = FakeVllm()
    fake.fail_at, fake.fail_how = 6, "interrupt"  # cold, hit, evictors 1-3 done; killed at the fourth
    with pytest.raises(KeyboardInterrupt):
        harness(fake, tmp_path / "r", evictor_tokens=100, stop_when_out=True, rounds=2).run()
    assert read_run(tmp_path / "r").meta["phases_completed"] == ["cold", "hit"]
    fake.fail_at = None
    computed_before = fake.by_source["local_compute"]
    meta = harness(fake, tmp_path / "r", evictor_tokens=100, stop_when_out=True, rounds=2).run()
    run = read_run(tmp_path / "r")
    second = [r["phase"] for r in run.requests if r["attempt"] == 2]
    assert "cold" not in second and "hit" not in second and "prime" not in second
    # round 1 starts again: its first three evictors are still cached (they place only their last block), so
    # the counters ask for more of them (10, the bound); round 2 needs its 8
    assert second == ["evictors"] * 10 + ["restore"] + ["evictors"] * 8 + ["restore"]
    assert len([r for r in run.requests if r["phase"] == "cold"]) == 1
    assert meta["checks"]["restore.1"]["evicted"] and meta["checks"]["restore.2"]["evicted"]
    assert meta["status"] == "complete"


def test_preflight_counts_kv_pool_and_server():
    s = longctx.size_for(200_000)
    need = s.kv_cache_bytes + s.pool_gib * GiB + (longctx.SERVER_OVERHEAD_GIB + 1) * GiB
    assert longctx.preflight(s, "native", mem_available=int(need) + 1)
    with pytest.raises(PreflightError, match="free RAM"):
        longctx.preflight(s, "native", mem_available=int(need) - 1)
    assert longctx.preflight(s, "none", mem_available=int(need - s.pool_gib * GiB) + 1)  # the control has no pool
    with pytest.raises(PreflightError, match="/dev/shm"):
        longctx.preflight(s, "native", host_pool="shm", mem_available=int(need) + 1, shm_free=GiB)
    with pytest.raises(PreflightError, match="positions"):
        longctx.preflight(s, "native", mem_available=int(need) + 1, model_positions=131072)


CFG = {"tiers": ["native", "none"], "sizes": [{"tokens": 8000, "launches": 2},
                                             {"tokens": 200000, "launches": 1, "rounds": 3, "tiers": {"none": {"rounds": 1}}}],
       "setup": "longctx", "out": "raw/eviction", "model_prefix": "data/tiny-model", "vllm_bin": "v/bin/vllm", "port": 8073,
       "seed": 1, "max_tokens": 16}


def test_launch_order_interleaves_tiers():
    got = [(x.label, x.rounds) for x in longctx.launches(CFG)]
    assert got == [("8k-1-native", 1), ("8k-1-none", 1), ("8k-2-native", 1), ("8k-2-none", 1),
                   ("200k-1-native", 3), ("200k-1-none", 1)]
    assert [x.label for x in longctx.launches(CFG, [200000])] == ["200k-1-native", "200k-1-none"]


def test_harness_argv_carries_the_sizing():
    launch = longctx.launches(CFG, [200000])[1]
    argv = longctx.harness_argv(CFG, "R", launch, python="py")
    joined = " ".join(argv)
    assert "--offload-gib 0 " in joined and "--kv-cache-memory-bytes=521011200" in joined
    assert "--model data/tiny-model-262144" in joined and "--max-model-len 203200" in joined
    assert "--evictor-tokens 16384 --stop-when-out" in joined and "--run-id R-200k-1-none" in joined


def test_driver_skips_complete_and_refuses_existing_without_resume(tmp_path, capsys):
    cfg = {**CFG, "out": str(tmp_path), "sizes": [{"tokens": 8000, "launches": 1}]}
    done = tmp_path / "longctx" / "R-8k-1-native"
    done.mkdir(parents=True)
    (done / "run.yaml").write_text("status: complete\n")
    failed = tmp_path / "longctx" / "R-8k-1-none"
    failed.mkdir()
    (failed / "run.yaml").write_text("status: failed\n")
    with pytest.raises(SystemExit, match="--resume"):
        longctx.drive(cfg, "R", resume=False, only=None, pin=False, dry=True)
    assert longctx.drive(cfg, "R", resume=True, only=None, pin=False, dry=True) == 0
    out = capsys.readouterr().out
    line = [ln for ln in out.splitlines() if ln.startswith("8k-1-none: ") and "kvtier.harness" in ln][0]
    assert "8k-1-native: complete" in out and "--run-id R-8k-1-none" in line and line.endswith(" --resume")


# ---------------------------------------------------------------- the logprob check's boundary swap
def _pos(token: str, lp: float, top: list[tuple[str, float]]) -> dict:
    return {"token": token, "logprob": lp, "top": [list(t) for t in top]}


# The spike's false alarm (NOTES.md, c2:restore.1): shared alternatives within 1.9e-5, the fifth
# alternative swapped between two near-tied tokens, '313' at -6.8070 against '572' at -6.8031.
SHARED = [("7", -0.52), ("19", -2.11), ("88", -3.0), ("104", -4.5)]
RESTORED = [_pos("7", -0.52, SHARED + [("313", -6.8070)])]
HIT = [_pos("7", -0.520019, [(t, v + 1.9e-5) for t, v in SHARED] + [("572", -6.8031)])]


def test_a_swap_at_the_edge_of_the_top_k_is_within_rounding_when_compute_differs():
    from kvtier.eviction import logprobs as lp

    cmp = lp.compare(RESTORED, HIT)
    assert cmp["top_sets_equal"] is False and cmp["max_abs_diff"] == pytest.approx(1.9e-5, rel=1e-3)
    # '572' is listed by the hit only, 0.0039 above the restore's lowest listed value (-6.8070)
    assert cmp["boundary_gap"] == pytest.approx(0.0039, abs=1e-9)
    v = lp.verdict(cmp, same_compute=False, tolerance=0.05)
    assert v["passed"] is True and v["bit_identical"] is False
    # the same swap where both requests computed the same tokens: bit-identical is required, it fails
    assert lp.verdict(cmp, same_compute=True, tolerance=0.05)["passed"] is False


def test_an_alternative_far_above_the_others_edge_still_fails():
    from kvtier.eviction import logprobs as lp

    wrong = [_pos("7", -0.52, SHARED + [("999", -5.0)])]  # 1.8 above the hit's fifth: not rounding
    cmp = lp.compare(wrong, HIT)
    assert cmp["boundary_gap"] == pytest.approx(1.8031, abs=1e-6)
    assert lp.verdict(cmp, same_compute=False, tolerance=0.05)["passed"] is False
    assert lp.verdict(lp.compare(HIT, HIT), same_compute=True, tolerance=0.05)["bit_identical"] is True


# ---------------------------------------------------------------- the analysis
def test_power_fit_against_scipy_and_by_hand():
    from scipy.stats import linregress

    from kvtier.eviction.longctx_analysis import power_fit

    n = [8192, 32768, 65536, 131072, 204800]
    fit = power_fit(n, [7.9e-9 * x**2 for x in n])  # the spike's pure quadratic
    assert fit["exponent"] == pytest.approx(2.0, abs=1e-9) and fit["coefficient"] == pytest.approx(7.9e-9, rel=1e-6)
    gpu_n, gpu_t = [200000, 500000, 889000, 981000], [11.8, 31.3, 58.9, 66.0]  # raw/production/C/coldreads.csv
    ref = linregress(np.log(gpu_n), np.log(gpu_t))
    assert power_fit(gpu_n, gpu_t)["exponent"] == pytest.approx(ref.slope, rel=1e-9)
    # end points alone: log(66.0 / 11.8) / log(981 / 200) = 1.0838
    assert ref.slope == pytest.approx(1.08, abs=0.05)
    with pytest.raises(ValueError):
        power_fit([1000, 1000], [1.0, 1.1])


def _fake_launch(tmp_path: Path, name: str, target: int) -> Path:
    client = ServingClient("http://fake", transport=FakeVllm(cache_tokens=4 * target).transport())
    static = {**STATIC, "host": {"hostname": "test", "cpus": 2}}
    Harness(client, RunWriter(tmp_path / name), "longctx",
            Plan(target_tokens=target, warmup_tokens=0, evictor_tokens=target // 2, stop_when_out=True, rounds=2),
            static, progress=False).run()
    return tmp_path / name


def test_size_table_from_records(tmp_path):
    from kvtier.eviction import longctx_analysis as lx

    schemas = Path("workflow/schemas/eviction-run.schema.yaml"), Path("workflow/schemas/eviction-request.schema.yaml")
    dirs = [_fake_launch(tmp_path, f"r{k}-{n}", n) for n in (200, 400) for k in (1, 2)]
    reqs, runs = lx.load(dirs, *schemas)
    t = lx.size_table(reqs, runs, 3.0)
    assert list(t.target_tokens) == [200, 400] and list(t.tier) == ["none", "none"]
    assert list(t.launches) == [2, 2] and list(t.restores) == [4, 4]  # two launches x two rounds
    # each ratio is its cycle's cold TTFT over the restore's: recompute one by hand from the records
    r = reqs[reqs.run == dirs[0].name]
    cold = float(r[r.phase == "cold"].ttft_s.iloc[0])
    first = float(r[(r.phase == "restore") & (r["round"] == 1)].ttft_s.iloc[0])
    assert cold / first in set(lx.ratios(reqs).ratio)
    # every restore recomputed the whole conversation on the fake (no pool): computed = prompt
    assert t.computed_tokens_median.tolist() == t.prompt_tokens.tolist()


def test_longctx_records_are_kept_out_of_the_eviction_tables(tmp_path):
    from kvtier.eviction.workflow import pinned_records

    m = tmp_path / "MANIFEST.tsv"
    m.write_text("path\tbytes\tsha256\tclass\tdescription\n"
                 "raw/eviction/cpu/a/run.yaml\t1\tx\tmeasured\td\n"
                 "raw/eviction/longctx/b/run.yaml\t1\tx\tmeasured\td\n")
    assert pinned_records(str(m), "raw/eviction", exclude=("raw/eviction/longctx",)) == ["raw/eviction/cpu/a/run.yaml"]
    assert pinned_records(str(m), "raw/eviction/longctx") == ["raw/eviction/longctx/b/run.yaml"]


def test_a_launch_waits_for_a_quiet_machine_but_not_forever():
    loads = iter([(9.0,), (7.0,), (3.5,), (1.0,)])
    slept = []
    assert longctx.wait_for_quiet(2.0, 300, poll_s=10, load=lambda: next(loads), cpus=2, sleep=slept.append) == 3.5
    assert slept == [10, 10]  # 9.0 and 7.0 are above 2.0 x 2 CPUs; 3.5 is below
    busy = []
    assert longctx.wait_for_quiet(2.0, 30, poll_s=10, load=lambda: (8.0,), cpus=2, sleep=busy.append) == 8.0
    assert busy == [10, 10, 10]  # gives up after 30 s and starts anyway (the load is recorded and judged after)


def test_the_rule_hands_the_launcher_the_section_with_its_config_overrides(tmp_path, capsys):
    """`snakemake longctx --config 'experiments={"longctx": {...}}'`: the rule passes the section as
    the invocation sees it (--settings), not config/config.yaml's, so an override of the sizes and
    tiers is what the launcher plans (issue 33: before, every configured size ran whatever was asked)."""
    import json
    import subprocess

    import yaml

    repo = Path(__file__).resolve().parent.parent
    cfg = yaml.safe_load((repo / "config" / "config.yaml").read_text())["experiments"]["longctx"]
    small = {**cfg, "tiers": ["native"], "sizes": [{"tokens": 8000, "launches": 1}]}
    assert longctx.main(["plan", "--settings", json.dumps(small)]) == 0
    assert [ln.split()[0] for ln in capsys.readouterr().out.splitlines()] == ["8k-1-native"]
    exe = Path(sys.executable).with_name("snakemake")
    override = 'experiments={"longctx": {"activate": true, "tiers": ["native"], "sizes": [{"tokens": 8000, "launches": 1}]}}'
    done = subprocess.run([str(exe), "-n", "-p", "--nolock", "--cores", "1", "longctx", "--config", override], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shell = next(ln for ln in (done.stdout + done.stderr).splitlines() if "kvtier longctx run" in ln)
    settings = json.loads(shlex_split(shell)[shlex_split(shell).index("--settings") + 1])
    assert settings["sizes"] == [{"tokens": 8000, "launches": 1}] and settings["tiers"] == ["native"]
    assert settings["lock"] == cfg["lock"]  # the rest of the section as configured


def shlex_split(line: str) -> list[str]:
    import shlex

    return shlex.split(line[line.index("PYTHONPATH=src"):])
