"""Which vLLM a launcher starts (issue 33, item 2): --vllm-bin or the config's value, else
KVTIER_VLLM_BIN, else the environment kvtier runs in (the rule's conda env under --sdm conda),
else PATH; printed by `kvtier harness run --dry-run` and named by the preflight's error.

The setups' arguments are the ones the eviction rule passes (kvtier.eviction.workflow.harness_args
on config/config.yaml), so a dry run here is the rule's command with --dry-run added.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvtier.eviction import longctx
from kvtier.eviction import workflow as evict_wf
from kvtier.harness import build_parser, _spec
from kvtier.serving import server as srv
from kvtier.serving import vllmbin

REPO = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
EVICT = CONFIG["experiments"]["eviction"]


def _fake_vllm(folder: Path) -> Path:
    """A `vllm` that answers --version as vLLM does (the harness asks it which platform it is)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "vllm"
    exe.write_text("#!/bin/sh\necho 0.33.0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without any vLLM hint of its own: no KVTIER_VLLM_BIN, no conda env,
    a PATH without vllm."""
    env = {k: v for k, v in os.environ.items() if k not in ("KVTIER_VLLM_BIN", "CONDA_PREFIX")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not (Path(p) / "vllm").exists())
    env["PYTHONPATH"] = str(REPO / "src")
    return {**env, **extra}


def _dry_run(setup: str, env: dict[str, str], *more: str) -> str:
    """The eviction rule's harness command for `setup`, with --dry-run: prints what it would launch."""
    args = evict_wf.harness_args(EVICT, setup)
    done = subprocess.run([sys.executable, "-m", "kvtier", "harness", "run", "--setup", setup, "--run-id", "dry",
                           *shlex.split(args), *more, "--dry-run"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_gpu_setups_pass_no_vllm_bin_of_their_own():
    """config.yaml names no executable for A and C: the rule's command leaves the choice to the order
    (it used to pass `--vllm-bin vllm` always, so KVTIER_VLLM_BIN was never read)."""
    assert EVICT["vllm_bin"] is None
    for setup in EVICT["table_setups"]:
        assert "--vllm-bin" not in evict_wf.harness_args(EVICT, setup)
    assert "--vllm-bin .venv-vllm/bin/vllm" in evict_wf.harness_args(EVICT, EVICT["cpu_setup"])  # the CPU rehearsal's own


@pytest.mark.parametrize("setup", ["A", "C"])
def test_kvtier_vllm_bin_reaches_the_launch(tmp_path, setup):
    exe = _fake_vllm(tmp_path / "gpu-env" / "bin")
    out = _dry_run(setup, _env(KVTIER_VLLM_BIN=str(exe)))
    assert f"vllm: {exe} (from KVTIER_VLLM_BIN)" in out
    assert f"command: {exe} serve {EVICT['setups'][setup]['model']}" in out


def test_the_rules_conda_env_reaches_the_launch(tmp_path):
    """--sdm conda: Snakemake activates the rule's env (CONDA_PREFIX set, its bin first on PATH)
    and runs the rule's command in it; the env's vllm is the one launched."""
    prefix = tmp_path / ".snakemake" / "conda" / "0a1b2c"
    exe = _fake_vllm(prefix / "bin")
    env = _env(CONDA_PREFIX=str(prefix))
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env['PATH']}"
    out = _dry_run("C", env)
    assert f"vllm: {exe} (from the conda env {prefix} (CONDA_PREFIX))" in out
    assert f"command: {exe} serve " in out


def test_the_order(tmp_path):
    explicit, by_env = _fake_vllm(tmp_path / "explicit"), _fake_vllm(tmp_path / "byenv")
    conda, on_path = _fake_vllm(tmp_path / "conda" / "bin"), _fake_vllm(tmp_path / "onpath")
    here = _fake_vllm(tmp_path / "venv" / "bin")
    py = str(tmp_path / "venv" / "bin" / "python")
    env = {"KVTIER_VLLM_BIN": str(by_env), "CONDA_PREFIX": str(tmp_path / "conda"), "PATH": str(on_path.parent)}
    assert vllmbin.resolve(str(explicit), env, py).path == str(explicit)  # 1. --vllm-bin / config
    assert vllmbin.resolve(None, env, py).path == str(by_env)  # 2. KVTIER_VLLM_BIN
    env.pop("KVTIER_VLLM_BIN")
    assert vllmbin.resolve(None, env, py).path == str(conda)  # 3. the conda env
    env.pop("CONDA_PREFIX")
    assert vllmbin.resolve(None, env, py).source.startswith("the running python's environment")
    assert vllmbin.resolve(None, env, py).path == str(here)  # 3. ... or the interpreter's own env
    assert vllmbin.resolve(None, env, "/usr/bin/python3-nonexistent").path == str(on_path)  # 4. PATH
    none = vllmbin.resolve(None, {"PATH": str(tmp_path / "empty")}, "/nonexistent/python")
    assert not none.found and none.path == "vllm"


def test_the_preflight_names_the_order_and_where_the_path_came_from(tmp_path):
    spec = srv.ServerSpec(model="/m", tier="none", vllm_bin=str(tmp_path / "nope" / "vllm"), vllm_source="KVTIER_VLLM_BIN",
                          port=1)
    with pytest.raises(srv.PreflightError) as e:
        srv.preflight(spec)
    msg = str(e.value)
    assert "from KVTIER_VLLM_BIN" in msg and vllmbin.ORDER in msg and "--vllm-bin PATH" in msg


def test_every_launcher_uses_the_order(tmp_path, monkeypatch):
    exe = _fake_vllm(tmp_path / "env" / "bin")
    monkeypatch.setenv("KVTIER_VLLM_BIN", str(exe))
    # kvtier harness and kvtier replay (the capture, sweep and curve rules) share _spec
    a = build_parser().parse_args(["run", "--setup", "x", "--model", "/m", "--platform", "cuda"])
    spec = _spec(a)
    assert (spec.vllm_bin, spec.vllm_source) == (str(exe), "KVTIER_VLLM_BIN")
    from kvtier.harness import launched_server_meta
    assert launched_server_meta(spec)["vllm_bin_from"] == "KVTIER_VLLM_BIN"  # run.yaml says where it came from
    a = build_parser().parse_args(["run", "--setup", "x", "--model", "/m", "--platform", "cuda", "--vllm-bin", "/opt/v/vllm"])
    assert _spec(a).vllm_bin == "/opt/v/vllm"  # an explicit value beats the variable
    # the long-context runs: the config's value, else the order
    assert longctx.vllm_bin({"vllm_bin": ".venv-vllm/bin/vllm"}) == ".venv-vllm/bin/vllm"
    assert longctx.vllm_bin({"vllm_bin": None}) == str(exe)
    # the lab's cyclic experiment: no default of its own any more
    from kvtier.lab.cyclic import build_parser as lab_parser
    assert lab_parser().parse_args(["--out", "o", "--model", "m"]).vllm_bin is None
    # the tiny model's python for setup cpu: beside the configured CPU build
    assert evict_wf.vllm_python(EVICT, EVICT["cpu_setup"]) == ".venv-vllm/bin/python"


def _readme_lines(prefix: str) -> list[str]:
    """docs/EXPERIMENTS.md's commands (moved there from the README) that start with `prefix`, continuation
    lines joined, as printed."""
    text = (REPO / "docs" / "EXPERIMENTS.md").read_text(encoding="utf-8").replace("\\\n", " ")
    return [" ".join(ln.split()) for ln in text.splitlines() if ln.strip().startswith(prefix)]


def test_the_readmes_dry_run_prints_the_environments_vllm(tmp_path):
    """docs/EXPERIMENTS.md's own line, run as printed, with its /opt/vllm-gpu path made a fake vLLM here."""
    lines = [ln for ln in _readme_lines("KVTIER_VLLM_BIN=") if "--dry-run" in ln]
    assert lines, "docs/EXPERIMENTS.md shows no dry run of a GPU setup"
    exe = _fake_vllm(tmp_path / "opt" / "vllm-gpu" / "bin")
    words = shlex.split(lines[0].replace("/opt/vllm-gpu/bin/vllm", str(exe)))
    env = _env(**dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-") and w.isascii()
                      and w.split("=", 1)[0].isupper()))
    argv = [w for w in words if not (w.split("=", 1)[0].isupper() and "=" in w)]
    assert argv[:3] == ["python", "-m", "kvtier"]
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"vllm: {exe} (from KVTIER_VLLM_BIN)" in done.stdout
    assert not any(tmp_path.iterdir()) or {p.name for p in tmp_path.iterdir()} == {"opt"}  # nothing written


def test_a_spec_built_from_the_path_alone_is_named_by_the_step_that_chose_it(tmp_path):
    """The lab builds its ServerSpec from the resolved path only: the preflight still names the step."""
    missing = str(tmp_path / "gone" / "vllm")
    assert vllmbin.resolve(None, {"KVTIER_VLLM_BIN": missing}).path == missing
    with pytest.raises(srv.PreflightError, match=r"chosen from KVTIER_VLLM_BIN"):
        srv.preflight(srv.ServerSpec(model="/m", tier="none", vllm_bin=missing, port=1))
