"""Issue 34, item 10: the README for a reviewer. It is short, its two commands come first (as
printed there, the commands the tests and CI run), it says how to read results/claims.md the way
kvtier.claims checks it, and what it moved to docs/ is there under the same headings. The console
carries what a reader needs: the claims summary, each claim target's values, what the PDF step lacks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, snakemake
from kvtier import claims
from kvtier.errors import CONSOLE_ERRORS, ClaimsError, MissingToolError
from kvtier.numbers import Number

README = (REPO / "README.md").read_text(encoding="utf-8")
MAIN_JOB = ("python3 -m venv .venv && . .venv/bin/activate && pip install --require-hashes -r requirements/analysis.txt "
            "&& pip install --no-deps --no-build-isolation -e . && snakemake --cores all")
TESTS = "./scripts/setup-tests.sh && .venv/bin/python -m pytest"
# what moved out of the README, by heading (the same texts, so a paragraph written against the old
# README finds its place): file -> headings
MOVED = {
    "docs/ENVIRONMENTS.md": ["## The GPU environment: which versions, why, and what it takes", "## Hardware",
                             "## Conda environments (`--sdm conda`)"],
    "docs/EXPERIMENTS.md": ["## Running the experiments (GPU host)", "### Rehearsals on vLLM's CPU build",
                            "### One command on a lent GPU: `scripts/device-check.sh`",
                            "### A real vLLM, with a real second tier, on a laptop",
                            "### The eviction test at the note's scale, on a laptop", "### Public traces (optional)",
                            "## Rerun semantics"],
    "docs/BENCHMARKS.md": ["## Benchmarks"],
}


def fenced_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, body) of every fenced code block."""
    return [(text[:m.start()].count("\n") + 2, m.group(1).strip())
            for m in re.finditer(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)]


def test_the_readme_is_short_and_opens_with_its_two_commands() -> None:
    assert len(README.splitlines()) <= 200
    blocks = fenced_blocks(README)
    assert [body for _, body in blocks[:2]] == [MAIN_JOB, TESTS]
    assert blocks[1][0] < 25, "the two commands come first"
    # CI runs the second command as printed (.ci/run), so the README's line is the one tested
    assert TESTS in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_first_60_lines_say_how_to_read_claims_md() -> None:
    head = "\n".join(README.splitlines()[:60])
    for words in ("## Getting started", "## How to read `results/claims.md`", "tolerance", "printed differently",
                  "`ge 0.5`", "not yet computed", "replica", "`kvtier claims`", "kvtier claims show PREFIX"):
        assert words in head, f"the README's first 60 lines lack {words!r}"
    # the times are the measured ones, not the old "about 10 minutes"
    assert "about 10 minutes" not in README and "27 minutes" in head and "57 minutes" in head


def test_what_moved_is_linked_and_keeps_its_headings() -> None:
    for page, headings in MOVED.items():
        assert f"]({page})" in README, f"README does not link {page}"
        text = (REPO / page).read_text(encoding="utf-8")
        for h in headings:
            assert f"\n{h}\n" in text, f"{page} lacks the heading {h!r}"
            assert f"\n{h}\n" not in README, f"{h!r} is still in the README"


def test_the_readmes_tolerance_words_are_what_the_check_does() -> None:
    """'ge 0.5 passes when the recomputed value is at least the printed one less half a unit of its
    last digit'; the default tolerance is half a unit of the last printed digit."""
    def row(printed: str, value: float, op: str = "eq") -> dict[str, str]:
        c = claims.Claim("x", "note", "w", printed, "k", op=op)
        return claims.check_claim(c, {"k": Number("k", value, "count", "test", ())})

    assert row("60", 59.6, "ge")["tolerance"] == "ge 0.5" and row("60", 59.6, "ge")["status"] == "pass"
    assert row("60", 59.4, "ge")["status"] == "fail" and row("60", 1e6, "ge")["status"] == "pass"
    assert row("3.7", 3.74, "le")["tolerance"] == "le 0.05" and row("3.7", 3.76, "le")["status"] == "fail"
    assert row("85.5", 85.549)["tolerance"] == "±0.05" and row("85.5", 85.56)["status"] == "fail"
    # "printed as …" is counted as "printed differently"
    rows = [{"status": "pass", "in_text": "as published"}, {"status": "pass", "in_text": "printed as 64×"}]
    assert claims.summary_line(rows) == "2 pass, 0 fail, 0 not yet computed; in the rebuilt text: 1 as published, 1 printed differently"


def _csv(tmp_path: Path, *statuses: str) -> Path:
    rows = [{"id": f"c{i}", "doc": "note", "where": "w", "printed": "5", "key": f"k.{i}", "recomputed": "5.00",
             "tolerance": "±0.5", "status": s, "detail": "", "in_text": "as published"} for i, s in enumerate(statuses)]
    p = tmp_path / "claims.csv"
    p.write_text(claims.to_csv(rows), encoding="utf-8")
    return p


def test_kvtier_claims_prints_the_summary_and_the_failures(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kvtier", "claims", *args], capture_output=True, text=True, timeout=60)

    ok = run("--csv", str(_csv(tmp_path, "pass", "pass", "not yet computed")))
    assert ok.returncode == 0 and "claims: 2 pass, 0 fail, 1 not yet computed" in ok.stdout
    bad = run("--csv", str(_csv(tmp_path, "pass", "fail")))
    assert bad.returncode == 1 and "1 pass, 1 fail" in bad.stdout and "c1: printed 5, recomputed 5.00 (k.1" in bad.stdout
    shown = run("show", "k.0", "--csv", str(_csv(tmp_path, "pass", "fail")))
    assert shown.returncode == 0 and "c0" in shown.stdout and "c1" not in shown.stdout
    missing = run("--csv", str(tmp_path / "none.csv"))
    assert missing.returncode == 2 and "snakemake --cores all" in missing.stderr


def test_the_gate_prints_the_summary_on_the_console(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims.gate(_csv(tmp_path, "pass", "pass"), tmp_path / "ok")
    assert "claims: 2 pass, 0 fail, 0 not yet computed" in capsys.readouterr().out
    with pytest.raises(ClaimsError, match="c1: printed 5"):
        claims.gate(_csv(tmp_path, "pass", "fail"), tmp_path / "ok")
    assert "1 fail" in capsys.readouterr().out


def test_a_missing_chromium_is_named_on_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.render import browser

    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    with pytest.raises(MissingToolError, match=r"apt-get install chromium") as e:
        browser.find_chromium("chromium")
    assert isinstance(e.value, CONSOLE_ERRORS) and isinstance(e.value, FileNotFoundError)


def test_claim_targets_print_their_values_every_time(built_repo: Path) -> None:
    for _ in range(2):  # the second time everything is up to date: it still runs and prints
        out = snakemake(built_repo, "claim_eviction").stdout
        assert re.search(r"claim_eviction: \d+ published numbers checked against results/numbers/evict\.json: "
                         r"\d+ pass, 0 fail", out), out[-2000:]
        assert "evict.cold_A" in out and "44.6213" in out
    out = snakemake(built_repo, "--forcerun", "claims", "results/claims.passed").stdout
    assert re.search(r"claims: 217 pass, 0 fail, 0 not yet computed", out), out[-2000:]
