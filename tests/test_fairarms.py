"""Fair arms (issue 34, item 1): every tier's server gets the same CPU reservation, OpenMP binding
and hash seed, recorded; `kvtier arms` compares the arms' recorded settings and refuses unequal
ones, naming the setting and both runs' files; the committed records are checked as they are."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kvtier import fairarms
from kvtier.records import serversettings
from kvtier.serving import ServerSpec, armsettings
from kvtier.serving.server import LMCACHE_CPU_CONNECTOR

REPO = Path(__file__).resolve().parents[1]
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm/bin/vllm")).with_name("python")
LM = REPO / "raw/lab/cyclic-lmcache-cpu"


def spec(tier: str, **kw: object) -> ServerSpec:
    return ServerSpec(model="m", tier=tier, offload_gib=0.125 if tier != "none" else 0.0, platform="cpu",
                      offload_block_tokens=256, **kw)  # type: ignore[arg-type]


def test_every_tier_gets_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND", "PYTHONHASHSEED"):
        monkeypatch.delenv(k, raising=False)
    rec = {t: spec(t).settings() for t in ("none", "native", "lmcache")}
    for t, r in rec.items():
        env = r["env"]
        assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and env["VLLM_CPU_OMP_THREADS_BIND"] == "auto", t
        assert env["PYTHONHASHSEED"] == "0", t
    strip = lambda r: {k: v for k, v in r["env"].items() if not armsettings.is_tier_env(k)}  # noqa: E731
    assert strip(rec["none"]) == strip(rec["native"]) == strip(rec["lmcache"])
    assert "LMCACHE_CHUNK_SIZE" in rec["lmcache"]["env"]  # the tier's own, recorded, not compared
    # what the caller asks for explicitly wins, and is what is recorded
    assert spec("none", env={"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}).settings()["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"


def test_no_secret_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    text = json.dumps(spec("lmcache").settings())
    assert "secret" not in text


OMP = """
import json, os
from types import SimpleNamespace
from vllm.utils.ompmultiprocessing import OMPProcessManager
out = {}
for tier, env in json.loads(os.environ["ARMS"]).items():
    for k in ("VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND"):
        os.environ.pop(k, None)
    os.environ.update(env)
    cfg = SimpleNamespace(parallel_config=SimpleNamespace(local_world_size=1, data_parallel_rank_local=None,
                          _api_process_count=1), kv_transfer_config=None if tier.endswith("none") else object())
    m = OMPProcessManager(cfg)
    out[tier] = [m.reserve_cpu_num, m.cpu_lists, m.reserved_cpu_list]
