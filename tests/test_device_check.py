"""scripts/device-check.sh's CPU-testable parts: the shell syntax, the plan (argument parsing, the
new run folder, the harness arguments read back by kvtier harness's own parser, --bandwidth-only),
the bandwidth script's arithmetic, its geometry reader, its imports (torch and the standard library
only) and its refusal / CPU fallback without a GPU, and the summary writer on fake records. The GPU parts (install, vLLM on CUDA, the copies themselves) run only on a GPU host."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import VLLM_BIN
from kvtier.device import bandwidth, plan, summary
from kvtier.harness import build_parser as harness_parser

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = ["scripts/device-check.sh", "scripts/wheelhouse.sh", "envs/vllm-gpu.post-deploy.sh", *sorted(
    str(p.relative_to(REPO)) for p in (REPO / "scripts").glob("*.sh") if p.name not in ("device-check.sh", "wheelhouse.sh"))]
TORCH_PY = VLLM_BIN.with_name("python")  # the CPU vLLM venv has torch (the test lock has not)


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_scripts_parse(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_plan_defaults_name_a_new_folder_and_three_cycles(tmp_path: Path) -> None:
    p = plan.make_plan(["--out", str(tmp_path)])
    assert p.cycles == 3 and p.block_tokens == 1600
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ-[0-9a-f]{6}", p.run_id), p.run_id
    assert Path(p.run_dir) == tmp_path / p.run_id and not Path(p.run_dir).exists()
    assert p.records_dir == str(tmp_path / p.run_id / "C-reduced" / "native")
    assert len({plan.auto_run_id() for _ in range(5)}) == 5  # same second, different folders (24 random bits)


@pytest.mark.parametrize("args,message", [
    (["--cycles", "2"], ">= 3 cycles"),
    (["--offload-gib", "0.5"], "blocks take"),                 # 32 blocks x 1,600 x 32 KiB > 0.5 GiB
    (["--kv-cache-gib", "1"], "less than --max-model-len"),    # 32,768 tokens < 65,536
    (["--target-tokens", "70000"], "--target-tokens (70000) < --max-model-len"),
    (["--block-tokens", "1000"], "multiple of vLLM's GPU block"),
    (["--run-id", "a/b"], "not a folder name"),
])
def test_plan_refuses_with_the_reason(tmp_path: Path, args: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        plan.make_plan(["--out", str(tmp_path), *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_plan_refuses_an_existing_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(SystemExit):
        plan.make_plan(["--out", str(tmp_path), "--run-id", "taken"])
    assert "exists" in capsys.readouterr().err


def test_plan_bandwidth_only_has_its_own_limit_and_no_harness(tmp_path: Path) -> None:
    p = plan.make_plan(["--out", str(tmp_path), "--bandwidth-only"])
    assert p.bandwidth_only and p.time_limit_s == plan.BANDWIDTH_ONLY_LIMIT_S == 180  # under 3 minutes
    text = plan.shell_text(p, "m")
    assert "BANDWIDTH_ONLY=1" in text and "HARNESS_ARGS=()" in text
    assert plan.make_plan(["--out", str(tmp_path), "--bandwidth-only", "--time-limit-s", "90",
                           "--bandwidth-blocks", "8", "--block-tokens", "800"]).time_limit_s == 90
    full = plan.make_plan(["--out", str(tmp_path)])
    assert not full.bandwidth_only and full.time_limit_s == 480 and "BANDWIDTH_ONLY=0" in plan.shell_text(full, "m")


@pytest.mark.parametrize("args,named", [
    (["--cycles", "3"], "--cycles"),                     # even at its default: given, so refused
    (["--skip-install"], "--skip-install"),
    (["--offload-gib", "2", "--port", "9000"], "--offload-gib, --port"),
])
def test_plan_bandwidth_only_refuses_the_eviction_tests_options(tmp_path: Path, args: list[str], named: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        plan.make_plan(["--out", str(tmp_path), "--bandwidth-only", *args])
    assert e.value.code == 2
    assert f"--bandwidth-only measures the copy alone: {named} belong to the eviction test" in capsys.readouterr().err


def test_kv_bytes_per_token_is_the_gpu_models() -> None:
    from kvtier.tinymodel import GEOMETRIES, kv_bytes_per_token

    g = GEOMETRIES["gpu"]
    # K and V, per layer and KV head, head_dim values of 2 bytes (bf16)
    assert plan.KV_BYTES_PER_TOKEN == 2 * g["num_hidden_layers"] * g["num_key_value_heads"] * g["head_dim"] * 2 == 32768
    assert kv_bytes_per_token("gpu") == plan.KV_BYTES_PER_TOKEN and kv_bytes_per_token("cpu") == 2048
    assert plan.MODEL_MAX_LEN == g["max_len"]


def test_harness_args_are_read_by_the_harness_itself(tmp_path: Path) -> None:
    p = plan.make_plan(["--out", str(tmp_path), "--cycles", "4", "--offload-gib", "8"])
    a = harness_parser().parse_args(plan.harness_args(p, "data/m") + ["--vllm-bin", "x/vllm"])
    assert (a.setup, a.tier, a.platform, a.repeat, a.rounds, a.block_tokens, a.offload_gib) == \
        ("C-reduced", "native", "cuda", 4, 1, 1600, 8.0)
    assert Path(a.out) / a.setup / a.run_id == Path(p.records_dir)
    assert "--kv-cache-memory-bytes=4294967296" in a.server_arg and "--max-model-len=65536" in a.server_arg


def test_shell_text_evaluates_in_bash(tmp_path: Path) -> None:
    p = plan.make_plan(["--out", str(tmp_path), "--run-id", "r 1"])
    code = plan.shell_text(p, "m") + 'printf "%s|" "$RUN_DIR" "$CYCLES" "$DRY_RUN" "${#HARNESS_ARGS[@]}" "${HARNESS_ARGS[-1]}"'
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == f"{tmp_path}/r 1|3|0|{len(plan.harness_args(p, 'm'))}|--server-arg=--enforce-eager|"


def _script(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "KVTIER_PYTHON": sys.executable, "HOME": str(cwd)}
    return subprocess.run(["bash", str(REPO / "scripts/device-check.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_script_dry_run_and_refusals_touch_nothing(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    dry = _script("--out", str(out), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "HARNESS_ARGS=(run --setup C-reduced" in dry.stdout and not out.exists()
    bad = _script("--out", str(out), "--cycles", "1")
    assert bad.returncode == 2 and ">= 3 cycles" in bad.stderr
    assert "usage: scripts/device-check.sh" in _script("--help").stdout
    if shutil.which("nvidia-smi") is None:  # this machine has no GPU: refused before any folder is made
        none = _script("--out", str(out))
        assert none.returncode == 3 and "no NVIDIA GPU" in none.stderr and not out.exists()


def _stand_in_gpu(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return bin_dir


def test_script_bandwidth_only_dry_run_and_refusals(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    dry = _script("--out", str(out), "--bandwidth-only", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "BANDWIDTH_ONLY=1" in dry.stdout and "TIME_LIMIT_S=180" in dry.stdout and not out.exists()
    bad = _script("--out", str(out), "--bandwidth-only", "--cycles", "5")
    assert bad.returncode == 2 and "belong to the eviction test" in bad.stderr
    # a GPU (stand-in) but no PyTorch in the Python given: refused before any folder is made
    env = {"PATH": f"{_stand_in_gpu(tmp_path)}:/usr/bin:/bin", "KVTIER_PYTHON": sys.executable, "HOME": str(tmp_path)}
    if importlib.util.find_spec("torch") is None:
        done = subprocess.run(["bash", str(REPO / "scripts/device-check.sh"), "--out", str(out), "--bandwidth-only"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and "needs PyTorch in" in done.stderr and not out.exists(), done.stderr


@pytest.mark.vllm
def test_script_bandwidth_only_uses_the_machines_torch_and_nothing_else(tmp_path: Path) -> None:
    """With the CPU vLLM venv's Python as the machine's (torch, CPU build) and a stand-in
    nvidia-smi, --bandwidth-only gets as far as torch's CUDA check: no install, no vLLM (the
    environment names none), no network, stopped with exit 3 before any folder is made."""
    if not TORCH_PY.exists():
        pytest.skip(f"no torch: {TORCH_PY} is missing (scripts/setup-vllm-cpu.sh)")
    out = tmp_path / "runs"
    env = {"PATH": f"{_stand_in_gpu(tmp_path)}:/usr/bin:/bin", "KVTIER_PYTHON": str(TORCH_PY), "HOME": str(tmp_path),
           "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["bash", str(REPO / "scripts/device-check.sh"), "--out", str(out), "--bandwidth-only"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 3 and "sees no CUDA device" in done.stderr, done.stderr
    assert not out.exists() and not (REPO / ".venv-device").exists()


def test_bandwidth_imports_nothing_but_torch_and_the_standard_library() -> None:
    """Statically (kvtier.gpuenv's walk of every import, function-level ones too): the bandwidth
    step needs torch and the standard library, and of kvtier only kvtier.device and kvtier.cliargs."""
    from kvtier.gpuenv import import_closure

    c = import_closure(["kvtier.device.bandwidth"], REPO / "src")
    assert set(c.external) == {"torch"}, c.external
    # kvtier.cliargs: the command line's argparse types, standard library only (external is torch alone)
    assert c.modules == {"kvtier", "kvtier.cliargs", "kvtier.device", "kvtier.device.bandwidth"}


@pytest.mark.vllm
def test_bandwidth_run_loads_nothing_but_torch_and_the_standard_library(tmp_path: Path) -> None:
    """At run time: the modules a whole --allow-cpu measurement loads beyond `import torch`'s
    are the standard library's and kvtier.device's (the geometry read from the record included)."""
    if not TORCH_PY.exists():
        pytest.skip(f"no torch: {TORCH_PY} is missing (scripts/setup-vllm-cpu.sh)")
    code = ("import sys, json; import torch; base = set(sys.modules)\n"
            "from kvtier.device import bandwidth\n"
            "bandwidth.main(['--metrics', 'raw/production/C/metrics.prom', '--blocks', '2', '--repeats', '3',"
            " '--block-tokens', '16', '--allow-cpu', '--out', sys.argv[1]])\n"
            "new = sorted(set(sys.modules) - base)\n"
            "print(json.dumps([m for m in new if m.split('.')[0] not in sys.stdlib_module_names]))\n")
    done = subprocess.run([str(TORCH_PY), "-c", code, str(tmp_path / "bw.json")], capture_output=True, text=True,
                          cwd=REPO, timeout=300, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin",
                                                      "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert [m for m in loaded if not (m.startswith("torch") or m in ("kvtier", "kvtier.cliargs", "kvtier.device")
                                      or m.startswith("kvtier.device."))] == []
    assert "kvtier.device.bandwidth" in loaded and json.loads((tmp_path / "bw.json").read_text())["block_bytes"] == 27456 * 16


# ------------------------------------------------------------------ bandwidth

def test_geometry_is_read_from_the_production_record() -> None:
    path = REPO / "raw/production/C/metrics.prom"
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("vllm:kv_offload_config_info{"))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    geo = bandwidth.geometry_from_metrics(path)
    assert geo["bytes_per_token"] == int(labels["cpu_kv_cache_size_bytes"]) / int(labels["cpu_kv_cache_size_tokens"])
    assert geo["chunk_tokens"] == 1600  # the note's 1,600-token blocks: one block a chunk
    assert bandwidth.block_bytes(geo["bytes_per_token"], 1600) == int(labels["cpu_kv_cache_size_bytes"]) // int(labels["cpu_num_chunks"])


def test_geometry_errors_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "m.prom"
    f.write_text("# TYPE x gauge\nx 1\n")
    with pytest.raises(ValueError, match=r"m.prom: no vllm:kv_offload_config_info"):
        bandwidth.geometry_from_metrics(f)
    with pytest.raises(ValueError, match="whole positive byte count"):
        bandwidth.block_bytes(1.5, 1601)


def test_geometry_reader_agrees_with_prometheus_client() -> None:
    """The standard-library reader of the one sample against kvtier.records.prometheus, which
    parses the whole file with prometheus_client: the same labels, so the same geometry."""
    from kvtier.records import vllm as V
    from kvtier.records.prometheus import Snapshot

    assert bandwidth.OFFLOAD_CONFIG_INFO == V.OFFLOAD_CONFIG_INFO
    path = REPO / "raw/production/C/metrics.prom"
    theirs = Snapshot.read(path).labels_of(V.OFFLOAD_CONFIG_INFO)
    no = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith(V.OFFLOAD_CONFIG_INFO + "{"))
    line = path.read_text().splitlines()[no - 1]
    assert bandwidth._labels(line[line.index("{") + 1:line.rindex("}")], path, no) == theirs
    geo = bandwidth.geometry_from_metrics(path)
    assert geo["bytes_per_token"] == float(theirs["cpu_kv_cache_size_bytes"]) / float(theirs["cpu_kv_cache_size_tokens"])


def test_geometry_reader_label_escapes_and_errors(tmp_path: Path) -> None:
    assert bandwidth._labels('a="x\\"y\\\\z\\n",b="",', "p", 1) == {"a": 'x"y\\z\n', "b": ""}
    f = tmp_path / "m.prom"
    f.write_text('# TYPE vllm:kv_offload_config_info gauge\nvllm:kv_offload_config_info{cpu_kv_cache_size_bytes="1",'
                 'cpu_num_chunks="1"} 1.0\n')
    with pytest.raises(ValueError, match=r"m.prom:2: vllm:kv_offload_config_info has no label 'cpu_kv_cache_size_tokens'"):
        bandwidth.geometry_from_metrics(f)
    f.write_text('vllm:kv_offload_config_info{cpu_kv_cache_size_bytes=1} 1.0\n')
    with pytest.raises(ValueError, match=r"m.prom:1: .* not Prometheus text"):
        bandwidth.geometry_from_metrics(f)


def test_rates_arithmetic() -> None:
    r = bandwidth.rates(4_000_000_000, [2.0, 1.0, 4.0])  # 4 GB in 2 s, 1 s, 4 s
    assert r["gb_per_s"] == [2.0, 4.0, 1.0]
    assert (r["median_gb_per_s"], r["min_gb_per_s"], r["max_gb_per_s"]) == (2.0, 1.0, 4.0)
    with pytest.raises(ValueError):
        bandwidth.rates(1, [0.0])


def _bandwidth(*args: str) -> subprocess.CompletedProcess:
    if not TORCH_PY.exists():
        pytest.skip(f"no torch: {TORCH_PY} is missing (scripts/setup-vllm-cpu.sh)")
    return subprocess.run([str(TORCH_PY), "-m", "kvtier.device.bandwidth", "--bytes-per-token", "1024",
                           "--blocks", "3", "--repeats", "3", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.vllm
def test_bandwidth_refuses_without_a_gpu() -> None:
    done = _bandwidth()
    assert done.returncode == bandwidth.NO_GPU and "no CUDA device" in done.stderr and done.stdout == ""


@pytest.mark.vllm
def test_bandwidth_cpu_fallback_is_labelled(tmp_path: Path) -> None:
    out = tmp_path / "bw.json"
    done = _bandwidth("--allow-cpu", "--out", str(out))
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    assert r["device"] == "cpu" and "not a host->GPU measurement" in r["direction"]
    assert r["block_bytes"] == 1024 * 1600 and r["memory"]["pinned"] == {"skipped": "pinned memory needs a CUDA device"}
    page = r["memory"]["pageable"]
    assert page["bytes_per_repeat"] == 3 * 1024 * 1600 and len(page["seconds"]) == 3
    assert page["gb_per_s"] == [page["bytes_per_repeat"] / t / 1e9 for t in page["seconds"]]


# ------------------------------------------------------------------ summary on fake records

def _fake_run(root: Path, restore_evicted: tuple[bool, ...] = (True, True, True)) -> Path:
    """A run folder as device-check leaves it: the harness's run.yaml (checks) and requests.jsonl."""
    rec = root / "C-reduced" / "native"
    rec.mkdir(parents=True)
    cold, hit, restore = [3.0, 1.0, 2.0], [0.2, 0.1, 0.3], [0.5, 0.4, 0.6]
    checks = {}
    reqs = []
    seq = 0
    for c in (1, 2, 3):
        for phase, rnd, t in (("cold", 0, cold), ("hit", 0, hit), ("restore", 1, restore)):
            reqs.append({"seq": seq, "phase": phase, "round": rnd, "cycle": c, "attempt": 1, "status": "ok",
                         "ttft_s": None, "first_chunk_s": t[c - 1]})
            seq += 1
        checks[("" if c == 1 else f"c{c}:") + "restore.1"] = {
            "evicted": restore_evicted[c - 1], "restored_from_pool": True, "pool_tokens": 49600.0, "computed_tokens": 400.0,
            "load_bytes": 1e9 * c, "load_time_s": 0.5, "logprobs": {"passed": True}}
    meta = {"status": "complete", "started": "2026-12-01T00:00:00+00:00", "plan": {"repeat": 3}, "checks": checks,
            "host": {"gpu": {"name": "fake"}, "load_average_start": [0.1, 0, 0], "load_average_end": [0.2, 0, 0]}}
    (rec / "run.yaml").write_text(yaml.safe_dump(meta))
    (rec / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    (root / "bandwidth.json").write_text(json.dumps({
        "device": "fake", "direction": "host->gpu", "block_tokens": 1600, "block_bytes": 1600 * 4, "blocks": 2, "repeats": 3,
        "geometry": {"bytes_per_token": 4.0},
        "memory": {"pinned": {"median_gb_per_s": 50.0, "min_gb_per_s": 49.0, "max_gb_per_s": 51.0, "median_ms_per_block": 1.0},
                   "pageable": {"skipped": "x"}}}))
    return root


def test_summary_of_fake_records(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "r")
    assert summary.main([str(run)]) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["ok"] and s["problems"] == []
    o = s["over_cycles"]
    assert o["cold_ttft_s"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert o["restore_ttft_s"] == {"median": 0.5, "min": 0.4, "max": 0.6, "n": 3}
    assert o["load_gb_per_s"] == {"median": 4.0, "min": 2.0, "max": 6.0, "n": 3}  # 1, 2, 3 GB in 0.5 s
    md = (run / "summary.md").read_text()
    assert "cold 2.000 [1.000–3.000], n=3" in md and "pinned: 50.00 [49.00–51.00] GB/s" in md and "Problems: none" in md


def test_summary_names_each_problem(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "r", restore_evicted=(True, False, True))
    (run / "bandwidth.json").unlink()
    assert summary.main([str(run)]) == 1
    s = json.loads((run / "summary.json").read_text())
    assert s["problems"] == ["cycle 2: restore not evicted from GPU memory", "no bandwidth.json"]


def test_summary_errors_name_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert summary.main([str(tmp_path)]) == 2
    assert "run.yaml: missing" in capsys.readouterr().err
    run = _fake_run(tmp_path / "r")
    req = run / "C-reduced/native/requests.jsonl"
    req.write_text(req.read_text() + "{cut\n")
    assert summary.main([str(run)]) == 2
    assert f"{req}:10: not JSON" in capsys.readouterr().err


@pytest.mark.vllm
def test_script_flow_up_to_the_gpu_stops_cleanly(tmp_path: Path) -> None:
    """A stand-in nvidia-smi gets the script past its first check; the CPU vLLM's torch then sees no
    CUDA device, and the script stops there (exit 3) with only its own new run folder written."""
    if not TORCH_PY.exists():
        pytest.skip(f"no torch: {TORCH_PY} is missing (scripts/setup-vllm-cpu.sh)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "runs"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KVTIER_PYTHON": sys.executable, "HOME": str(tmp_path),
           "KVTIER_VLLM_BIN": str(VLLM_BIN), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["bash", str(REPO / "scripts/device-check.sh"), "--out", str(out), "--run-id", "r1"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "sees no CUDA device" in done.stderr
    assert sorted(p.name for p in (out / "r1").iterdir()) == ["gpu.txt", "plan.sh"]
    assert (out / "r1/gpu.txt").read_text() == "GPU 0: stand-in (UUID: GPU-0)\n"
    again = subprocess.run(["bash", str(REPO / "scripts/device-check.sh"), "--out", str(out), "--run-id", "r1"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 2 and "exists" in again.stderr  # never into a folder that exists


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_shell_scripts_pass_shellcheck() -> None:
    done = subprocess.run(["shellcheck", *(str(REPO / s) for s in SCRIPTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
