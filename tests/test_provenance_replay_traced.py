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
one of them (the GPU tier and the pool, below): the replay is one computation. So is the fit to
one size (curve.cf.*, FIT): the one pattern allowed for every file.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import yaml

from kvtier.counterfactual import curvecheck
from kvtier.errors import RawRecordError
from kvtier.numbers import NumbersWriter
from kvtier.production import curve, sweep
from perturbation import Edit, assert_allowed, copier, moved, naming, sub

REPO = Path(__file__).resolve().parent.parent
CFG = yaml.safe_load((REPO / "config/config.yaml").read_text())
C, CF = CFG["curve"], CFG["curve"]["counterfactual"]
ROOT = Path("raw/production/cpu-curve")
RUNS = ("r1-pool-0", "r1-pool-0.03125", "r2-pool-0", "r2-pool-0.03125")
RUN = ROOT / "r1-pool-0.03125"  # the run perturbed: a pool, and the run the curve check fits to
SIZE = (RUN, ROOT / "r2-pool-0.03125")  # both runs of its pool size

# The fit to one size (curve.cf.*) reads the fitted size's records. Its parts (its size, targets,
# service model, prefix, the stream's reuse) name what each read and are allowed per file below;
# these patterns are allowed for every file the fit read, with why: its fixed parts, the size
# rows' per-row files, and its outcome, which names all the fit read (one computation).
FIT: dict[re.Pattern[str], str] = {re.compile(p): why for p, why in {
    r"curve\.cf\.(fit\.reusable_(low|high|tried)|model\.think_sigma)": "settings the fit brackets its bisection with, or "
    "copies (reusable_share, its steps, think_time's sigma): the same whatever the records (test_the_fit_s_fixed_parts)",
    r"curve\.cf\.size\.0\.(share_pool|pool_share_of_misses|error_points_(share_pool|pool_share_of_misses))": "the size "
    "without a pool: the model's pool shares there are 0 whatever the fit, and so are the measured (test_the_fit_s_fixed_parts)",
    r"curve\.cf\.worst_size": "two sizes, one fitted: the worst predicted size is the other (test_the_fit_s_fixed_parts)",
    r"curve\.cf\.(largest\.measured_reuse|measured_saturation_ratio)": "an over-claim left: a size's row names the fit's "
    "files and its size's (touching_rows keeps files per row, not per column); these read its measured medians and pool only",
    r"curve\.cf\.(fit\.\w+|model\.\w+|size\.\d+\.\w+|unbounded\.model|within_goal|worst_points_predicted|largest\.model_reuse)":
    "the fit's outcome: its bisections' steps and choice among a few tried points are discrete, so an edit of a field one "
    "part reads, or a small one, leaves many of its numbers",
}.items()}
# The replay admitted every request on arrival: the client sent each after the previous answer
# (test_every_request_is_admitted_on_arrival), so no block count or pool can make one wait.
ADMISSION = "admitted on arrival: one request at a time, whatever its blocks, the pool and the step budget"
ADMITTED = r"sweepcpu\.(run\.\d+\.)?(waited|forced|max_running)"
# The GPU tier's outcome does not see the pool (test_the_gpu_tier_does_not_see_the_pool): a
# prompt's blocks are held in the KV cache after it runs whether they were loaded or computed.
GPU = "the KV cache's hits are the same with no pool at all: no pool geometry or step budget reaches them"
# Both runs of the size measured the same shares, and the replay is exact on every run
# (test_both_runs_of_the_size_measured_the_same_and_the_replay_is_exact).
SAME = "both runs of the size measured the same shares: keeping one or both leaves the medians, ranges and spreads"
EXACT = "the replay as the server ran them is exact on every run: its gaps from the counters are 0 whichever runs are kept"
SPREAD = ("the largest same-size spread of the measured pool shares (0: SAME); it reads the replay's shares only to skip "
          "an undefined one, which no edit of this file makes")
MONOTONE = ("the size with the pool has a median pool share of at least half the other run's (> 0), the one without 0 "
            "(test_the_median_pool_share_rises_whatever_this_run_measured): no value of this run's reaches the order")
RESTART = "refused: the first scrape counts nothing yet (test_the_first_scrape_counts_nothing_and_the_other_runs_have_no_" \
          "time_limit), so an edit raises it: the prompt tokens then disagree with the answered requests', and a counter " \
          "lower at the end than at the start is a restart"
