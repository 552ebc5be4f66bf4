"""Issue 25, item 4: rules read only what they need. Each domain rule takes the manifest rows of its
own records (`results/pins/<rule>.tsv`, kvtier.pins) instead of raw/MANIFEST.tsv, so editing and
re-pinning one domain's record schedules that domain's rules (and the paper), never another
domain's analysis. The pin check itself still runs on every invocation (tests/test_readme_commands.py,
tests/test_spine_workflow.py: a changed pinned file stops the default target)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import snakemake
from kvtier.manifest import add_entries, read_manifest

DOMAIN_RULES = {"coldread_numbers", "production_numbers", "eviction_numbers", "lab_numbers", "counterfactual",
                "sweep_cpu", "curve_cpu"}
PAPER = {"publish", "claims", "all"}


def scheduled(repo: Path) -> set[str]:
    """The rules `snakemake -n` would run, from its job stats."""
    done = snakemake(repo, "-n")
    text = done.stdout + done.stderr
    if "Nothing to be done" in text:
        return set()
    table = text.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+\s*$", table, flags=re.M)}


def edit_and_repin(repo: Path, rel: str) -> None:
    """Append a line to a pinned record and pin it again, with its class and description."""
    path = repo / rel
    with open(path, "ab") as f:
        f.write(b"# edited by test_rule_inputs\n")
    entry = read_manifest(repo / "raw/MANIFEST.tsv")[rel]
    add_entries([path], entry.klass, entry.description, repo / "raw/MANIFEST.tsv")


@pytest.fixture
def repo(built_repo: Path, tmp_path: Path) -> Path:
    """A copy of the built repository, mtimes kept (the shared one stays as built)."""
    return Path(shutil.copytree(built_repo, tmp_path / "repo", symlinks=True))


def test_a_built_copy_has_nothing_to_do(repo: Path) -> None:
    assert scheduled(repo) == set()


def test_repinning_a_lab_record_reruns_the_lab_only(repo: Path) -> None:
    edit_and_repin(repo, "raw/lab/cyclic/vllm/server.log")
    assert scheduled(repo) == {"lab_numbers"} | PAPER


def test_repinning_an_eviction_record_reruns_its_readers_only(repo: Path) -> None:
    """production_numbers reads the eviction records too (its restore correction), and what it feeds
    (the counterfactual and the sweep's calibration) follows; the lab does not."""
    rel = next(p for p in read_manifest(repo / "raw/MANIFEST.tsv") if p.startswith("raw/eviction/") and p.endswith(".log"))
    edit_and_repin(repo, rel)
    ran = scheduled(repo)
    assert {"eviction_numbers", "production_numbers"} <= ran and not ran & {"lab_numbers", "coldread_numbers", "curve_cpu"}


def test_pinning_a_new_unread_file_reruns_no_analysis(repo: Path) -> None:
    """A new row that no rule reads changes raw/MANIFEST.tsv, and no domain's stamp."""
    extra = repo / "raw/lab/notes-unread.txt"
    extra.write_text("a file no rule reads\n", encoding="utf-8")
    add_entries([extra], "measured", "a file no rule reads (test)", repo / "raw/MANIFEST.tsv")
    assert not scheduled(repo) & DOMAIN_RULES
