"""Snakemake's own report and the note's citation, on the built copy of the repository."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from conftest import snakemake
from test_deploy_metadata import seed_bibtex

pytestmark = pytest.mark.e2e


def test_snakemake_report_builds(built_repo: Path) -> None:
    """`snakemake --report` needs snakemake[reports] (pygments), which the README installs."""
    snakemake(built_repo, "--report", "results/report.zip")
    with zipfile.ZipFile(built_repo / "results/report.zip") as z:
        names = z.namelist()
    for fig in ("fig1a.svg", "fig1b_C.svg", "fig2.svg"):
        assert any(n.endswith(fig) for n in names), fig
    assert any(n.endswith("report.html") for n in names)


def test_note_prints_the_published_bibtex(built_repo: Path) -> None:
    note = (built_repo / "paper/note.md").read_text(encoding="utf-8")
    block = note[note.index("@techreport{"):]
    block = block[:block.index("\n}") + 2]
    assert block.startswith("@techreport{akinin2026kvcacheramtier,")
    fields = dict(re.findall(r"^\s*(\w+)\s*=\s*\{?(.*?)\}?,?$", block, re.M))
    assert fields == seed_bibtex()
