"""Issue 25, items 1 and 2 for the eviction test: its run folder is a records kind, and a number's
provenance is read off the records its computation touched (no `writer.reading` list).

Perturbed one file at a time in a copy of raw/eviction: every number whose value moved (or
vanished) names the file, and every number that names it moved, except the kinds listed in
NAMES_WITHOUT_MOVING (each with its reason). Also: the writer and the reader agree (a run written
is read back equal), and the replica generator writes the pinned bytes again.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from kvtier.eviction import analysis
from kvtier.eviction import longctx_analysis as lx
from kvtier.numbers import NumbersWriter
from kvtier.records.evictionrun import REQUEST_SCHEMA, RUN_SCHEMA, RunWriter, find_runs, read_run
from kvtier.records.touch import scope
from kvtier.records.traced import plain
from perturbation import copier, moved, naming

REPO = Path(__file__).resolve().parent.parent
A = Path("raw/eviction/A/2026-10-14T09-12-05Z")
CPU = Path("raw/eviction/cpu/2026-12-01T22-27-06Z-9499-2-native")  # a launch of the latest set, kept in the medians
LONG = Path("raw/eviction/longctx/2026-12-02T01-34-30Z-214a-32k-2-native")

# Numbers that may name a file a perturbation of it does not move, and why.
NAMES_WITHOUT_MOVING = {
    # counts and verdicts over the file: how many launches, cycles, restores, codes; which were
    # evicted, flagged, valid, passed the logprob check; whole blocks (a count of a quotient)
    "count": re.compile(r"(launches\w*|earlier_\w+|all_flagged|cycles\w*|restores\w*|restored_\w+|recomputed_\w+|excluded_runs|"
                        r"runs_per_setup|codes_per_conversation|logprobs?[._](checked|passed|failed|same_compute|positions)|"
                        r"logprob_failed|\.n|blocks_moved|blocks_served|sizes|size\.\d+\.tokens|points)$"),
    # geometry: stated by several sources and cross-checked (records.geometry), so it cannot move alone
    "geometry": re.compile(r"(block_tokens|bytes_per_block|ram_pool|gpu_pool_tokens|kv_cache_tokens|load_threshold)$"),
    # order statistics over several launches' pooled values: they move when this launch holds their rank
    "order statistic": re.compile(r"\.(median|min|max|ci95_lo|ci95_hi)$|_max$|_min$|max_ratio$|load_interval$|"
                                  r"^longctx\.s\d+k\.\w+\.(prompt_tokens|kv_cache_tokens)$"),
    # the size a long-context launch was built to groups the launches: changing it regroups them
    "key": re.compile(r"^longctx\.s\d+k\.\w+\.target_tokens$"),
}


def _evict_numbers() -> dict[str, dict]:
    dirs = sorted(p for p in Path("raw/eviction").glob("*/*") if p.parent.name != "longctx")
    reqs, runs = analysis.load(dirs, RUN_SCHEMA, REQUEST_SCHEMA)
    w = NumbersWriter("evict", "test", ["everything"])
    analysis.register_numbers(w, reqs, runs, ["A", "C"], "cpu")
    return w.numbers


def _longctx_numbers() -> dict[str, dict]:
    dirs = sorted(Path("raw/eviction/longctx").glob("*"))
    reqs, runs = lx.load(dirs, RUN_SCHEMA, REQUEST_SCHEMA)
    table = lx.size_table(reqs, runs, 3.0)
    gpu = lx.gpu_points([A, Path("raw/eviction/C/2026-10-16T20-15-44Z")], RUN_SCHEMA, REQUEST_SCHEMA, ["A", "C"], {})
    w = NumbersWriter("longctx", "test", ["everything"])
    lx.register_numbers(w, reqs, runs, table, gpu, "raw/production/C/coldreads.csv", 3.0)
    return w.numbers


def _slower_requests(path: Path) -> None:
    """Every time longer (a cold read 1.5 times, the rest 1.2: ratios move too); each restored
    answer's logprobs 0.01 nats lower."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        for k in ("ttft_s", "first_chunk_s", "first_byte_s", "total_s"):
            if rec.get(k) is not None:
                rec[k] *= 1.5 if rec["phase"] == "cold" else 1.2
        if rec["phase"] == "restore" and rec.get("logprobs"):
            for lp in rec["logprobs"]:
                lp["logprob"] -= 0.01
        out.append(json.dumps(rec, sort_keys=True))
    path.write_text("\n".join(out) + "\n")


