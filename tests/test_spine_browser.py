"""A real browser: the note renders in headless Chromium with every figure loaded; PDF rule."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import snakemake

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("page", ["paper/note.html", "paper/lab.html"])
def test_page_renders_with_every_figure(built_repo: Path, page: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    path = built_repo / page
    if not path.exists():
        pytest.skip(f"{page} is not a target of this build")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.on("requestfailed", lambda r: errors.append(r.url))
        tab.goto(path.as_uri())
        tab.wait_for_load_state("load")
        images = tab.eval_on_selector_all("img", "els => els.map(e => [e.alt, e.complete && e.naturalWidth > 0])")
        title = tab.title()
        links = tab.eval_on_selector_all("a.num", "els => els.length")
        browser.close()
    assert title
    assert not errors
    assert all(ok for _, ok in images), images
    assert links > 0  # numbers link to their provenance
    figures = (built_repo / page).read_text().count("<figure")
    assert len(images) == figures


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_pdf_rule(built_repo: Path) -> None:
    snakemake(built_repo, "paper/note.pdf")
    pdf = built_repo / "paper/note.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 10_000
