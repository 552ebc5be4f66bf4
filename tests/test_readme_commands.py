"""Every `snakemake` line of the experiments section (docs/EXPERIMENTS.md, moved there from the README) dry-runs as written (issue 22, item 2),
and the default target refuses a pinned record whose content changed, whatever changed it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from conftest import REPO, copy_repo, snakemake

SECTION = "## Running the experiments"


def readme_commands(readme: Path = REPO / "docs" / "EXPERIMENTS.md") -> list[str]:
    """The `snakemake` lines of the experiments section (to the next level-2 heading), as printed."""
    text = readme.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end > 0 else None]
    return [ln.strip() for ln in section.splitlines() if ln.strip().startswith("snakemake ")]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("readme") / "repo")


def test_the_section_lists_every_experiment_target() -> None:
    targets = {w for line in readme_commands() for w in shlex.split(line, comments=True)
               if not w.startswith("-") and "=" not in w}
    for t in ("eviction_A", "eviction_C", "eviction_cpu", "lab_cyclic", "lab_cyclic_cpu", "production_capture_cpu",
              "production_sweep_cpu_all"):
        assert t in targets, f"docs/EXPERIMENTS.md's experiments section has no command for {t}"


@pytest.mark.parametrize("line", readme_commands())
def test_readme_command_dry_runs(repo: Path, line: str) -> None:
    args = shlex.split(line, comments=True)[1:]  # a trailing `# ...` is the page's comment
    if "--profile" in args:  # the profiles deploy with conda, which a dry run here does not have
        args += ["--sdm", "env-modules"]
    done = snakemake(repo, "-n", *args, check=False)
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert "This was a dry-run" in done.stdout + done.stderr


def test_a_changed_pinned_record_stops_the_default_target(repo: Path) -> None:
    log = repo / "raw" / "eviction" / "cpu" / "2026-12-01-native" / "server.log"
    before = log.read_bytes()
    try:
        with open(log, "ab") as f:
            f.write(b"appended by a run\n")
        done = snakemake(repo, "-n", check=False)
        assert done.returncode != 0
        assert "2026-12-01-native/server.log: content differs" in done.stdout + done.stderr
    finally:
        log.write_bytes(before)
