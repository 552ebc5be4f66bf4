"""Shared fixtures: a built copy of the repository, made once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.worktree import copy_worktree

REPO = Path(__file__).resolve().parent.parent


def copy_repo(dest: Path) -> Path:
    """Copy the working tree as git sees it (tracked + untracked, not ignored) into dest."""
    return copy_worktree(REPO, dest)


def snakemake(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("snakemake")
    cmd = [str(exe) if exe.exists() else "snakemake", "--cores", "2", *args]
    # as in an activated venv (README command 1): a rule's `python` is the one running the tests
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


VLLM_BIN = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm" / "bin" / "vllm"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama (kvtier.tinymodel, seed 0), built once per test session with
    the vLLM venv's torch and transformers; the real-vLLM test modules all serve it."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    code = "import sys; from kvtier.tinymodel import build_tiny_model; build_tiny_model(sys.argv[1], 0)"
    subprocess.run([str(VLLM_BIN.with_name("python")), "-c", code, str(out)], check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True, timeout=300)
    return out


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """A host for the launcher's preflight: 120 GiB free RAM, 200 GiB of /dev/shm, unlimited memlock
    and a stand-in vllm executable; tests adjust the state (avail, shm, memlock) they check."""
    import resource
    from collections import namedtuple

    from kvtier.serving import server as srv

    GiB = 2**30
    state = {"avail": 120 * GiB, "shm": 200 * GiB, "memlock": resource.RLIM_INFINITY}
    monkeypatch.setattr(srv, "_meminfo_bytes", lambda name: state["avail"])
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(srv.shutil, "disk_usage", lambda p: usage(state["shm"], 0, state["shm"]))
    monkeypatch.setattr(srv.resource, "getrlimit", lambda r: (state["memlock"], state["memlock"]))
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    state["bin"] = str(exe)
    return state


@pytest.fixture(scope="session")
def built_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repo on which `snakemake --cores all` ran once (the default target)."""
    repo = copy_repo(tmp_path_factory.mktemp("repo"))
    snakemake(repo)
    return repo


# CI sets KVTIER_REQUIRE=vllm,browser: a test with one of those markers that would skip (no vLLM,
# no Chromium) fails instead, so a broken install cannot pass as a green run.
REQUIRED = {m.strip() for m in os.environ.get("KVTIER_REQUIRE", "").split(",") if m.strip()}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    needed = REQUIRED & {m.name for m in item.iter_markers()}
    if report.skipped and needed:
        report.outcome = "failed"
        report.longrepr = f"required by KVTIER_REQUIRE={','.join(sorted(needed))} but skipped: {report.longrepr}"


# CI's skip allow-list (tests/ci_skips.py): under KVTIER_REQUIRE a skip whose reason it does not
# list fails the run.
from ci_skips import pytest_configure, pytest_sessionfinish, pytest_terminal_summary  # noqa: E402,F401

pytest_plugins = ["pytester"]