SERVICE_POINTS = "as many as service_bins (test_the_fit_s_fixed_parts): every bin of computed tokens holds requests " \
                 "under these edits"
BLOCK = "refused: the server's block size is stated by both scrapes, run.yaml's command and server.log (one geometry); " \
        "the pool's tokens, the sizes and the rounds by pool follow it"
# Per file: what names it and no edit of it moved, and why (each pattern needed by some number).
NAMED_NOT_MOVED: dict[str, dict[re.Pattern[str], str]] = {k: {re.compile(p): why for p, why in v.items()} for k, v in {
    "client.jsonl": {
        r"curve\.(requests_all|requests_all_equal|requests_distinct|size\.\d+\.requests)|sweepcpu\.(run\.\d+\.)?requests(_min|_max)?":
        "refused: the server counted the answered requests' prompt tokens (metrics.prom): an answer added to or dropped "
        "from client.jsonl alone disagrees",
        r"curve\.cf\.(system_tokens|unbounded\.stream|target\.(mean_prompt|share_above_\w+|requests|requests_per_session|sessions))":
        "refused: each prompt's tokens are sent_blocks.npz's and the server's (metrics.prom), the requests as above",
        r"curve\.cf\.service\.points": SERVICE_POINTS,
        r"curve\.worst_spread_points": SPREAD,
    },
    "host_series.csv": {  # the load (its mean, largest, the curve's lowest and largest) and the flag (steal) move
        r"curve\.size\.\d+\.simulated\.\w+\.(error_points|worst_run_points)|curve\.worst_error_points": EXACT,
        r"curve\.size\.\d+\.(measured\.\w+\.\w+|simulated\.\w+\.median)|curve\.worst_spread_points": SAME,
        r"curve\.size\.\d+\.p\d+_(ttft|tpot|itl)_ms\.min": "this run's latencies are its size's largest "
        "(test_this_run_is_the_slowest_of_its_size): keeping it or not (its flag, all host_series reaches) leaves the smallest",
        r"curve\.pool_share_monotone": MONOTONE,
        r"curve\.load1_min": "the lowest median load is another run's: an edit of this run's samples small enough to "
        "agree with host.yaml's summary of them (a larger one is refused, tests/test_load_rule.py) does not reach it",
        r"curve\.cf\.(service\.points|system_tokens|unbounded\.stream|target\.(mean_output|mean_prompt|requests\w*|sessions"
        r"|share_above_\w+|share_gpu|share_pool))": "the run fitted to is its size's first kept one (the flags): both runs "
        "sent the same stream (test_the_size_s_runs_sent_one_stream) and measured the same shares (SAME), so the other's "
        "stream targets, prefix, service points and measured targets are this one's",
    },
    "metrics.prom": {  # the shares both ways, the preemptions and the stored blocks move
        r"sweepcpu\.run\.\d+\.prompt_tokens": "refused: the counters' prompt tokens are the answered requests' (client.jsonl)",
        r"curve\.pool_share_monotone": MONOTONE,
    },
    "metrics_start.prom": {  # the computed tokens, the stored blocks and (every run's) the KV cache move
        ADMITTED: ADMISSION,
        r"sweepcpu\.(run\.\d+\.)?(preemptions|prompt_tokens)": RESTART,
        r"curve\.size\.\d+\.measured\.(share_gpu|share_pool|pool_share_of_misses)\.min|curve\.size\.\d+\.measured\.share_computed\.max"
        r"|sweepcpu\.measured\.share_gpu_min": "the first scrape counts nothing yet, so an edit can only lower a source's "
        "tokens over the run, and lowering the KV cache's or the pool's is refused (their sum is the usage's cached "
        "tokens): only the computed share falls; the other run of the size measured the same (SAME), so the least of "
        "the shares that rise and the largest computed share stay",
        r"curve\.(chunk_tokens|sizes|repeats_(min|max)|size\.\d+\.(runs|pool_tokens))|sweepcpu\.(chunk_tokens|run\.\d+\.pool_tokens)"
        r"|curve\.time\.(sweep|sweep_alone)\.\w+|curve\.time\.sweeps|curve\.cf\.(fit_size|system_tokens|unbounded\.stream)": BLOCK,
        r"curve\.pool_share_monotone": MONOTONE,
    },
    "server.log": {
        ADMITTED: ADMISSION,
        r"(sweepcpu\.run\.\d+\.(simulated|sequential)\.(share_gpu|diff_points_gpu))"
        r"|curve\.size\.\d+\.simulated\.share_gpu\.\w+": GPU,
        r"curve\.(sizes|repeats_(min|max)|size\.\d+\.runs)|curve\.time\.(sweep|sweep_alone)\.\w+|curve\.time\.sweeps"
        r"|curve\.cf\.fit_size":
        "refused: the sizes are the runs' pools (the worker's line); one run's pool moved alone is no longer a round of "
        "every size (and the pool of both runs of the size moves these counts, and the rounds, only by merging sizes)",
        r"curve\.worst_spread_points": SPREAD,
        r"curve\.cf\.unbounded\.stream": "a KV cache that never evicts and no pool: no pool geometry or step budget reaches it",
    },
    "sent_blocks.npz": {
        ADMITTED: ADMISSION,
        r"curve\.worst_spread_points": SPREAD,
    },
    "run.yaml": {  # the health wait (both ways), the time limit and (the fit) the prompt limit move
        r"curve\.(size\.\d+\.pool_bytes|sizes_with_pool)|sweepcpu\.(run\.\d+\.pool_bytes|with_pool|without_pool)"
        r"|curve\.cf\.fit_size":
        "refused: the pool's bytes are cross-checked against the connector's arguments and the worker's line "
        "(records.geometry); the tier against the worker's line",
        r"curve\.cf\.target\.(mean_output|mean_prompt|period|requests\w*|share_above_\w+)": "an over-claim left: "
        "curvecheck.targets_of reads run.yaml's in_flight and prompt limit in the call that reads these stream targets "
        "(client.jsonl), so they name it",
        r"sweepcpu\.max_duration_min": "the other runs have no time limit (0; test_the_other_runs_have_no_time_limit): "
                                       "the least is 0 whatever this run's",
    },
    "host.yaml": {  # the launch a day earlier: the first, the longest, its round the longest
        r"curve\.time\.(launch|sweep_alone)\.min": "refused: this launch's answers span more than the shortest launch "
        "(client.jsonl's check: no answer after the observation ends), so no observation of it is the shortest, nor its "
        "round's",
        r"curve\.time\.sweeps": "the rounds' count: the launches over the sizes, whatever their times (an order that breaks "
                                "a round is refused)",
    },
}.items()}
# The flag also reads host.yaml's CPU count (the load rule is per CPU): what keeping the run or not
# leaves, it leaves whichever file flags it (its load's own numbers, curve.load1_*, read host_series.csv alone).
NAMED_NOT_MOVED["host.yaml"].update({pat: f"as for host_series.csv (the flag): {why}"
                                     for pat, why in NAMED_NOT_MOVED["host_series.csv"].items()
                                     if "load1_min" not in pat.pattern})


