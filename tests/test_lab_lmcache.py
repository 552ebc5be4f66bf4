"""The lab on LMCache itself, vLLM's CPU build: the launch series (one setup a launch, interleaved,
each in a new folder, the host's load recorded) and what LMCache's records say, request by request,
beside the simulator's LMCache 0.5.6 policy. Expected values are worked out by hand from the
documents' lengths and the configured sizes."""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pytest
import yaml

from kvtier.errors import RawRecordError
from kvtier.lab import cyclic, launches, live
from kvtier.runfolder import RunFolderExists

ROOT = Path(__file__).resolve().parent.parent / "raw" / "lab" / "cyclic-lmcache-cpu"
CHUNK = 256  # LMCache's chunk: two 128-token server blocks


# ---------------------------------------------------------------- the launch series, without a server
def test_launches_interleave_setups_each_in_a_new_folder(tmp_path, monkeypatch):
    calls = []

    def fake_run(out, plan, spec_for, progress, health_timeout_s, extra, request_timeout_s=600.0):
        assert not Path(out).exists()
        Path(out).mkdir(parents=True)
        (Path(out) / "run.yaml").write_text("x")
        calls.append((Path(out).name, plan.setups, extra["launch"]))
        return [Path(out) / "run.yaml"]

    stamps = iter(range(100))

    class Clock:
        @staticmethod
        def now(tz):
            from datetime import datetime
            return datetime(2026, 12, 1, 22, 0, next(stamps), tzinfo=tz)

    monkeypatch.setattr(cyclic, "run", fake_run)
    monkeypatch.setattr(cyclic, "datetime", Clock)
    plan = cyclic.CyclicPlan(setups=["vllm", "lmcache", "lmcache-small"])
    files = cyclic.run_launches(tmp_path / "series", plan, lambda s: None, 3, lock=tmp_path / "lock")
    assert [c[1] for c in calls] == [["vllm"], ["lmcache"], ["lmcache-small"]] * 3
    assert len({c[0] for c in calls}) == 9 and calls[0][0] == "20261201T220000Z-vllm"
    assert [c[2]["setup_launch"] for c in calls] == [1, 1, 1, 2, 2, 2, 3, 3, 3] and calls[4][2]["position"] == 5
    assert len(files) == 9
    with pytest.raises(ValueError, match=">= 1"):
        cyclic.run_launches(tmp_path / "x", plan, lambda s: None, 0)


def test_a_used_folder_is_refused_before_any_server(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "requests.csv").write_text("old")
    (tmp_path / "run-2").mkdir()
    with pytest.raises(RunFolderExists, match=r"exists already; a run writes only into a new folder"):
        cyclic.run(tmp_path / "run", cyclic.CyclicPlan(setups=["vllm"]), lambda s: pytest.fail("no server may start"))
    assert (tmp_path / "run" / "requests.csv").read_text() == "old"


def test_the_lock_is_the_flock_of_the_shared_file(tmp_path):
    lock = tmp_path / "vllm.lock"
    with cyclic.held(lock):
        with open(lock) as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the launch


def test_load_is_recorded_at_start_end_and_between():
    import time

    with cyclic.LoadRecorder(interval_s=0.05) as rec:
        time.sleep(0.3)
    r = rec.record()
    assert len(r["start"]) == 3 and len(r["end"]) == 3 and len(r["series"]) >= 3
    assert all(t > 0 and load >= 0 for t, load in r["series"]) and r["series_columns"][1] == "load 1 min"


def test_the_documents_digest_is_the_input_as_sent():
    plan = cyclic.CyclicPlan(docs=10, doc_words=1000)
    import hashlib

    h = hashlib.sha256(b"".join(t.encode() + b"\0" for t in cyclic.documents(plan) + [cyclic.check_text(plan)]))
    assert cyclic.documents_digest(plan) == h.hexdigest() != cyclic.documents_digest(cyclic.CyclicPlan(docs=9))


# ---------------------------------------------------------------- LMCache's pool, as the simulator sees it
def _setup_dir(tmp_path: Path, line: str | None) -> Path:
    src = Path(__file__).resolve().parent.parent / "raw" / "lab" / "cyclic-cpu" / "vllm" / "metrics" / "0_start.prom"
    d = tmp_path / "lmcache"
    (d / "metrics").mkdir(parents=True)
    shutil.copy(src, d / "metrics" / "0_start.prom")
    (d / "server.log").write_text(line or "INFO: Application startup complete.\n")
    return d


@pytest.mark.parametrize("gib, chunks", [("0.125", 256), ("0.03125", 64), ("0.1", 204)])
def test_lmcache_pool_in_chunks_from_its_configuration(tmp_path, gib, chunks):
    # 256 tokens x 2,048 bytes = 512 KiB a chunk; 0.125 GiB = 128 MiB = 256 chunks; 0.1 GiB = 204.8 -> 204
    d = _setup_dir(tmp_path, "(Worker pid=7) LMCache INFO: kvtier_lmcache_cpu: registered 2 layers of KV (134, 4, 128, 128) "
                             "torch.bfloat16: 134 blocks of 128 tokens, layout from vLLM's vec cache writer; bytes_per_token=2048\n")
    shape = live.lmcache_shape(d, {"tier": "lmcache", "env": {"LMCACHE_MAX_LOCAL_CPU_SIZE": gib, "LMCACHE_CHUNK_SIZE": "256"}})
    assert shape == {"block_tokens": 128, "kv_blocks": 134, "chunk_blocks": 2, "cpu_chunks": chunks}


