"""Provenance read off the records, for the lab on vLLM's CPU build (lablive.*) and LMCache there
(lablm.*, a series of launches): one record file of one run (or launch) is edited in a copy, and
exactly the numbers that moved must name that file; what names it and did not move is listed
below with the reason. The numbers are computed by the rule's own code (kvtier.lab.live and
kvtier.lab.launches) through traced_adder: no list of files is written beside them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pytest

from kvtier.errors import RawRecordError
from kvtier.lab import launches, live
from kvtier.numbers import NumbersWriter
from perturbation import Edit, assert_allowed, assert_named, copier, moved, naming, rows, sub

REPO = Path(__file__).resolve().parent.parent
LIVE = Path("raw/lab/cyclic-cpu")
LM = Path("raw/lab/cyclic-lmcache-cpu")
LAUNCH = "20261201T232543Z-lmcache"  # the second lmcache launch of the series


# ---------------------------------------------------------------- edits of one file
def _slower(rows: list[dict]) -> None:  # every request a little slower, each by its own amount
    for k, r in enumerate(rows, 1):
        r["ttft_ms"] = f"{float(r['ttft_ms']) + 0.01 * k:.2f}"
        r["e2e_ms"] = f"{float(r['e2e_ms']) + 0.01 * k:.2f}"


def _usage_fewer(rows: list[dict]) -> None:  # the answer's usage: one block fewer cached, once per setup
    for setup in dict.fromkeys(r["setup"] for r in rows):
        r = next(r for r in rows if r["setup"] == setup and int(r["cached_tokens"]) >= 128)
        r["cached_tokens"] = str(int(r["cached_tokens"]) - 128)


def _much_slower(rows: list[dict]) -> None:  # the launch a second slower on every request
    for r in rows:
        r["ttft_ms"] = f"{float(r['ttft_ms']) + 1000:.2f}"
        r["e2e_ms"] = f"{float(r['e2e_ms']) + 1000:.2f}"


def _counters(moves: dict[str, float]) -> Edit:
    """Tokens by source moved between sources in one snapshot (their sum, the prompt, kept)."""
    def edit(path: Path) -> None:
        text = path.read_text(encoding="utf-8")
        for source, add in moves.items():
            pat = rf'^(vllm:prompt_tokens_by_source_total\{{[^}}]*source="{source}"[^}}]*\}}) (\S+)$'
            text, n = re.subn(pat, lambda m: f"{m.group(1)} {float(m.group(2)) + add}", text, count=1, flags=re.M)
            assert n == 1, (path, source)
        path.write_text(text, encoding="utf-8")
    return edit


def _load(when: str) -> Edit:  # the host far busier when the launch started (ended)
    def edit(path: Path) -> None:
        text = path.read_text(encoding="utf-8")
        new, n = re.subn(rf"(\n  {when}:\n  - )([\d.]+)", lambda m: f"{m.group(1)}{float(m.group(2)) + 50}", text, count=1)
        assert n == 1, path
        path.write_text(new, encoding="utf-8")
    edit.__name__ = f"load at {when}"
    return edit


TO_GPU = _counters({"local_compute": -128, "local_cache_hit": 128})  # one block computed -> from the KV cache
NEXT = "a snapshot's counters are the next request's 'before': the tokens moved to this request leave the next one"


# ---------------------------------------------------------------- the numbers, on a copy
def _live(root: Path) -> dict[str, dict]:
    w = NumbersWriter("lablive", "test", ["everything"])
    live.register_numbers(w, live.predict(root / LIVE, live.request_sources(root / LIVE)))
    return _relative(w, root)


def _lm(root: Path) -> dict[str, dict]:
    w = NumbersWriter("lablm", "test", ["everything"])
    launches.register_numbers(w, launches.launch_table(root / LM))
    return _relative(w, root)


def _relative(w: NumbersWriter, root: Path) -> dict[str, dict]:
    return {k: {**d, "inputs": [Path(p).relative_to(root).as_posix() for p in d["inputs"]]} for k, d in w.numbers.items()}


@pytest.fixture()
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], Path]:
    monkeypatch.chdir(tmp_path)
    return copier(tmp_path)


def _check(copy: Callable[[Path], Path], records: Path, numbers: Callable[[Path], dict], edits: dict[Path, list[Edit]],
           allowed: dict[Path, dict[str, str]]) -> None:
    before = numbers(copy(records))
    assert all(d["inputs"] and d["inputs"] != ["everything"] for d in before.values())
    for path, file_edits in edits.items():
        named = naming(before, path)
        assert named, f"no number names {path}"
        moved_any: set[str] = set()
        for edit in file_edits:
            root = copy(records)
            edit(root / path)
            m = moved(before, numbers(root))
            assert_named(m, named, f"{path} ({edit.__name__})")
            moved_any |= m
        assert_allowed(named - moved_any, allowed.get(path, {}), path)


# ---------------------------------------------------------------- lablive.*: the CPU build's run
R = LIVE
NATIVE = R / "native"
STREAM = "refused: the stream as sent (each pass reads each document once at run.yaml's length; each request's " \
         "prompt equals its counters' change) is the record's contract: an edit of a document, an order or a length is " \
         "refused (REFUSED below); the simulator's prediction, and agreement with it, read it"
START = "refused: a fresh server's counters are zero before the first request (none can be lower, a higher one makes " \
        "the first request's change differ from its prompt); its cache_config_info is cross-checked (REFUSED below)"
POOL = "refused: the worker's pool line is cross-checked against run.yaml's pool and the connector's arguments " \
       "(check_geometry, REFUSED below); the step budget it states is what the prediction of every request reads"
LIVE_EDITS: dict[Path, list[Edit]] = {
    R / "requests.csv": [rows(_slower), rows(_usage_fewer)],
    R / "run.yaml": [sub("max_tokens: 16", "max_tokens: 100")],
    NATIVE / "metrics/requests/3_reverse_11.prom": [TO_GPU, _counters({"local_compute": -128, "external_kv_transfer": 128})],
    NATIVE / "metrics/requests/2_second_10.prom": [_counters({"local_compute": -64, "local_cache_hit": 64})],
    NATIVE / "metrics/0_start.prom": [],
    NATIVE / "server.log": [],
}
LIVE_ALLOWED: dict[Path, dict[str, str]] = {
    R / "requests.csv": {**{k: STREAM for k in ("lablive.docs", "lablive.doc_tokens_total", "lablive.docs_over_cache",
                                                "lablive.requests", "lablive.*.requests", "lablive.*.req.*.order",
                                                "lablive.*.req.*.pass_index", "lablive.*.req.*.doc", "lablive.*pred_*",
                                                "lablive.*agree*")}},
    R / "run.yaml": {"lablive.*pred_*": "insensitive: the answer's length changes a prediction only where the decoded "
                                        "tokens change what the KV cache holds when a later prompt arrives",
                     "lablive.*agree*": "insensitive: the predictions that did not move agree as before"},
    NATIVE / "metrics/requests/2_second_10.prom": {
        k: "insensitive: the edit moves tokens between the KV cache and computed; moving CPU-tier tokens is refused (the "
           "next request read none from the CPU tier, so its counter would go down)"
        for k in ("lablive.native.req.*.cpu_tokens", "lablive.native.*.cpu_tokens", "lablive.native.*.docs_from_cpu",
                  "lablive.native.*.docs_hit")},
    NATIVE / "metrics/0_start.prom": {"lablive.*": START},
    NATIVE / "server.log": {"lablive.*": POOL},
}
REFUSED: list[tuple[Path, Path, Edit, str]] = [
    (LIVE, R / "requests.csv", rows(lambda rows: rows[3].update(prompt_tokens=str(int(rows[3]["prompt_tokens"]) + 1))),
     "run.yaml says"),
    (LIVE, R / "requests.csv", rows(lambda rows: rows[4].update(doc=rows[3]["doc"])), "documents once"),
    (LIVE, NATIVE / "metrics/0_start.prom", _counters({"local_compute": 64, "local_cache_hit": -64}), "never negative"),
    (LIVE, NATIVE / "metrics/0_start.prom", sub('num_gpu_blocks="134"', 'num_gpu_blocks="135"'), "not one server"),
    (LIVE, NATIVE / "server.log", sub("host_chunks=256", "host_chunks=255"), "gives a pool of"),
]


def test_lablive_numbers_that_moved_name_the_file(copy) -> None:
    _check(copy, LIVE, _live, LIVE_EDITS, LIVE_ALLOWED)


# ---------------------------------------------------------------- lablm.*: one launch of the series
L = LM / LAUNCH
MEDIAN = "insensitive: a median (or the minimum, the maximum) over the setup's three launches, which one launch's " \
         "change moves only where it is, or becomes, the middle or an extreme"
LM_EDITS: dict[Path, list[Edit]] = {
    L / "requests.csv": [rows(_much_slower), rows(_usage_fewer)],
    L / "run.yaml": [_load("start"), _load("end"), sub("LMCACHE_MAX_LOCAL_CPU_SIZE: '0.125'", "LMCACHE_MAX_LOCAL_CPU_SIZE: '0.0625'")],
    L / "lmcache/metrics/requests/3_reverse_11.prom": [TO_GPU],
}
LM_ALLOWED: dict[Path, dict[str, str]] = {
    L / "requests.csv": {"lablm.*.ttft_p50*": MEDIAN, "lablm.*.speedup_within*": MEDIAN, "lablm.first_over.*": MEDIAN,
                         **{k: STREAM for k in ("lablm.requests", "lablm.*.requests", "lablm.*pred_*", "lablm.*agree*",
                                                "lablm.*.requests_repeating", "lablm.requests_repeating",
                                                "lablm.requests_distinct", "lablm.*.miss_listed")}},
    L / "run.yaml": {"lablm.*pred_*": MEDIAN,
                     "lablm.*.speedup_within*": "insensitive: the within-setup ratio pairs each launch's passes by the "
                                                "launch run.yaml names; the edits here change its load and pool, not which launch",
                     "lablm.requests_*": "insensitive: counts of the requests whose counters repeat across launches (and of "
                                         "the distinct ones); the edits here change a launch's load and pool, not a counter",
                     "lablm.launches": "refused: a launch folder without its run.yaml is no launch",
                     "lablm.lmcache.launches": "refused: a launch folder without its run.yaml is no launch"},
}


def test_lablm_numbers_that_moved_name_the_file_of_one_launch(copy) -> None:
    _check(copy, LM, _lm, LM_EDITS, LM_ALLOWED)


@pytest.mark.parametrize(("records", "path", "edit", "error"), REFUSED, ids=[f"{p.name}:{i}" for i, (_, p, _, _) in enumerate(REFUSED)])
def test_the_edits_the_allowances_rest_on_are_refused(copy, records: Path, path: Path, edit: Edit, error: str) -> None:
    root = copy(records)
    edit(root / path)
    with pytest.raises(RawRecordError, match=error):
        _live(root)