# The load rule's threshold here: above every run of RUNS (r1-pool-0.03125's median load is 9.07 on two
# CPUs), so that no run is flagged before an edit and the perturbed run is kept, as the allowances assume;
# the committed config flags the r1 runs (docs/LOAD-RULE.md), which tests/test_load_rule.py covers.
MAX_LOAD_PER_CPU = 5.0


def _numbers() -> dict[str, dict]:
    dirs = [str(ROOT / r) for r in RUNS]
    out: dict[str, dict] = {}
    runs = curve.analyse(dirs, MAX_LOAD_PER_CPU, C["steal_threshold"])
    w = NumbersWriter("curve", "test", ["everything"])
    curve.register_numbers(w, runs, MAX_LOAD_PER_CPU, C["steal_threshold"])
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

def _shifted(column: str, by: float) -> Edit:
    """host_series.csv with every sample's `column` raised by `by`."""
    def edit(path: Path) -> None:
        lines = path.read_text().splitlines()
        i = lines[0].split(",").index(column)
        rows = [ln.split(",") for ln in lines[1:]]
        for r in rows:
            r[i] = repr(float(r[i]) + by)
        path.write_text("\n".join([lines[0]] + [",".join(r) for r in rows]) + "\n")
    edit.__name__ = f"{column}+{by}"
    return edit


def _series(column: str, value: float) -> Edit:
    """host_series.csv with every sample's `column` set to `value`."""
    def edit(path: Path) -> None:
        lines = path.read_text().splitlines()
        i = lines[0].split(",").index(column)
        rows = [ln.split(",") for ln in lines[1:]]
        for r in rows:
            r[i] = str(value)
        path.write_text("\n".join([lines[0]] + [",".join(r) for r in rows]) + "\n")
    edit.__name__ = f"{column}={value}"
    return edit


