"""The executor profiles, checked by the executor plugins themselves.

A dry run only parses a profile; the SLURM plugin validates `slurm_extra` and builds the sbatch
line when it submits. So each profile submits the GPU job for real, to stand-in sbatch/qsub
commands that record their arguments and refuse the job; the recorded line is what a cluster
would have received.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import copy_repo, snakemake

REPO = Path(__file__).resolve().parent.parent
ACTIVATE = ["--config", 'experiments={"eviction": {"activate": true}}']
FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "$FAKE_LOG"
case "$(basename "$0")" in
  sbatch|qsub) echo "stand-in $(basename "$0"): not submitting" >&2; exit 1;;
  sacctmgr) echo your-account;;
esac
exit 0
"""
TOOLS = ["sbatch", "sacct", "squeue", "sinfo", "sacctmgr", "scontrol", "sshare", "scancel", "srun", "qsub"]

pytest.importorskip("snakemake_executor_plugin_slurm")
pytest.importorskip("snakemake_executor_plugin_cluster_generic")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("profiles"))


def submit(repo: Path, tmp: Path, profile: str, *extra: str) -> list[str]:
    """Run eviction_C through a profile against stand-in batch tools; their recorded calls."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    fake = bin_ / "fake"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    for tool in TOOLS:
        (bin_ / tool).symlink_to(fake)
    log = tmp / "calls.log"
    os.environ["FAKE_LOG"] = str(log)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_}{os.pathsep}{old}"
    try:
        (repo / "logs/cluster").mkdir(parents=True, exist_ok=True)
        # --sdm env-modules: the profiles deploy with conda, which this test does not need
        done = snakemake(repo, "eviction_C", "--profile", str(REPO / "profiles" / profile),
                         "--sdm", "env-modules", *extra, *ACTIVATE, check=False)
    finally:
        os.environ["PATH"] = old
    assert done.returncode != 0  # the stand-in refuses every job
    assert "not allowed in the 'slurm_extra'" not in done.stderr, done.stderr[-2000:]
    (tmp / "out.txt").write_text(done.stdout + done.stderr)
    calls = log.read_text().splitlines() if log.exists() else []
    assert calls, done.stderr[-3000:]
    return calls


@pytest.mark.parametrize("profile", ["slurm", "cluster-generic"])
def test_profile_dry_run(repo: Path, profile: str) -> None:
    done = snakemake(repo, "-n", "eviction_C", "--profile", str(REPO / "profiles" / profile),
                     "--sdm", "env-modules", *ACTIVATE)
    assert "eviction_run" in done.stdout


def test_slurm_profile_asks_for_the_gpu_once(repo: Path, tmp_path: Path) -> None:
    calls = submit(repo, tmp_path, "slurm", "--slurm-init-seconds-before-status-checks", "1")
    sbatch = [c for c in calls if c.startswith("sbatch ")]
    assert len(sbatch) == 1, calls
    line = sbatch[0].split(" --wrap=")[0]
    assert re.findall(r"--gpus=\S+", line) == ["--gpus=1"], line
    assert "--gres" not in line
    assert " -p gpu " in line and "--exclusive" in line and "--cpus-per-task=16" in line


def test_slurm_plugin_rejects_what_the_old_profile_had() -> None:
    """The profile used to pass the GPU in slurm_extra as well; plugin >= 1.9 refuses that."""
    from snakemake_executor_plugin_slurm.validation import validate_slurm_extra
    from snakemake_interface_common.exceptions import WorkflowError

    with pytest.raises(WorkflowError, match="generic resources"):
        validate_slurm_extra(SimpleNamespace(resources=SimpleNamespace(slurm_extra="'--gres=gpu:1 --exclusive'")))
    validate_slurm_extra(SimpleNamespace(resources=SimpleNamespace(slurm_extra="'--exclusive'")))


def test_generic_profile_submits_with_the_rule_resources(repo: Path, tmp_path: Path) -> None:
    qsub = [c for c in submit(repo, tmp_path, "cluster-generic") if c.startswith("qsub ")]
    assert len(qsub) == 1, (qsub, (tmp_path / "out.txt").read_text()[-3000:])
    # threads are capped by the helper's --cores 2; the GPU and memory come from the profile and rule
    assert re.search(r"-l nodes=1:ppn=\d+:gpus=1 ", qsub[0]) and "-l mem=200000mb" in qsub[0], qsub[0]