def _other_run_yaml(path: Path) -> None:
    """What run.yaml states alone: the model's size, the GPU, the health wait, the plan's evictors,
    the conversations' lengths, the load summaries."""
    meta = yaml.safe_load(path.read_text())
    meta["model"]["params"] = (meta["model"].get("params") or 1) + 10**6
    if meta["host"].get("gpu"):
        meta["host"]["gpu"]["memory_total_mib"] += 1024
    if meta["server"].get("health_wait_s") is not None:
        meta["server"]["health_wait_s"] += 1.0
    meta["plan"]["evictors"] += 1
    if "longctx" not in path.parts:  # a long-context launch's size is what groups it (see NAMES_WITHOUT_MOVING)
        meta["plan"]["target_tokens"] += 1
    for conv in [meta["conversation"], *(meta.get("conversations") or [])]:
        conv["prompt_tokens"] += 1
    load = meta.get("host_load") or {}
    # not load1_median: the load rule reads it from host_load.tsv and refuses a summary that disagrees
    # with the samples (tests/test_load_rule.py), so it cannot move alone; _busier_load moves it
    for k, dv in (("load1_max", 0.5), ("steal_share", 0.0001)):
        if load.get(k) is not None:
            load[k] = round(load[k] + dv, 6)
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _more_counted(path: Path) -> None:
    """A snapshot whose token counters by source and load counters are a little higher (the prompt
    tokens with them: the three sources add up to them, check_prompt_sources)."""
    def bump(m: re.Match) -> str:
        name, value = m.group(1), float(m.group(2))
        d = 3 if "prompt_tokens_by_source" in name else 9 if "prompt_tokens_total" in name else 4096 if "bytes" in name else 0.001
        return f"{name} {value + d}"
    text = re.sub(r'^((?:vllm:prompt_tokens_by_source_total|vllm:prompt_tokens_total|vllm:kv_offload_load_\w+_total)\{[^}]*\}|'
                  r'vllm:kv_offload_total_\w+_total\{[^}]*transfer_type="CPU_to_GPU"[^}]*\})\s+(\S+)$', bump, path.read_text(),
                  flags=re.M)
    path.write_text(text)


def _sparser_load(path: Path) -> None:
    """Load samples one second further apart each."""
    import datetime as dt
    lines = path.read_text().splitlines()
    out = [lines[0]]
    for i, line in enumerate(lines[1:]):
        t, rest = line.split("\t", 1)
        out.append(f"{(dt.datetime.fromisoformat(t) + dt.timedelta(seconds=i)).isoformat(timespec='milliseconds')}\t{rest}")
    path.write_text("\n".join(out) + "\n")


def _busier_load(path: Path) -> None:
    """Every 1-minute load sample 0.004 higher: the median moves, within run.yaml's rounding of it."""
    lines = path.read_text().splitlines()
    rows = [ln.split("\t") for ln in lines[1:]]
    path.write_text("\n".join([lines[0]] + ["\t".join([r[0], f"{float(r[1]) + 0.004:.3f}", *r[2:]]) for r in rows]) + "\n")


def _restore_after(run: Path) -> Path:
    rec = next(json.loads(ln) for ln in (run / "requests.jsonl").read_text().splitlines()
               if json.loads(ln)["phase"] == "restore" and json.loads(ln)["status"] == "ok")
    return run / rec["metrics_after"]


@pytest.fixture()
def raw_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copier(tmp_path)("raw/eviction", "raw/production/C/coldreads.csv")
    monkeypatch.chdir(root)
    return root


def _unexplained(keys: set[str]) -> set[str]:
    return {k for k in keys if not any(p.search(k) for p in NAMES_WITHOUT_MOVING.values())}


CASES = [("evict", A / "requests.jsonl", _slower_requests), ("evict", A / "run.yaml", _other_run_yaml),
         ("evict", "A restore", _more_counted), ("evict", CPU / "requests.jsonl", _slower_requests),
         ("evict", CPU / "run.yaml", _other_run_yaml), ("evict", "CPU restore", _more_counted),
         ("evict", CPU / "host_load.tsv", _sparser_load), ("evict", CPU / "host_load.tsv", _busier_load), ("longctx", LONG / "requests.jsonl", _slower_requests),
         ("longctx", LONG / "run.yaml", _other_run_yaml), ("longctx", "LONG restore", _more_counted)]