def _cpus(n: int) -> Edit:
    """host.yaml stating `n` CPUs: the load rule's threshold is per CPU (docs/LOAD-RULE.md)."""
    def edit(path: Path) -> None:
        meta = yaml.safe_load(path.read_text())
        meta["host"]["cpus"] = n
        path.write_text(yaml.safe_dump(meta, sort_keys=False))
    edit.__name__ = f"cpus={n}"
    return edit


def _earlier_start(path: Path) -> None:
    """The observation starts a day earlier: this launch the first, the longest, its round the longest."""
    meta = yaml.safe_load(path.read_text())
    start = meta["observation"]["start"]
    meta["observation"]["start"] = (start if not isinstance(start, str) else datetime.fromisoformat(start)) - timedelta(days=1)
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _slow_health_and_half_limit(path: Path) -> None:
    """The server took 1,000 s to answer /health, and the prompt limit was half (the fit's context limit)."""
    meta = yaml.safe_load(path.read_text())
    meta["server"]["health_wait_s"] = 1000.0
    meta["prompt_limit"]["tokens"] = int(meta["prompt_limit"]["tokens"]) // 2
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _quick_health_and_limit(path: Path) -> None:
    """The server answered /health at once, and the run had a time limit (the others have none)."""
    meta = yaml.safe_load(path.read_text())
    meta["server"]["health_wait_s"] = 0.0
    meta["max_duration_s"] = 600.0
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _client(change: Callable[[list[dict]], None]) -> Edit:
    """client.jsonl rewritten after `change` edited its records in place (line order kept)."""
    def edit(path: Path) -> None:
        recs = [json.loads(ln) for ln in path.read_text().splitlines()]
        change(recs)
        path.write_text("\n".join(json.dumps(r, sort_keys=True) for r in recs) + "\n")
    edit.__name__ = change.__name__
    return edit


def _answered(recs: list[dict]) -> list[dict]:
    return sorted((r for r in recs if r["status"] == "ok"), key=lambda r: r["sent_s"])


@_client
def _faster_and_one_failed(recs: list[dict]) -> None:
    """Every answer streamed ten times sooner (TTFT, TPOT, ITL: the run becomes its size's fastest,
    so the size's smallest, median and largest percentiles all move), and one more request, which
    failed (an HTTP error: no answer, no prompt tokens counted by the server)."""
    for r in _answered(recs):
        r["chunk_s"] = [round(0.1 * x, 6) for x in r["chunk_s"]]
        r["first_chunk_s"] *= 0.1  # the sweep's TTFT and the fit's service model
    last = recs[-1]
    recs.append({"at_s": last["at_s"], "error": "HTTP 400: prompt too long", "http_status": 400, "index": 0, "max_tokens": 8,
                 "order": len(recs), "prompt_tokens_sent": 10**6, "sent_s": last["sent_s"] + 0.01, "session": 99,
                 "status": "failed"})


@_client
def _cached_moved(recs: list[dict]) -> None:
    """Cached tokens moved between requests, their sum kept (the counters' check): one block from
    one request to another, three from a third to a fourth (off by more than near_blocks)."""
    ok = [r for r in _answered(recs) if r["cached_tokens"] >= 192 and r["prompt_tokens_sent"] - r["cached_tokens"] >= 192]
    for (give, take), n in zip((ok[:2], ok[2:4]), (64, 192)):
        give["cached_tokens"] -= n
        take["cached_tokens"] += n


@_client
def _queued(recs: list[dict]) -> None:
    """The first 19 answers end when the 21st request is sent, the 20th keeps its end: the
    requests overlap, so the replay as the server ran them makes some wait and admits one the
    record shows finished while it waited (forced); the last answer ends a second later."""
    ok = _answered(recs)
    for r in ok[:19]:
        r["total_s"] = round(max(r["total_s"], ok[20]["sent_s"] - r["sent_s"]), 6)
    ok[-1]["total_s"] += 1.0  # and the last answer a second later (the fit's period)


@_client
def _session_later(recs: list[dict]) -> None:
    """Session 0's requests all sent 20 s later: the stream reaches the server in another order."""
    for r in recs:
        if r["session"] == 0:
            r["sent_s"] += 20


