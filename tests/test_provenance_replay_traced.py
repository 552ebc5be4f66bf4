"""Issue 25, item 2, for the replay runs: the sweep's, the curve's and the curve check's numbers
name the files their computation read (records.replayrun's fields touch their files), with no
list written beside them. Checked by editing the records of one run in a copy of four committed
curve runs (two pool sizes, two repeats each; read by the sweep's analysis too): every number
whose value moved names an edited file, and every number that names a file of the run moved
under some edit of it, except those allowed below with the reason no edit of that file can move
them in these records -- a cross-check refuses the edit (test_the_edits_the_allowances_rest_on_are_refused)
or the number is shown not to depend on what the file states here (the tests after it).

The rule (tests/perturbation.py): a number names a file when its computation read it, the reads
a check makes included. A replay's outcomes name every file the replay read (the stream, the
GPU cache, the pool and the step budget), all of them, even where one of its outputs cannot see
one of them (the GPU tier and the pool, below): the replay is one computation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvtier.counterfactual import curvecheck
from kvtier.errors import RawRecordError
from kvtier.numbers import NumbersWriter
from kvtier.production import curve, sweep
from perturbation import Edit, assert_allowed, copier, moved, naming

REPO = Path(__file__).resolve().parent.parent
CFG = yaml.safe_load((REPO / "config/config.yaml").read_text())
C, CF = CFG["curve"], CFG["curve"]["counterfactual"]
ROOT = Path("raw/production/cpu-curve")
RUNS = ("r1-pool-0", "r1-pool-0.03125", "r2-pool-0", "r2-pool-0.03125")
RUN = ROOT / "r1-pool-0.03125"  # the run perturbed: a pool, and the run the curve check fits to
SIZE = (RUN, ROOT / "r2-pool-0.03125")  # both runs of its pool size

# Numbers that may name any file of the run and keep their value under its edits, and why.
ANY_FILE = re.compile(
    # the curve check's fit and its replays read the fitted size's records whole (prompts, times,
    # in_flight, prompt_limit, the flags, the measured medians); its bisections' outcomes are
    # discrete, so an edit of a field they do not read, or a small one, leaves them
    r"curve\.cf\..*"
    # order statistics over runs and sizes: they move only when this run is the one chosen
    r"|.*[._](min|max|median|spread_points)|curve\.(worst_\w+|pool_share_monotone|load1_min|steal_max)"
    r"|sweepcpu\.(worst_\w+|sequential\.worst_points|worst_run)|curve\.time\.(experiment|sweeps)")
# The replay admitted every request on arrival: the client sent each after the previous answer
# (test_every_request_is_admitted_on_arrival), so no block count or pool can make one wait.
ADMISSION = "admitted on arrival: one request at a time, whatever its blocks, the pool and the step budget"
ADMITTED = re.compile(r"sweepcpu\.(run\.\d+\.)?(waited|forced|max_running)")
# The GPU tier's outcome does not see the pool (test_the_gpu_tier_does_not_see_the_pool): a
# prompt's blocks are held in the KV cache after it runs whether they were loaded or computed.
GPU = "the KV cache's hits are the same with no pool at all: no pool geometry or step budget reaches them"
# Per file: what names it and no edit of it moved, and why (each pattern needed by some number).
NAMED_NOT_MOVED: dict[str, dict[re.Pattern[str], str]] = {k: {re.compile(p): why for p, why in v.items()} for k, v in {
    "client.jsonl": {  # chunk times edited: counts, tokens and the admission times (sent_s, total_s) stay
        r"curve\.(exact|failed|requests\w*|size\.\d+\.(exact|requests|simulated\..*)|size\.\d+\.run\.\d+\.p\d+_ttft_ms)"
        r"|sweepcpu\.(run\.\d+\.)?(agree|forced|max_running|missed|near_not_exact|requests|waited|within_near_blocks"
        r"|sequential\..*|simulated\..*)": "the edit moves the chunk times, not the requests sent, their tokens or "
                                          "their send and finish times",
    },
    "host_series.csv": {
        r"curve\.size\.\d+\.(run\.\d+\.steal_mean|(measured|simulated)\..*)": "the load edited below the threshold: "
        "the flag (which the medians over kept runs read) stays; steal not edited",
    },
    "metrics.prom": {
        r"sweepcpu\.(run\.\d+\.)?(preemptions|prompt_tokens|stored_chunks|measured\.share_computed"
        r"|(simulated|sequential)\.diff_points_computed)|curve\.size\.\d+\.(measured|simulated)\.share_computed\..*":
        "64 tokens moved from the KV cache to the pool: prompt and computed tokens stay; other counters not edited",
    },
    "server.log": {
        ADMITTED.pattern: ADMISSION,
        r"(sweepcpu\.run\.\d+\.(simulated|sequential)\.(share_gpu|diff_points_gpu))"
        r"|curve\.size\.\d+\.simulated\.share_gpu\.\w+": GPU,
        r"curve\.(sizes|size\.\d+\.runs)": "refused: the sizes are the runs' pools (the worker's line); one run's pool "
                                            "moved alone is no longer a round of every size (and the pool of both runs "
                                            "of the size moves these counts only by merging sizes)",
    },
    "sent_blocks.npz": {
        ADMITTED.pattern: ADMISSION,
    },
    "run.yaml": {  # the health wait edited: the pool (offload_gib, tier) and the durations stay
        r"curve\.(size\.\d+\.pool_bytes|sizes_with_pool)|sweepcpu\.(run\.\d+\.pool_bytes|with_pool|without_pool)":
        "refused: the pool's bytes are cross-checked against the connector's arguments and the worker's line "
        "(records.geometry); the tier against the worker's line",
    },
}.items()}


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
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(copier(tmp_path_factory.mktemp("replay-before"))(*(ROOT / r for r in RUNS)))
        return _numbers()


@pytest.fixture()
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """edited(edits): the numbers of a fresh copy of the runs with each (path, edit) applied."""
    fresh = copier(tmp_path)

    def edited(edits: list[tuple[Path, Edit]]) -> dict[str, dict]:
        root = fresh(*(ROOT / r for r in RUNS))
        for path, edit in edits:
            edit(root / path)
        monkeypatch.chdir(root)
        return _numbers()
    return edited


# ---------------------------------------------------------------- edits of one record file

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


def _other_last_blocks(path: Path) -> None:
    """Every follow-up turn's prompt ends in a block no other prompt has (its last full block
    differs): the KV cache and the pool miss it, and the prediction is off by about a block."""
    z = dict(np.load(path))
    blocks = z["blocks"].copy()
    ends = [int(z["offsets"][k + 1]) - 1 for k in range(len(z["tokens"])) if z["index"][k] > 0]
    blocks[ends] = np.arange(len(ends)) + int(blocks.max()) + 1
    z["blocks"] = blocks
    np.savez_compressed(path, **z)


def _sub_each(path: Path, pairs: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for old, new in pairs:
        assert text.count(old) == 1, (path, old)
        text = text.replace(old, new)
    path.write_text(text)


def _chunks_of(blocks: int) -> tuple[Edit, Edit]:
    """The pool in chunks of `blocks` server blocks (64 tokens), its bytes kept (0.03125 GiB):
    server.log's worker line and the connector's block size in its args; and run.yaml's statement
    of the same block size, which records.geometry checks against them (read by no number)."""
    per, tokens = blocks * 131072, blocks * 64
    old_line = "bytes_per_offloaded_block=3276800 bytes_per_device_block=131072 blocks_per_chunk=25 host_chunks=10"
    new_line = f"bytes_per_offloaded_block={per} bytes_per_device_block=131072 blocks_per_chunk={blocks} host_chunks={2**25 // per}"

    def log(path: Path) -> None:
        _sub_each(path, [("'block_size': 1600", f"'block_size': {tokens}"), (old_line, new_line)])

    def meta(path: Path) -> None:
        _sub_each(path, [("offload_block_tokens: 1600", f"offload_block_tokens: {tokens}"),
                         ('"block_size":1600', f'"block_size":{tokens}')])
    return log, meta


def _one_file(name: str, *edits: Edit) -> list[tuple[Path, Edit]]:
    return [(RUN / name, e) for e in edits]


# Per file of the run: its edits, each a list of (file, edit) applied together. Most edit the file
# alone; where a value is stated by several files and cross-checked, all of them are edited, and
# a number that moved is credited to each edited file it names.
CHUNKS = _chunks_of(8)  # 32 chunks of 8 blocks: the pool holds 16,384 tokens, not 16,000
EDITS: dict[str, list[list[tuple[Path, Edit]]]] = {
    "host_series.csv": [_one_file("host_series.csv", _more_load)],
    "host.yaml": [_one_file("host.yaml", _later_end)],
    "run.yaml": [_one_file("run.yaml", _slower_health)],
    "client.jsonl": [_one_file("client.jsonl", _faster_chunks)],
    "metrics.prom": [_one_file("metrics.prom", _pool_for_gpu)],
    "server.log": [_one_file("server.log", _smaller_budget),
                   # the pool's chunking, on both runs of the size (the curve's sizes are the runs' pools)
                   [(run / f, e) for run in SIZE for f, e in zip(("server.log", "run.yaml"), CHUNKS)]],
    "sent_blocks.npz": [_one_file("sent_blocks.npz", _other_last_blocks)],
}


@pytest.mark.parametrize("name", list(EDITS))
def test_a_perturbed_run_file_moves_exactly_the_numbers_that_name_it(before: dict, copy, name: str) -> None:
    assert all(d["inputs"] != ["everything"] for d in before.values()), "a number fell back to every input of its rule"
    target = RUN / name
    credited: set[str] = set()
    for edits in EDITS[name]:
        m = moved(before, copy(edits), may_vanish=True)
        files = sorted({p.as_posix() for p, _ in edits})
        assert m, f"editing {files} moved nothing"
        outside = sorted(m - set().union(*(naming(before, f) for f in files)))
        assert not outside, f"moved when {files} changed but name none of them: {outside}"
        credited |= m & naming(before, target)
    rest = {k for k in naming(before, target) - credited if not ANY_FILE.fullmatch(k)}
    assert_allowed(rest, NAMED_NOT_MOVED.get(name, {}), target)


# the edits the allowances' "refused" rests on
REFUSED = [
    ("the worker's pool alone", [(RUN / "server.log", lambda p: _sub_each(p, [("host_chunks=10", "host_chunks=9")]))],
     "gives a pool of"),
    ("one run's pool chunking alone", [(RUN / f, e) for f, e in zip(("server.log", "run.yaml"), CHUNKS)],
     "not rounds of every size once"),
    ("run.yaml's pool bytes alone", [(RUN / "run.yaml", lambda p: _sub_each(p, [("offload_gib: 0.03125", "offload_gib: 0.0625")]))],
     "the run.s sources disagree on its geometry"),
]


@pytest.mark.parametrize(("what", "edits", "error"), REFUSED, ids=[w for w, _, _ in REFUSED])
def test_the_edits_the_allowances_rest_on_are_refused(copy, what: str, edits, error: str) -> None:
    with pytest.raises(RawRecordError, match=error):
        copy(edits)


def test_every_request_is_admitted_on_arrival(before: dict) -> None:
    """ADMISSION: the client sent each request of every run after the answer before it, so the
    replay as the server ran them admits each on arrival (nothing runs: sim.resident starts it
    whatever its blocks), and its admission counts are those of any stream and pool."""
    for r in RUNS:
        reqs = sweep.read_run(REPO / ROOT / r).requests
        assert (reqs.sent_s.iloc[1:].to_numpy() >= (reqs.sent_s + reqs.total_s).iloc[:-1].to_numpy()).all(), r
    admitted = {k: d["value"] for k, d in before.items() if ADMITTED.fullmatch(k)}
    assert admitted and all(v == (1 if k.endswith("max_running") else 0) for k, v in admitted.items()), admitted


def test_the_gpu_tier_does_not_see_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU: both replays of the edited run give every request the same KV-cache hits with no pool
    (no chunks, no step budget) as with the run's own: a prompt's blocks are in the KV cache after
    it runs, loaded or computed. So the GPU share names server.log (the replay read it) and no
    edit of server.log can move it."""
    import dataclasses

    monkeypatch.chdir(REPO)
    run = sweep.read_run(RUN)
    requests = sweep.stream(run)
    table, _ = sweep.predict(run, requests)
    bare = dataclasses.replace(run, shape=dataclasses.replace(run.shape, cpu_chunks=None, chunk_blocks=None, step_tokens=None))
    alone, _ = sweep.predict(bare, requests)
    assert table.pred_pool_tokens.sum() > 0 and alone.pred_pool_tokens.sum() == 0  # the pool served some, then none
    assert table.pred_gpu_tokens.tolist() == alone.pred_gpu_tokens.tolist()
    assert table.seq_gpu_tokens.tolist() == alone.seq_gpu_tokens.tolist()


def test_settings_name_no_record_and_the_fit_never_sees_the_other_sizes(before: dict) -> None:
    for key in ("curve.load_threshold", "curve.cf.goal_points", "curve.percentile.low", "sweepcpu.near_blocks", "curve.runs"):
        assert before[key]["inputs"] == [], key
    fitted = {p for p in before["curve.cf.model.think_median"]["inputs"]}
    assert fitted and all("pool-0.03125" in p for p in fitted), sorted(fitted)  # the fitted size's records alone
    assert before["curve.time.launch.median"]["inputs"] == sorted((ROOT / r / "host.yaml").as_posix() for r in RUNS)
