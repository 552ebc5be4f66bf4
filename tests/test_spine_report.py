"""Issue 13, item 7: Snakemake's report holds the tables and the claims report, each captioned."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import snakemake

pytestmark = pytest.mark.e2e


def test_report_holds_tables_figures_and_claims(built_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    snakemake(built_repo, "--report", str(out))
    html = out.read_text(encoding="utf-8", errors="replace")
    for name in ("table1.csv", "table2_C.csv", "lab_ttft.csv", "claims.md", "fig1a.svg", "fig1b_C.svg", "lab_ttft.svg"):
        assert name in html, name
    for caption in ("Table 1 of the note", "The lab's measured results", "The claims report"):
        assert caption in html, caption