@_client
def _longer_answers(recs: list[dict]) -> None:
    """Every request asked for twice the tokens (max_tokens): the replays hold each answer's KV."""
    for r in recs:
        r["max_tokens"] *= 2


def _pool_for_gpu(path: Path) -> None:  # 64 tokens credited to the pool instead of the KV cache (sums unchanged)
    def shift(m: re.Match) -> str:
        d = {"local_cache_hit": -64.0, "external_kv_transfer": 64.0}[m.group(1)]
        return f'{m.group(0).rsplit(" ", 1)[0]} {float(m.group(2)) + d}'
    text = re.sub(r'vllm:prompt_tokens_by_source_total\{[^}]*source="(local_cache_hit|external_kv_transfer)"\} ([0-9.e+]+)',
                  shift, path.read_text())
    path.write_text(text)


LABELS = '{engine="0",model_name="tiny"}'


def _counters(pairs: dict[str, float]) -> Edit:
    """A scrape's counters grown: each sample (its name and labels as written) by its delta."""
    def edit(path: Path) -> None:
        text = path.read_text()
        for series, d in pairs.items():
            pat = re.compile(rf"^({re.escape(series)}) ([0-9.e+]+)$", re.M)
            assert len(pat.findall(text)) == 1, (path, series)
            text = pat.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + d}", text)
        path.write_text(text)
    edit.__name__ = f"counters {pairs}"
    return edit


def _stored_before(path: Path) -> None:
    """The first scrape already counts one offloaded block stored (its bytes; the family is there, with no sample)."""
    head = "# TYPE vllm:kv_offload_store_bytes_total counter\n"
    _sub_each(path, [(head, head + f"vllm:kv_offload_store_bytes_total{LABELS} 3276800.0\n")])


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


def _shared_first_block(path: Path) -> None:
    """Every session's first prompt starts with the same block (a shared system prefix): the fit's
    prefix grows from none to one block."""
    z = dict(np.load(path))
    blocks = z["blocks"].copy()
    firsts = [int(z["offsets"][k]) for k in range(len(z["tokens"])) if z["index"][k] == 0]
    blocks[firsts] = blocks[firsts[0]]
    z["blocks"] = blocks
    np.savez_compressed(path, **z)


def _sub_each(path: Path, pairs: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for old, new in pairs:
        assert text.count(old) == 1, (path, old)
        text = text.replace(old, new)
    path.write_text(text)


def _chunks_of(blocks: int) -> tuple[Edit, Edit, Edit]:
    """The pool in chunks of `blocks` server blocks (64 tokens), its bytes kept (0.03125 GiB):
    server.log's worker line and the connector's block size in its args; run.yaml's statement
    of the same block size, which records.geometry checks against them (read by no number); and
    metrics.prom's store bytes (both counters and their size histograms' sums) rounded up to whole
    chunks of the new size, as vLLM stores them (records.geometry.check_whole_chunks)."""
    per, tokens = blocks * 131072, blocks * 64
    old_line = "bytes_per_offloaded_block=3276800 bytes_per_device_block=131072 blocks_per_chunk=25 host_chunks=10"
    new_line = f"bytes_per_offloaded_block={per} bytes_per_device_block=131072 blocks_per_chunk={blocks} host_chunks={2**25 // per}"

    def log(path: Path) -> None:
        _sub_each(path, [("'block_size': 1600", f"'block_size': {tokens}"), (old_line, new_line)])

    def meta(path: Path) -> None:
        _sub_each(path, [("offload_block_tokens: 1600", f"offload_block_tokens: {tokens}"),
                         ('"block_size":1600', f'"block_size":{tokens}')])

    def stored(path: Path) -> None:  # 1,325 server blocks stored: 1,328 in chunks of 8
        text = path.read_text()
        assert text.count(" 1.736704e+08\n") == 4
        path.write_text(text.replace(" 1.736704e+08\n", f" {float(-(-173670400 // per) * per)}\n"))
    return log, meta, stored


def _one_file(name: str, *edits: Edit) -> list[tuple[Path, Edit]]:
    return [(RUN / name, e) for e in edits]


# Per file of the run: its edits, each a list of (file, edit) applied together. Most edit the file
# alone; where a value is stated by several files and cross-checked, all of them are edited, and
# a number that moved is credited to each edited file it names.
COMPUTED, GPU_HIT, POOL = (f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="tiny",source="{s}"}}'
                            for s in ("local_compute", "local_cache_hit", "external_kv_transfer"))
PROMPT = "vllm:prompt_tokens_total" + LABELS