def test_an_lmcache_run_that_never_moved_kv_is_named(tmp_path):
    d = _setup_dir(tmp_path, None)
    with pytest.raises(RawRecordError, match="never moved KV"):
        live.lmcache_shape(d, {"env": {"LMCACHE_MAX_LOCAL_CPU_SIZE": "0.125", "LMCACHE_CHUNK_SIZE": "256"}})
    with pytest.raises(RawRecordError, match="LMCACHE_MAX_LOCAL_CPU_SIZE"):
        live.lmcache_shape(d, {"env": {}})


# ---------------------------------------------------------------- the committed records
REPO = ROOT.parents[2]


def pinned_files() -> list[str]:
    from kvtier.manifest import read_manifest

    return [str(REPO / p) for p in read_manifest(REPO / "raw" / "MANIFEST.tsv") if p.startswith("raw/lab/cyclic-lmcache-cpu/")]


@pytest.fixture(scope="module")
def series():
    return launches.launch_table(ROOT, pinned_files())


def test_only_pinned_launches_are_read(tmp_path):
    dirs = launches.launch_dirs(ROOT, pinned_files())
    assert launches.launch_dirs(ROOT, [str(d / "run.yaml") for d in dirs[:2]]) == dirs[:2]
    with pytest.raises(RawRecordError, match="no launch folder"):
        launches.launch_dirs(ROOT, [])


def test_launches_of_each_setup_interleaved_in_their_own_folders(series):
    dirs = launches.launch_dirs(ROOT, pinned_files())
    planned = [yaml.safe_load((d / "run.yaml").read_text())["launch"]["order"] for d in dirs]
    order = [d.name.split("Z-", 1)[1] for d in dirs]
    # in the order they started: the planned interleaving (vllm, lmcache, lmcache-small, vllm, ...) so far
    assert planned[0] == ["vllm", "lmcache", "lmcache-small"] * 3 and all(p == planned[0] for p in planned)
    assert order == planned[0]  # three launches of each setup
    for d in dirs:
        meta = yaml.safe_load((d / "run.yaml").read_text())
        assert list(meta["setups"]) == [d.name.split("Z-", 1)[1]]  # one setup a launch
        assert len(meta["load"]["start"]) == 3 and len(meta["load"]["end"]) == 3 and meta["load"]["series"]
        # the same input every launch
        assert meta["documents"]["sha256"] == cyclic.documents_digest(cyclic.CyclicPlan(docs=10, doc_words=1000))
        assert meta["versions"]["lmcache"] == "0.5.6" and meta["versions"]["vllm_platform"] == "cpu"


def test_every_lmcache_launch_started_as_lmcache(series):
    from kvtier.serving import server as srv

    for d in launches.launch_dirs(ROOT, pinned_files()):
        meta = yaml.safe_load((d / "run.yaml").read_text())
        (setup, conf), = meta["setups"].items()
        if conf["tier"] != "lmcache":
            continue
        assert conf["env"]["PYTHONHASHSEED"] == "0" and conf["env"]["LMCACHE_MAX_LOCAL_CPU_SIZE"] in ("0.125", "0.03125")
        assert srv.lmcache_start_fault((d / setup / "server.log").read_text(errors="replace"), cpu=True) is None


def test_counters_and_usage_agree_on_every_request(series):
    assert len(series) == series.launch.nunique() * 31 and series.usage_agrees.all()
    assert ((series.gpu_tokens + series.cpu_tokens + series.computed_tokens) == series.prompt_tokens).all()


def test_lmcache_serves_the_second_pass_by_hand(series):
    second = series[(series.phase == "doc") & (series["pass"] == "second")]
    alone, lm, small = (second[second.setup == s] for s in launches.SETUPS)
    assert alone.gpu_tokens.sum() == 0 and alone.cpu_tokens.sum() == 0  # the cycle defeats the KV cache
    # room for all ten documents: every full 256-token chunk of each comes from LMCache, the partial last one is computed
    assert (lm.cpu_tokens == lm.prompt_tokens // CHUNK * CHUNK).all() and lm.gpu_tokens.sum() == 0
    assert (lm.computed_tokens == lm.prompt_tokens % CHUNK).all()
    # 64 chunks (16,384 tokens) for ten documents of 15-16 chunks: the LRU pool is cycled through like the KV cache
    assert small.cpu_tokens.sum() == 0


def test_the_simulators_lmcache_policy_predicts_every_request(series):
    # the pools as the simulator reads them: 0.125 GiB / (256 tokens x 2,048 bytes) = 256 chunks, 0.03125 GiB = 64
    assert set(series[series.setup == "lmcache"].cpu_chunks) == {256}
    assert set(series[series.setup == "lmcache-small"].cpu_chunks) == {64}
    assert series.agrees.all(), series[~series.agrees][["launch", "pass", "doc", "gpu_tokens", "cpu_tokens", "pred_gpu_tokens", "pred_cpu_tokens"]]