@pytest.mark.parametrize(("topic", "target", "perturb"), CASES, ids=[f"{t}:{Path(str(p)).name}" for t, p, _ in CASES])
def test_exactly_the_numbers_that_moved_name_the_perturbed_file(raw_copy: Path, topic: str, target, perturb) -> None:
    numbers = _evict_numbers if topic == "evict" else _longctx_numbers
    if isinstance(target, str):  # a restore's after-snapshot of that run
        target = _restore_after({"A": A, "CPU": CPU, "LONG": LONG}[target.split()[0]])
    before = numbers()
    assert all(d["inputs"] != ["everything"] for d in before.values()), "a number fell back to the rule's inputs"
    perturb(target)
    m, named = moved(before, numbers(), may_vanish=True), naming(before, target)
    assert m or not _unexplained(named), f"the perturbation of {target} moved nothing"
    assert m <= named, f"moved when {target} changed but do not name it: {sorted(m - named)}"
    assert not _unexplained(named - m), f"name {target} but did not move: {sorted(_unexplained(named - m))}"


def test_the_worker_line_is_read_and_cross_checked(raw_copy: Path) -> None:
    """server.log gives the CPU tier's bytes per offloaded block; it cannot move alone: the model's
    geometry in run.yaml must agree, and a worker line that says otherwise is refused by name."""
    nums = _evict_numbers()
    log = CPU / "server.log"
    assert log.as_posix() in nums["evict.cpu.native.bytes_per_block"]["inputs"]
    assert log.as_posix() not in nums["evict.cpu.native.ttft.cold.median"]["inputs"]
    text = log.read_text()
    assert "bytes_per_offloaded_block=3276800" in text
    log.write_text(text.replace("bytes_per_offloaded_block=3276800", "bytes_per_offloaded_block=3276801"))
    with pytest.raises(Exception, match="server.log"):
        _evict_numbers()


def test_settings_and_table1_name_what_they_read(raw_copy: Path) -> None:
    nums = _evict_numbers()
    assert nums["evict.cpu.max_load_per_cpu"]["inputs"] == []
    assert nums["evict.A.ttft.cold"]["inputs"] == [(A / "requests.jsonl").as_posix()]
    assert nums["evict.A.gpu_memory"]["inputs"] == [(A / "run.yaml").as_posix()]
    assert all(p.endswith(".prom") for p in nums["evict.A.restore_bytes"]["inputs"])


def test_a_run_written_is_read_back_equal(tmp_path: Path) -> None:
    """The writer and the reader of the record kind agree: a measured run's contents written
    again through RunWriter read back equal, with the hashes of what was read."""
    src = read_run(REPO / CPU)
    w = RunWriter(tmp_path / "cpu" / CPU.name)
    w.write_meta(plain(src.meta))
    for rec in src.requests:
        w.append_request(plain(rec))
    for p in sorted((REPO / CPU / "metrics").iterdir()):
        w.save_metrics(p.stem, p.read_text())
    run = read_run(w.dir)
    assert run.meta == src.meta and plain(run.meta) == yaml.safe_load((REPO / CPU / "run.yaml").read_text())
    assert [plain(r) for r in run.requests] == [plain(r) for r in src.requests]
    assert w.requests_jsonl.read_bytes() == (REPO / CPU / "requests.jsonl").read_bytes()
    assert run.sha256[run.run_yaml.as_posix()] == hashlib.sha256(run.run_yaml.read_bytes()).hexdigest()
    assert find_runs([str(run.run_yaml), str(run.requests_jsonl)]) == [run.dir]
    with scope() as seen:
        assert run.requests[0]["seq"] == 0  # reading a request touches requests.jsonl
    assert seen == {run.requests_jsonl.as_posix()}
    with scope() as seen:
        run.final("cold")  # choosing requests is structure: nothing touched
    assert seen == set()


def test_the_replica_generator_writes_the_pinned_bytes(tmp_path: Path) -> None:
    from kvtier.manifest import read_manifest
    from kvtier.replica.eviction import main

    assert main(["--out", str(tmp_path)]) == 0
    pins = read_manifest(REPO / "raw" / "MANIFEST.tsv")
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert written
    for p in written:
        pin = pins[f"raw/eviction/{p.relative_to(tmp_path).as_posix()}"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == pin.sha256, p