def _cached(d: int) -> Edit:
    """client.jsonl's first answered request with room for it `d` tokens more cached (so `d` fewer
    computed): the cached tokens the counters credit, and with the prompt tokens the computed ones
    (the sources add up to vllm:prompt_tokens_total, check_prompt_sources), as the client states them."""
    def change(recs: list[dict]) -> None:
        r = next(r for r in _answered(recs)
                 if r["cached_tokens"] + d >= 0 and r["prompt_tokens_sent"] - r["cached_tokens"] - d >= 64)
        r["cached_tokens"] += d
    change.__name__ = f"cached_{d:+d}"
    return _client(change)


HUGE_CACHE = sub('num_gpu_blocks="256"', 'num_gpu_blocks="1000000"')
CHUNKS = _chunks_of(8)  # 32 chunks of 8 blocks: the pool holds 16,384 tokens, not 16,000
EDITS: dict[str, list[list[tuple[Path, Edit]]]] = {
    # the run's load a little lower (within host.yaml's rounding of its summary: a larger edit is refused,
    # tests/test_load_rule.py), its steal above the threshold (flagged)
    "host_series.csv": [_one_file("host_series.csv", _shifted("load1", -0.0004), _series("steal_share", 0.2))],
    # the launch a day earlier; the host with one CPU (the load rule's threshold halves: the run flagged),
    # and with four (the curve's threshold, over the largest host, doubles)
    "host.yaml": [_one_file("host.yaml", _earlier_start), _one_file("host.yaml", _cpus(1)), _one_file("host.yaml", _cpus(4))],
    "run.yaml": [_one_file("run.yaml", _quick_health_and_limit), _one_file("run.yaml", _slow_health_and_half_limit)],
    "client.jsonl": [_one_file("client.jsonl", *e) for e in ((_faster_and_one_failed, _cached_moved), (_queued,),
                                                             (_session_later, _longer_answers))],
    # 64 tokens credited to the pool instead of the KV cache, 64 more computed (64 fewer KV-cache hits, as
    # client.jsonl's cached tokens say: the sources add up to the prompt tokens), two preemptions, one more
    # offloaded block stored (its bytes)
    "metrics.prom": [_one_file("metrics.prom", _pool_for_gpu, _counters({COMPUTED: 64, GPU_HIT: -64,
                                                                         "vllm:num_preemptions_total" + LABELS: 2,
                                                                         "vllm:kv_offload_store_bytes_total" + LABELS: 3276800}))
                     + [(RUN / "client.jsonl", _cached(-64))],
                     # 64 tokens from the pool to the KV cache, 64 fewer computed (64 more KV-cache hits for them,
                     # as client.jsonl's cached tokens say): the run's shares move the other way
                     _one_file("metrics.prom", _counters({POOL: -64, GPU_HIT: 128, COMPUTED: -64}))
                     + [(RUN / "client.jsonl", _cached(64))]],
    # the first scrape's counters higher: over the run, 128 fewer computed tokens (the first scrape's prompt
    # tokens 128 higher too, and the last's with 64 more KV-cache hits and 64 more from the pool: over the
    # run the same prompt tokens, 128 more cached, as client.jsonl then says) and one stored block fewer;
    # a KV cache that never evicts (10^6 blocks), in both scrapes of every run (one server, one curve)
    "metrics_start.prom": [_one_file("metrics_start.prom", _counters({COMPUTED: 128, PROMPT: 128}), _stored_before)
                           + [(RUN / "metrics.prom", _counters({PROMPT: 128, GPU_HIT: 64, POOL: 64})),
                              (RUN / "client.jsonl", _cached(128))],
                           [(ROOT / r / f, HUGE_CACHE) for r in RUNS for f in ("metrics_start.prom", "metrics.prom")]],
    "server.log": [_one_file("server.log", _smaller_budget),
                   # the pool's chunking, on both runs of the size (the curve's sizes are the runs' pools)
                   [(run / f, e) for run in SIZE for f, e in zip(("server.log", "run.yaml", "metrics.prom"), CHUNKS)]],
    "sent_blocks.npz": [_one_file("sent_blocks.npz", _other_last_blocks), _one_file("sent_blocks.npz", _shared_first_block)],
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
    rest = {k for k in naming(before, target) - credited if not any(pat.fullmatch(k) for pat in FIT)}
    assert_allowed(rest, NAMED_NOT_MOVED.get(name, {}), target)


def _longer_first_prompt(recs: list[dict]) -> None:  # the first answered prompt 64 tokens longer (usage too)
    r = _answered(recs)[0]
    r["prompt_tokens_sent"] += 64
    r["usage_prompt_tokens"] += 64


def _start_later(path: Path) -> None:  # the observation starts 2 minutes later (the shortest launch is 48 s)
    meta = yaml.safe_load(path.read_text())
    start = meta["observation"]["start"]
    meta["observation"]["start"] = (start if not isinstance(start, str) else datetime.fromisoformat(start)) + timedelta(minutes=2)
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


# the edits the allowances' "refused" rests on
REFUSED = [
    ("the worker's pool alone", [(RUN / "server.log", lambda p: _sub_each(p, [("host_chunks=10", "host_chunks=9")]))],
     "gives a pool of"),
    ("one run's pool chunking alone", [(RUN / f, e) for f, e in zip(("server.log", "run.yaml", "metrics.prom"), CHUNKS)],
     "not rounds of every size once"),
    ("run.yaml's pool bytes alone", [(RUN / "run.yaml", lambda p: _sub_each(p, [("offload_gib: 0.03125", "offload_gib: 0.0625")]))],
     "the run.s sources disagree on its geometry"),
    ("a prompt's tokens in client.jsonl alone", [(RUN / "client.jsonl", _client(_longer_first_prompt))], "the counters grew by"),
    ("an answer dropped from client.jsonl", [(RUN / "client.jsonl", _client(lambda recs: recs.pop()))], "the counters grew by"),
    # (the prompt tokens with the computed tokens: the sources add up to them, check_prompt_sources)
    ("the last scrape's prompt tokens", [(RUN / "metrics.prom", _counters({PROMPT: 64, COMPUTED: 64}))],
     "the counters grew by"),
    ("the first scrape's prompt tokens", [(RUN / "metrics_start.prom", _counters({PROMPT: 64, COMPUTED: 64}))],
     "the counters grew by"),
    ("the last scrape's computed tokens alone", [(RUN / "metrics.prom", _counters({COMPUTED: 64}))],
     r"sums to 233971 over its sources .* but vllm:prompt_tokens_total\{.*\} is 233907"),
    ("the first scrape's preemptions", [(RUN / "metrics_start.prom", _counters({"vllm:num_preemptions_total" + LABELS: 1}))],
     "lower than 1 at the start"),
    # (with the prompt tokens they add up to, and the last scrape's 64 more computed: the same prompt tokens over the run)
    ("the first scrape's KV-cache hits", [(RUN / "metrics_start.prom", _counters({GPU_HIT: 64, PROMPT: 64})),
                                          (RUN / "metrics.prom", _counters({PROMPT: 64, COMPUTED: 64}))], "the counters credit"),
    ("the block size of every scrape", [(ROOT / r / f, sub('block_size="64"', 'block_size="32"')) for r in RUNS
                                        for f in ("metrics_start.prom", "metrics.prom")], "the run.s sources disagree"),
    ("an observation shorter than the answers", [(RUN / "host.yaml", _start_later)], "after the run's observation ended"),
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
    admitted = {k: d["value"] for k, d in before.items() if re.fullmatch(ADMITTED, k)}
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
    for key in ("curve.max_load_per_cpu", "curve.cf.goal_points", "curve.percentile.low", "sweepcpu.near_blocks", "curve.runs"):
        assert before[key]["inputs"] == [], key
    fitted = {p for p in before["curve.cf.model.think_median"]["inputs"]}
    assert fitted and all("pool-0.03125" in p for p in fitted), sorted(fitted)  # the fitted size's records alone
    assert before["curve.time.launch.median"]["inputs"] == sorted((ROOT / r / "host.yaml").as_posix() for r in RUNS)



def _shares(before: dict, run: int) -> dict[str, float]:
    return {k.split(".", 3)[3]: d["value"] for k, d in before.items() if k.startswith(f"sweepcpu.run.{run}.measured.share")
            or k.startswith(f"sweepcpu.run.{run}.measured.pool_share")}


def test_both_runs_of_the_size_measured_the_same_and_the_replay_is_exact(before: dict) -> None:
    """SAME and EXACT: the size's two runs (sweepcpu.run.2 and .3, the curve's size.1.run.0 and .1)
    measured the same shares; and on every run the replay as the server ran them gives the
    counters' shares, so its gap from them is 0 at every size whichever runs are kept."""
    assert [before[f"curve.size.1.run.{j}.measured.share_pool"]["inputs"][0].split("/")[3] for j in (0, 1)] == \
        [p.name for p in SIZE]
    assert _shares(before, 2) and _shares(before, 2) == _shares(before, 3)
    gaps = {k: d["value"] for k, d in before.items() if re.fullmatch(r"sweepcpu\.run\.\d+\.simulated\.diff_points_\w+", k)}
    assert len(gaps) == 3 * len(RUNS) and not any(gaps.values()), gaps


def test_this_run_is_the_slowest_of_its_size(before: dict) -> None:
    """host_series.csv's latency minima: the perturbed run (size.1.run.0) has its size's largest
    latency percentiles, so dropping it from the kept runs leaves each smallest."""
    assert before["curve.size.1.run.0.flagged"]["inputs"][0].startswith(RUN.as_posix())
    for m in ("ttft", "tpot", "itl"):
        for q in (50, 90, 99):
            mine, other = (before[f"curve.size.1.run.{j}.p{q}_{m}_ms"]["value"] for j in (0, 1))
            assert mine > other == before[f"curve.size.1.p{q}_{m}_ms.min"]["value"], (m, q)


def test_the_median_pool_share_rises_whatever_this_run_measured(before: dict) -> None:
    """MONOTONE: the size without a pool measured no pool share, the other run of the size with
    one a positive share, so the median of two (their mean) is positive for any share of this run."""
    assert before["curve.size.0.measured.share_pool.median"]["value"] == 0
    assert before["curve.size.1.run.1.measured.share_pool"]["value"] > 0
    assert before["curve.pool_share_monotone"]["value"] == 1


def test_the_first_scrape_counts_nothing_and_the_other_runs_have_no_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """RESTART and the first scrape's shares: its prompt, source and preemption counters are 0 (an
    edit can only raise them); run.yaml's max_duration_min: the other runs state no time limit."""
    from kvtier.records.prometheus import read_prometheus

    monkeypatch.chdir(REPO)
    start = read_prometheus(RUN / "metrics_start.prom")
    assert start.value("vllm:prompt_tokens_total") == 0 and start.value("vllm:num_preemptions_total") == 0
    assert set(dict(start.by_label("vllm:prompt_tokens_by_source_total", "source")).values()) == {0.0}
    for r in RUNS:
        if ROOT / r != RUN:
            assert yaml.safe_load((ROOT / r / "run.yaml").read_text()).get("max_duration_s") is None, r


def test_the_fit_s_fixed_parts(before: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """FIT and SERVICE_POINTS: the fit's bracket and step count, the sigma it copies, the size
    without a pool (model and measured pool shares 0), the one predicted size, and the service
    model's points (as many as its bins, for both runs of the fitted size)."""
    from kvtier.counterfactual.sweepcheck import service_model

    v = {k[len("curve.cf."):]: d["value"] for k, d in before.items() if k.startswith("curve.cf.")}
    assert [v["fit.reusable_low"], v["fit.reusable_high"]] == CF["reusable_share"] and v["fit.reusable_tried"] == 5
    assert v["model.think_sigma"] == CFG["counterfactual"]["think_time"]["sigma"]
    assert not any(v[f"size.0.{k}"] for k in ("share_pool", "pool_share_of_misses", "error_points_share_pool",
                                              "error_points_pool_share_of_misses"))
    assert before["curve.sizes"]["value"] == 2 and v["fit_size"] == 1 and v["worst_size"] == 0
    monkeypatch.chdir(REPO)
    for run in SIZE:
        assert len(service_model(sweep.read_run(run), CF["service_bins"], CFG["coldread"]["above_last"]).latency.tokens) \
            == CF["service_bins"] == v["service.points"], run


def test_the_size_s_runs_sent_one_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """host_series.csv's stream targets: both runs of the fitted size sent the same requests
    (the fixed stream's digest) and their streams' prefix is the same."""
    monkeypatch.chdir(REPO)
    runs = [sweep.read_run(r) for r in SIZE]
    assert len({curve.digest_of(r) for r in runs}) == 1
    assert len({curvecheck.shared_prefix_tokens(r) for r in runs}) == 1
    assert len({tuple(r.requests.prompt_tokens_sent) for r in runs}) == 1 and len({tuple(r.requests.max_tokens) for r in runs}) == 1
