"""Issue 25, item 2, for the replay runs: the sweep's, the curve's and the curve check's numbers
name the files their computation read (records.replayrun's fields touch their files), with no
list written beside them. Checked by perturbing one record file of one run at a time, in a copy
of four committed curve runs (two pool sizes, two repeats each; read by the sweep's analysis too):
every number whose value moved names the file, and every number that names it moved, except the
few listed in NAMED_NOT_MOVED, each with its reason.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvtier.counterfactual import curvecheck
from kvtier.numbers import NumbersWriter
from kvtier.production import curve, sweep

REPO = Path(__file__).resolve().parent.parent
CFG = yaml.safe_load((REPO / "config/config.yaml").read_text())
C, CF = CFG["curve"], CFG["curve"]["counterfactual"]
ROOT = Path("raw/production/cpu-curve")
RUNS = ("r1-pool-0", "r1-pool-0.03125", "r2-pool-0", "r2-pool-0.03125")
RUN = ROOT / "r1-pool-0.03125"  # the run perturbed: a pool, and the run the curve check fits to

# Numbers that name a perturbed file but keep their value under its perturbation, and why. The
# provenance is per file: a number names a file when its computation read the file, not when it
# read the field a perturbation changes.
ANY_FILE = (
    # the curve check's fit and its replays read the fitted size's records whole (prompts, times,
    # in_flight, prompt_limit, the flags, the measured medians); its bisections' outcomes are
    # discrete, so a perturbation of a field they do not read, or a small one, leaves them
    r"curve\.cf\..*"
    # order statistics over runs and sizes: they move only when this run is the one chosen
    r"|.*[._](min|max|median|spread_points)|curve\.(worst_\w+|pool_share_monotone|load1_min|steal_max)"
    r"|sweepcpu\.(worst_\w+|sequential\.worst_points|worst_run)|curve\.time\.(experiment|sweeps)")
NAMED_NOT_MOVED = {
    # chunk times perturbed: counts, tokens and the admission times (sent_s, total_s) stay
    "client.jsonl": r"curve\.(exact|failed|requests\w*|size\.\d+\.(exact|requests|simulated\..*)|size\.\d+\.run\.\d+\.p\d+_ttft_ms)"
                    r"|sweepcpu\.(run\.\d+\.)?(agree|forced|max_running|missed|near_not_exact|requests|waited|within_near_blocks"
                    r"|sequential\..*|simulated\..*)",
    # the load perturbed, below the threshold: the flag (which the medians over kept runs read) stays; steal not perturbed
    "host_series.csv": r"curve\.size\.\d+\.(run\.\d+\.steal_mean|(measured|simulated)\..*)",
    # 64 tokens moved from the KV cache to the pool: prompt and computed tokens stay; other counters not perturbed
    "metrics.prom": r"sweepcpu\.(run\.\d+\.)?(preemptions|prompt_tokens|stored_chunks|measured\.share_computed"
                    r"|(simulated|sequential)\.diff_points_computed)|curve\.size\.\d+\.(measured|simulated)\.share_computed\..*",
    # the scheduler's budget / one block id perturbed: the pool geometry (the worker's line), the sizes
    # and repeats, and every replay output whose token counts the change did not reach stay
    "server.log": r"curve\.(chunk_tokens|exact|repeats_\w+|sizes\w*|size\.\d+\.(runs|exact|pool_\w+|simulated\..*))"
                  r"|curve\.time\.\w+\.\w+|curve\.time\.\w+|sweepcpu\..*",
    "sent_blocks.npz": r"curve\.(exact|size\.\d+\.(exact|simulated\..*))|sweepcpu\..*",
    # the health wait perturbed: the pool (offload_gib, tier) and the durations stay
    "run.yaml": r"curve\.(size\.\d+\.pool_bytes|sizes_with_pool)|sweepcpu\.(run\.\d+\.pool_bytes|with_pool|without_pool)",
}


def _numbers() -> dict[str, dict]:
    dirs = [str(ROOT / r) for r in RUNS]
    out: dict[str, dict] = {}
    runs = curve.analyse(dirs, C["load_threshold"], C["steal_threshold"])
    w = NumbersWriter("curve", "test", ["everything"])
    curve.register_numbers(w, runs, C["load_threshold"], C["steal_threshold"])
    curve.register_timing(w, runs)
    _, record, table = curvecheck.predict(runs, CF["fit_offload_gib"], tuple(CF["prompt_edges"]), CF["service_bins"],
                                          CFG["coldread"]["above_last"], CFG["counterfactual"]["think_time"],
                                          CF["reusable_share"], CFG["counterfactual"]["seed"])
    curvecheck.register(w, record, table, CF["goal_points"])
    out.update(w.numbers)
    s = NumbersWriter("sweepcpu", "test", ["everything"])
    sweep.register_numbers(s, sweep.analyse(dirs))
    out.update(s.numbers)
    return out


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("replay-before")
    for r in RUNS:
        shutil.copytree(REPO / ROOT / r, tmp / ROOT / r)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        return _numbers()


@pytest.fixture()
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for r in RUNS:
        shutil.copytree(REPO / ROOT / r, tmp_path / ROOT / r)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------- one perturbation per record file

def _more_load(path: Path) -> None:  # every load sample 0.5 higher, still below the threshold
    lines = path.read_text().splitlines()
    head = lines[0].split(",")
    i = head.index("load1")
    rows = [ln.split(",") for ln in lines[1:]]
    for r in rows:
        r[i] = str(float(r[i]) + 0.5)
    path.write_text("\n".join([lines[0]] + [",".join(r) for r in rows]) + "\n")


def _later_end(path: Path) -> None:  # the observation ends 30 s later (after every answer)
    text = path.read_text()
    meta = yaml.safe_load(text)
    end = meta["observation"]["end"]
    meta["observation"]["end"] = (end if not isinstance(end, str) else __import__("datetime").datetime.fromisoformat(end)) \
        + __import__("datetime").timedelta(seconds=30)
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _slower_health(path: Path) -> None:  # the server took a second longer to answer /health
    meta = yaml.safe_load(path.read_text())
    meta["server"]["health_wait_s"] = float(meta["server"]["health_wait_s"]) + 1.0
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _faster_chunks(path: Path) -> None:  # every streamed chunk after the first 10% sooner (TPOT moves, TTFT does not)
    out = []
    for ln in path.read_text().splitlines():
        rec = json.loads(ln)
        if rec.get("status") == "ok":
            c = rec["chunk_s"]
            rec["chunk_s"] = [c[0]] + [round(c[0] + 0.9 * (x - c[0]), 6) for x in c[1:]]
            rec["first_chunk_s"] = round(rec["first_chunk_s"] * 0.95, 6)  # the service model's latency
        out.append(json.dumps(rec, sort_keys=True))
    path.write_text("\n".join(out) + "\n")


def _pool_for_gpu(path: Path) -> None:  # 64 tokens credited to the pool instead of the KV cache (sums unchanged)
    def shift(m: re.Match) -> str:
        d = {"local_cache_hit": -64.0, "external_kv_transfer": 64.0}[m.group(1)]
        return f'{m.group(0).rsplit(" ", 1)[0]} {float(m.group(2)) + d}'
    text = re.sub(r'vllm:prompt_tokens_by_source_total\{[^}]*source="(local_cache_hit|external_kv_transfer)"\} ([0-9.e+]+)',
                  shift, path.read_text())
    path.write_text(text)


def _smaller_budget(path: Path) -> None:  # the scheduler said a smaller token budget per step
    with path.open("a") as f:
        f.write("(EngineCore pid=1) INFO 12-02 06:00:00 [scheduler.py:1] Chunked prefill is enabled with "
                "max_num_batched_tokens=512.\n")


def _other_block(path: Path) -> None:  # a request midway starts with a block id no other prompt has
    z = dict(np.load(path))
    z["blocks"] = z["blocks"].copy()
    z["blocks"][int(z["offsets"][len(z["tokens"]) // 2])] = int(z["blocks"].max()) + 1
    np.savez_compressed(path, **z)


PERTURB = {"host_series.csv": _more_load, "host.yaml": _later_end, "run.yaml": _slower_health,
           "client.jsonl": _faster_chunks, "metrics.prom": _pool_for_gpu, "server.log": _smaller_budget,
           "sent_blocks.npz": _other_block}


@pytest.mark.parametrize("name", list(PERTURB))
def test_a_perturbed_run_file_moves_exactly_the_numbers_that_name_it(before: dict, copy: Path, name: str) -> None:
    assert all(d["inputs"] != ["everything"] for d in before.values()), "a number fell back to every input of its rule"
    target = (RUN / name).as_posix()
    PERTURB[name](copy / RUN / name)
    after = _numbers()
    moved = {k for k in before if k not in after or before[k]["value"] != after[k]["value"]}
    naming = {k for k, d in before.items() if target in d["inputs"]}
    assert moved, f"perturbing {name} moved nothing"
    assert moved <= naming, f"moved when {name} changed but do not name it: {sorted(moved - naming)}"
    allowed = re.compile(ANY_FILE + "|" + NAMED_NOT_MOVED.get(name, r"(?!)"))
    stale = sorted(k for k in naming - moved if not allowed.fullmatch(k))
    assert not stale, f"name {name} but did not move: {stale}"


def test_settings_name_no_record_and_the_fit_never_sees_the_other_sizes(before: dict) -> None:
    for key in ("curve.load_threshold", "curve.cf.goal_points", "curve.percentile.low", "sweepcpu.near_blocks", "curve.runs"):
        assert before[key]["inputs"] == [], key
    fitted = {p for p in before["curve.cf.model.think_median"]["inputs"]}
    assert fitted and all("pool-0.03125" in p for p in fitted), sorted(fitted)  # the fitted size's records alone
    assert before["curve.time.launch.median"]["inputs"] == sorted((ROOT / r / "host.yaml").as_posix() for r in RUNS)
