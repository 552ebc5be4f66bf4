"""Issue 25, item 2, for the lab: a lab number's provenance is read off the records it touched.

The lab analysis writes no list of files beside its numbers (no `w.reading`): each value is
computed through `NumbersWriter.compute`, and the lab run's record (kvtier.records.labrun), the
snapshots and the model record touch their files when read. Checked here on a copy of the lab's
records, one file at a time: every number whose value moved when a file was edited names that
file; and every number that names a file moved under some edit of it, except those listed in
ALLOWED with the reason no one-file edit can move them (the edit is refused by a cross-check,
tested in test_the_edits_the_allowances_rest_on_are_refused; or the number is insensitive to the
file in this run, by arithmetic given beside it). Where one value is stated by several files and
cross-checked (the KV cache size, the block size), the edit of all of them together (COHERENT)
moves only numbers that name each of them.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Callable

import pytest

from kvtier.errors import RawRecordError
from kvtier.lab.analysis import LabInputs, analyse
from kvtier.numbers import NumbersWriter
from perturbation import Edit, assert_allowed, assert_named, copier, moved, naming, rows, sub

REPO = Path(__file__).resolve().parent.parent
RUN = Path("raw/lab/cyclic")
MODEL = Path("raw/lab/model/qwen2.5-1.5b-instruct.yaml")
SNAPS = [RUN / s / "metrics" / f"{n}.prom" for s in ("vllm", "lmcache") for n in ("0_start", "1_first", "2_second", "3_reverse")]


# ---------------------------------------------------------------- edits of one file
_sub = sub


def _unread(edit: Edit) -> Edit:
    """An edit of a line no lab number reads: it must move nothing."""
    edit.moves_nothing = True  # type: ignore[attr-defined]
    return edit


def _rows(change: Callable[[int, dict], None], name: str) -> Edit:
    """An edit of requests.csv, row by row (`change(i, row)`)."""
    return rows(lambda table: [change(i, r) for i, r in enumerate(table)] and None, name)


def _slower(i: int, r: dict) -> None:  # not uniform: medians, means and ratios all move
    dt = 0.37 * (i % 7)
    r["ttft_ms"], r["e2e_ms"] = f"{float(r['ttft_ms']) + dt:.2f}", f"{float(r['e2e_ms']) + dt:.2f}"
    r["start_s"] = f"{float(r['start_s']) + 0.001 * i:.4f}"


def _cached(setup: str, doc: str, tokens: int) -> Callable[[int, dict], None]:
    def change(i: int, r: dict) -> None:
        if (r["setup"], r["pass"], r["doc"]) == (setup, "reverse", doc):
            r["cached_tokens"] = str(tokens)
    return change


def _both(*changes: Callable[[int, dict], None]) -> Callable[[int, dict], None]:
    return lambda i, r: [c(i, r) for c in changes] and None


def _counter(name: str, add: float = 16) -> Edit:
    def edit(path: Path) -> None:
        text = path.read_text(encoding="utf-8")
        new, n = re.subn(rf"^({re.escape(name)}\{{[^}}]*\}}) (\S+)$", lambda m: f"{m.group(1)} {float(m.group(2)) + add}", text,
                         count=1, flags=re.M)
        assert n == 1, (path, name)
        path.write_text(new, encoding="utf-8")
    edit.__name__ = f"{name}+{add:g}"
    return edit


def _retrieve_costs(path: Path) -> None:  # every retrieve a little slower, each by its own amount
    k = iter(range(1, 10_000))
    text = path.read_text(encoding="utf-8")
    path.write_text(re.sub(r"(Retrieved .*? cost )([\d.]+)( ms)", lambda m: f"{m.group(1)}{float(m.group(2)) + 0.01 * next(k):.4f}"
                           f"{m.group(3)}", text), encoding="utf-8")


def _first_retrieve_fewer(path: Path) -> None:  # the second pass's first load: one chunk fewer
    _sub("Retrieved 4864 out of 5011 required", "Retrieved 4608 out of 5011 required")(path)


def _load_was_on_the_gpu(pick: Callable) -> Edit:
    """One of LMCache's reverse-pass loads (requests.csv), the slowest or the fastest, becomes a
    GPU hit in its lookup line."""
    def edit(path: Path) -> None:
        rows = [r for r in csv.DictReader((path.parent.parent / "requests.csv").open(encoding="utf-8"))
                if r["setup"] == "lmcache" and r["pass"] == "reverse" and r["phase"] == "doc" and 0 < int(r["cached_tokens"]) < 5008]
        load = pick(rows, key=lambda r: float(r["ttft_ms"]))
        old = f"Reqid: cmpl-rev{int(load['order']):02d}-0, Total tokens 5011, Inference Engine computed tokens: "
        text = path.read_text(encoding="utf-8")
        new, n = re.subn(re.escape(old) + r"\d+", old + "5008", text)
        assert n == 1
        path.write_text(new, encoding="utf-8")
    edit.__name__ = f"the {pick.__name__} load was on the GPU"
    return edit


SINGLE: dict[Path, list[Edit]] = {
    RUN / "requests.csv": [
        _rows(_slower, "times"),
        _rows(_cached("vllm", "6", 0), "vLLM alone: document 6 missed in the reverse pass"),
        _rows(_cached("vllm", "5", 1440), "vLLM alone: document 5 kept one block fewer"),
        _rows(_both(_cached("vllm", "5", 0), _cached("vllm", "4", 1456)), "vLLM alone: the partial hit is document 4"),
        _rows(_cached("lmcache", "0", 0), "LMCache: document 0 not loaded in the reverse pass"),
    ],
    RUN / "run.yaml": [_sub("concurrency: 1", "concurrency: 2"), _sub("max_tokens: 8", "max_tokens: 100"),
                       _sub("vllm: 0.24.0", "vllm: 0.20.0"),
                       _sub("LMCACHE_MAX_LOCAL_CPU_SIZE: '1.5'", "LMCACHE_MAX_LOCAL_CPU_SIZE: '1.25'"),
                       _sub("LMCACHE_CHUNK_SIZE: '256'", "LMCACHE_CHUNK_SIZE: '128'")],
    RUN / "lmcache" / "server.log": [_retrieve_costs, _first_retrieve_fewer,
                                     _sub("out of 5011 required", "out of 4999 required"),
                                     _sub("Stored 4864 out of total 5011", "Stored 4608 out of total 5011"),
                                     _load_was_on_the_gpu(max), _load_was_on_the_gpu(min),
                                     _unread(_sub("Maximum concurrency for 8,192", "Maximum concurrency for 8,193"))],
    # vLLM alone's log gives the KV cache size and nothing else: see ALLOWED, COHERENT
    RUN / "vllm" / "server.log": [_unread(_sub("Maximum concurrency for 8,192", "Maximum concurrency for 8,193"))],
    MODEL: [_sub("num_key_value_heads: 2", "num_key_value_heads: 4"), _sub("num_hidden_layers: 28", "num_hidden_layers: 20")],
    **{RUN / s / "metrics" / f"{n}.prom": [_counter("vllm:prefix_cache_hits_total")]
       + ([_counter("vllm:prefix_cache_queries_total"), _counter("vllm:external_prefix_cache_queries_total"),
           _counter("vllm:external_prefix_cache_hits_total")]
          if s == "lmcache" else [_unread(_counter("vllm:prefix_cache_queries_total"))])  # vLLM alone's queries: no number
       for s in ("vllm", "lmcache") for n in ("2_second", "3_reverse")},
    **{RUN / s / "metrics" / f"{n}.prom": [] for s in ("vllm", "lmcache") for n in ("0_start", "1_first")},  # see ALLOWED
}

# one value stated by several files, cross-checked: all of them edited together
COHERENT: dict[str, tuple[list[Path], list[tuple[Path, Edit]]]] = {
    # four times the KV cache (more than the ten documents): the second pass hits on the GPU
    "KV cache four times the size": ([RUN / "vllm" / "server.log", RUN / "lmcache" / "server.log"],
                                     [(RUN / s / "server.log", _sub("21,520 tokens", "86,080 tokens")) for s in ("vllm", "lmcache")]
                                     + [(p, _sub('num_gpu_blocks="1345"', 'num_gpu_blocks="5380"')) for p in SNAPS]),
    "80-token blocks": ([RUN / "vllm" / "metrics" / "0_start.prom", RUN / "lmcache" / "metrics" / "0_start.prom"],
                        [(p, _sub('block_size="16"', 'block_size="80"')) for p in SNAPS]
                        + [(p, _sub('num_gpu_blocks="1345"', 'num_gpu_blocks="269"')) for p in SNAPS]),
}

# What names a file but no edit above of it moved, and why (patterns of keys, fnmatch). "Refused":
# every one-file edit of the value the number takes from the file is refused (REFUSED below tests
# one each); "insensitive": the number depends on the file, and the edits above that moved the
# value it takes from it happen not to move the number in this run (the reason is given).
REFUSED_DOCS = "refused: the documents' count and length (run.yaml, checked against every document request's prompt)"
REFUSED_START = "refused: a fresh server's counters are zero before the first pass; a higher one makes the first " \
                "pass's delta negative (a counter went down)"
FIRST_PASS = "insensitive: the first pass reads every document for the first time; no size serves any of it"
CYCLE = "insensitive: at the lab's KV cache the cycle evicts every document before the second pass reads it, " \
        "whatever the block"
LOGS = {"lab.predict.*.first.p50": FIRST_PASS,
        "lab.sim.first_pass_survivors.last": "insensitive: the last document read survives the first pass at any size",
        "lab.sim.whole_doc.reverse.partial_docs": "insensitive: zero by construction (the whole-document simulator "
                                                  "cannot draw a partial hit)"}
START = {"lab.predict.*.first.p50": FIRST_PASS,
         "lab.measured.*.first.prefix_cache_hits": REFUSED_START,
         **{k: CYCLE for k in ("lab.predict.vllm.second.p50", "lab.sim.second_pass_hit_tokens", "lab.sim.twotier.second.gpu_tokens")},
         "lab.reverse.*": "insensitive: the block sets only the full-hit threshold ((N - 1) // B * B), and the recorded "
                          "cached and computed counts (0, 1,456, 5,008) lie on the same side of it with 16- and 80-token blocks",
         "lab.sim.first_pass_survivors.*": "insensitive: the same four documents survive the first pass with 80-token blocks",
         "lab.sim.reverse.hit_docs": "insensitive: the same documents hit whole with 80-token blocks",
         "lab.sim.reverse.partial_doc": "insensitive: the same document hits in part with 80-token blocks",
         "lab.sim.cpu.defeated_up_to_chunks": "insensitive: the same largest CPU size gives the second pass nothing with "
                                              "80-token blocks"}
ALLOWED: dict[Path, dict[str, str]] = {
    RUN / "requests.csv": {
        "lab.setup.check_tokens": "refused: the check prompt's length, the same for both setups and in LMCache's lookup line",
        "lab.load.*": "counts over: the pass each LMCache line belongs to is the request it pairs with; a request's pass "
                      "cannot move alone (refused: each pass reads every document once)",
    },
    RUN / "run.yaml": {
        **{k: REFUSED_DOCS for k in ("lab.setup.doc_tokens", "lab.setup.docs", "lab.setup.total_tokens", "lab.setup.docs_that_fit",
                                     "lab.setup.overflow_ratio", "lab.cpu.kv_bytes_all_docs", "lab.reverse.*", "lab.sim.*",
                                     "lab.predict.*", "lab.load.compute_time", "lab.load.speedup")},
        "lab.load.*tokens": "checks over: read from LMCache's line; run.yaml's chunk only checks the load is whole chunks",
        "lab.load.time_m*": "checks over: read from LMCache's lines; run.yaml's chunk only checks the first load is whole chunks",
    },
    RUN / "lmcache" / "server.log": LOGS,
    RUN / "vllm" / "server.log": LOGS,
    MODEL: {"lab.predict.lmcache.first.p50": FIRST_PASS,
            "lab.sim.twotier.second.gpu_tokens": "insensitive: the CPU pool (its size in chunks is what the model sets) "
                                                 "never gives the GPU a hit"},
    **{RUN / s / "metrics" / "0_start.prom": START for s in ("vllm", "lmcache")},
    **{RUN / s / "metrics" / "1_first.prom": {"lab.measured.*.prefix_cache_hits": "refused: the first two passes get no GPU "
                                              "hit, so a higher count after the first makes the second's delta negative"}
       for s in ("vllm", "lmcache")},
}

# the one-file edits the allowances rest on, each refused by the records' contract or a check
REFUSED: list[tuple[Path, Edit, str]] = [
    (RUN / "vllm" / "server.log", _sub("21,520 tokens", "21,536 tokens"), r"KV cache size 21,536 tokens, but"),
    (RUN / "lmcache" / "server.log", _sub("21,520 tokens", "21,536 tokens"), r"KV cache size 21,536 tokens, but"),
    (RUN / "vllm" / "metrics" / "0_start.prom", _sub('block_size="16"', 'block_size="8"'), "not one server"),
    (RUN / "lmcache" / "metrics" / "0_start.prom", _sub('block_size="16"', 'block_size="8"'), "not one server"),
    (RUN / "run.yaml", _sub("tokens: 5011", "tokens: 5012"), "not all 5012 tokens"),
    (RUN / "run.yaml", _sub("count: 10", "count: 9"), "expected each of 9 documents once"),
    (RUN / "requests.csv", _rows(lambda i, r: r.update(prompt_tokens="134") if r["phase"] == "check" and r["setup"] == "vllm"
                                 else None, "vLLM's check prompt longer"), "check prompt length differs"),
    (RUN / "requests.csv", _rows(lambda i, r: r.update(prompt_tokens="134") if r["phase"] == "check" and r["setup"] == "lmcache"
                                 else None, "LMCache's check prompt longer"), "check prompt length differs"),
    (RUN / "requests.csv", _rows(lambda i, r: r.update({"pass": "second"}) if r["setup"] == "lmcache" and r["pass"] == "first"
                                 and r["doc"] == "0" else None, "a request's pass"), "appears twice|documents once"),
    (RUN / "run.yaml", _sub("LMCACHE_CHUNK_SIZE: '256'", "LMCACHE_CHUNK_SIZE: '3000'"), "not whole 3000-token chunks"),
    *[(RUN / s / "metrics" / "0_start.prom", _counter("vllm:prefix_cache_hits_total"), "a counter went down")
      for s in ("vllm", "lmcache")],
    *[(RUN / s / "metrics" / "1_first.prom", _counter("vllm:prefix_cache_hits_total"), "a counter went down")
      for s in ("vllm", "lmcache")],
]


# ---------------------------------------------------------------- running the analysis on a copy
@pytest.fixture()
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Path]:
    monkeypatch.chdir(tmp_path)
    fresh = copier(tmp_path)
    return lambda: fresh(RUN, MODEL.parent)


def _numbers(root: Path) -> dict[str, dict]:
    w = NumbersWriter("lab", "test", ["everything"])
    analyse(LabInputs.under(root / RUN, str(root / MODEL)), w)
    return {k: {**d, "inputs": [Path(p).relative_to(root).as_posix() for p in d["inputs"]]} for k, d in w.numbers.items()}


def _run(copy: Callable[[], Path], edits: list[tuple[Path, Edit]]) -> dict[str, dict]:
    root = copy()
    for path, edit in edits:
        edit(root / path)
    return _numbers(root)


def test_every_number_names_records_and_no_list_is_written(copy) -> None:
    nums = _numbers(copy())
    assert all(d["inputs"] and d["inputs"] != ["everything"] for d in nums.values())
    assert "reading(" not in (REPO / "src/kvtier/lab/analysis.py").read_text()
    assert nums["lab.setup.concurrency"]["inputs"] == [(RUN / "run.yaml").as_posix()]
    assert nums["lab.measured.vllm.second.prefix_cache_hits"]["inputs"] == [
        (RUN / "vllm/metrics" / f"{n}.prom").as_posix() for n in ("1_first", "2_second")]


def test_exactly_the_numbers_that_moved_name_the_file(copy) -> None:
    before = _numbers(copy())
    moved_by: dict[Path, set[str]] = {p: set() for p in SINGLE}
    for path, edits in SINGLE.items():
        for edit in edits:
            m = moved(before, _run(copy, [(path, edit)]))
            if getattr(edit, "moves_nothing", False):
                assert not m, f"{edit.__name__} of {path} (a line no number reads) moved {sorted(m)}"
                continue
            assert_named(m, naming(before, path), f"{path} ({edit.__name__})")
            moved_by[path] |= m
    for name, (files, edits) in COHERENT.items():
        m = moved(before, _run(copy, edits))
        for f in files:
            assert_named(m, naming(before, f), f"{f} ({name})")
            moved_by[f] |= m
    for path in SINGLE:
        assert_allowed(naming(before, path) - moved_by[path], ALLOWED.get(path, {}), path)


@pytest.mark.parametrize(("path", "edit", "error"), REFUSED, ids=[f"{p.name}:{e.__name__}" for p, e, _ in REFUSED])
def test_the_edits_the_allowances_rest_on_are_refused(copy, path: Path, edit: Edit, error: str) -> None:
    with pytest.raises(RawRecordError, match=error):
        _run(copy, [(path, edit)])