print("ARMS " + json.dumps(out))
"""


@pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM at {VLLM_PY} (.venv-vllm)")
def test_vllm_binds_every_tier_alike_with_these_settings() -> None:
    """vLLM's own OMPProcessManager (as installed), given each tier's environment from ServerSpec:
    the same reserved cores and OpenMP cores with or without a KV connector. Without the settings
    vLLM reserves one core more for the connector: that is what the settings are for."""
    def vllm_binding(arms: dict[str, dict[str, str]]) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_CPU_")}
        done = subprocess.run([str(VLLM_PY), "-c", OMP], env={**env, "ARMS": json.dumps(arms)}, capture_output=True,
                              text=True, timeout=300)
        line = [x for x in done.stdout.splitlines() if x.startswith("ARMS ")]
        assert line, done.stderr[-2000:]
        return json.loads(line[-1][5:])

    ours = {t: {k: v for k, v in spec(t).environment().items() if k.startswith("VLLM_CPU_")} for t in ("none", "lmcache")}
    defaults = {"none": {}, "lmcache": {}}
    got = vllm_binding({**{f"ours-{t}": e for t, e in ours.items()}, **{f"default-{t}": e for t, e in defaults.items()}})
    assert got["ours-none"] == got["ours-lmcache"]
    assert got["ours-none"][0] == 0  # nothing reserved
    assert got["default-lmcache"][0] == got["default-none"][0] + 1  # vLLM's per-tier default, ompmultiprocessing.py


def _log(tmp: Path, reserve: int, cores: str, min_req: int) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    p = tmp / "server.log"
    p.write_text(
        f"(EngineCore pid=1) WARNING 12-01 22:39:37 [ompmultiprocessing.py:63] VLLM_CPU_NUM_OF_RESERVED_CPU is less than "
        f"the minimum requirement: {min_req} cores\n"
        "(EngineCore pid=1) INFO 12-01 22:39:37 [ompmultiprocessing.py:185] \tVLLM_CPU_OMP_THREADS_BIND='auto', "
        "auto_setup=True, skip_setup=False\n"
        f"(EngineCore pid=1) INFO 12-01 22:39:37 [ompmultiprocessing.py:185] \tlocal_world_size=1, reserve_cpu_num={reserve}\n"
        f"(EngineCore pid=1) INFO 12-01 22:39:37 [ompmultiprocessing.py:185] \tlocal_rank=0, core ids=[{cores}]\n"
        "(EngineCore pid=1) INFO 12-01 22:39:37 [ompmultiprocessing.py:185] \treserved_cpus=[]\n"
        "(Worker pid=2) WARNING 12-01 22:39:46 [torch_utils.py:283] OMP_NUM_THREADS=2 is set; leaving Torch threads at 2 "
        "for serving.\n"
        "(EngineCore pid=1) INFO 12-01 22:39:46 [torch_utils.py:295] Reducing Torch threads from 2 to 1 for serving.\n")
    return p


def test_the_log_gives_what_vllm_made_of_the_settings(tmp_path: Path) -> None:
    s = serversettings.from_log(_log(tmp_path, 0, "0, 1", 2))
    assert s["reserved cores (vLLM's reserve_cpu_num)"].value == "0"
    assert s["OpenMP cores of worker 0"].value == "0,1"
    assert s["torch threads (Worker)"].value == "2" and s["torch threads (EngineCore)"].value == "1"
    # the minimum vLLM computes per tier is not a setting: two logs differing only there are equal
    a = serversettings.from_log(_log(tmp_path / "a", 0, "0, 1", 1))
    b = serversettings.from_log(_log(tmp_path / "b", 0, "0, 1", 2))
    assert {k: v.value for k, v in a.items()} == {k: v.value for k, v in b.items()}


def test_a_different_reservation_is_refused_naming_the_setting_and_both_files(tmp_path: Path) -> None:
    """Two copies of a committed long-context pair; one server's log edited to vLLM's default
    reservation for a connector (2 cores: its OpenMP threads on core 0 only)."""
    src = sorted((REPO / "raw/eviction/longctx").glob("*-32k-1-*"))
    assert len(src) == 2
    dirs = [shutil.copytree(d, tmp_path / d.name) for d in src]
    assert fairarms.check([fairarms.eviction_arm(d) for d in dirs]) == []
    log = dirs[0] / "server.log"
    log.write_text(log.read_text().replace("reserve_cpu_num=0", "reserve_cpu_num=1").replace("core ids=[0, 1]", "core ids=[0]"))
    with pytest.raises(fairarms.UnfairComparison) as e:
        fairarms.require_fair([fairarms.eviction_arm(d) for d in dirs])
    msg = str(e.value)
    assert "reserved cores (vLLM's reserve_cpu_num): '1'" in msg and "'0'" in msg
    assert "OpenMP cores of worker 0" in msg
    assert str(log.as_posix()) in msg and str((dirs[1] / "server.log").as_posix()) in msg


def test_a_flag_or_env_that_differs_is_refused(tmp_path: Path) -> None:
    src = sorted((REPO / "raw/eviction/longctx").glob("*-32k-1-*"))
    dirs = [shutil.copytree(d, tmp_path / d.name) for d in src]
    run = dirs[1] / "run.yaml"
    run.write_text(run.read_text().replace("  env: {}", "  env:\n    OMP_NUM_THREADS: '1'", 1)
                   .replace("--dtype=bfloat16", "--dtype=float32"))
    diffs = fairarms.check([fairarms.eviction_arm(d) for d in dirs])
    assert {d.setting for d in diffs} == {"env OMP_NUM_THREADS", "flag --dtype"}
    assert all(run.as_posix() in str(d) for d in diffs)


def test_the_tiers_own_flag_and_env_are_not_compared() -> None:
    flags = serversettings._flags(["--port", "8073", "--kv-transfer-config", '{"kv_connector":"X"}', "--enforce-eager",
                                   "--dtype=bfloat16"])
    assert flags == {"--enforce-eager": "on", "--dtype": "bfloat16"}
    assert armsettings.is_tier_env("LMCACHE_CHUNK_SIZE") and armsettings.is_tier_env("PYTHONPATH")
    assert not armsettings.is_tier_env("PYTHONHASHSEED")
    assert LMCACHE_CPU_CONNECTOR["kv_connector"]  # the connector is the tier's: in --kv-transfer-config


def test_committed_records() -> None:
    """The committed lab arms: the LMCache set is refused (its LMCache launches were given a hash
    seed, vLLM alone's not recorded); the native-tier run and the long-context and eviction-test
    CPU pairs share their recorded settings, the CPU reservation included (0 in every log)."""
    diffs = fairarms.check(fairarms.arms_of([LM]))
    assert [d.setting for d in diffs] == ["env PYTHONHASHSEED"]
    assert "20261201T225948Z-lmcache/run.yaml" in str(diffs[0])
    assert fairarms.check(fairarms.arms_of([REPO / "raw/lab/cyclic-cpu"])) == []
    for arm in fairarms.arms_of([LM, REPO / "raw/lab/cyclic-cpu"]):
        assert arm.value("reserved cores (vLLM's reserve_cpu_num)") == "0"
        assert arm.value("OpenMP cores of worker 0") == "0,1"
    longctx = REPO / "raw/eviction/longctx"
    for native in sorted(longctx.glob("*-native")):
        none = native.with_name(native.name[: -len("native")] + "none")
        assert fairarms.check([fairarms.eviction_arm(native), fairarms.eviction_arm(none)]) == [], native.name


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtier.cli import main

    assert main(["arms", str(REPO / "raw/lab/cyclic-cpu")]) == 0
    assert "fair: 3 arms" in capsys.readouterr().out
    assert main(["arms", str(LM)]) == 1
    err = capsys.readouterr().err
    assert "env PYTHONHASHSEED" in err and "20261201T223827Z-vllm" in err


def test_process_cpu_seconds_reads_the_servers_process_group(tmp_path: Path) -> None:
    from kvtier.lab.cyclic import process_cpu_seconds

    tick = os.sysconf("SC_CLK_TCK")
    for pid, name, pgrp, ut, st in ((10, "vllm", 10, 20, 5), (11, "VLLM::EngineCor", 10, 3 * tick, tick),
                                     (12, "other job", 99, 1000, 0)):
        (tmp_path / str(pid)).mkdir()
        # fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 {ut} {st} 0 0\n")
    got = process_cpu_seconds(10, proc=tmp_path)
    assert got == {"VLLM::EngineCor (11)": 4.0, "vllm (10)": round(25 / tick, 2)}


def test_the_lab_records_each_setups_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.lab import cyclic
    from kvtier.yamlio import load_yaml

    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    specs = {s: spec(cyclic.TIER_OF_SETUP[s]) for s in ("vllm", "lmcache")}
    cyclic.write_run(tmp_path, cyclic.CyclicPlan(setups=list(specs)), specs, [])
    meta = load_yaml((tmp_path / "run.yaml").read_text())
    for s in specs:
        assert meta["setups"][s]["settings"]["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
        assert meta["setups"][s]["env"]["PYTHONHASHSEED"] == "0"  # every arm's seed, not LMCache's alone
    arms = fairarms.lab_arms(tmp_path)
    assert fairarms.check(arms) == []


def test_the_eviction_harness_records_the_settings_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.harness import launched_server_meta

    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setenv("LMCACHE_REMOTE_URL", "lm://user:hunter2@host")  # a tier variable holding a secret-looking value
    meta = launched_server_meta(spec("native", env={"OMP_API_TOKEN": "tok-secret"}))
    settings = meta["settings"]
    assert settings["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and settings["env"]["PYTHONHASHSEED"] == "0"
    assert "tok-secret" not in json.dumps(meta) and "hunter2" not in json.dumps(meta)


def test_a_folder_that_is_not_a_run_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtier.cli import main

    assert main(["arms", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err
