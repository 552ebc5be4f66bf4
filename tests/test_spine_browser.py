"""A real browser: the note renders in headless Chromium with every figure loaded; its layout
holds at phone, laptop and print widths; every number links to a row of the provenance page;
PDF rule."""

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
@pytest.mark.parametrize("page", ["paper/note.html", "paper/validation.html", "paper/validation-pool.html",
                                  "paper/validation-inputs.html", "paper/lab.html"])
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
    if "inputs" not in page:  # part three lists files, not numbers
        assert links > 0  # numbers link to their provenance
    text = (built_repo / page).read_text()
    figures = text.count("<figure") - text.count('<figure class="table"')  # tables have captions, not images
    assert len(images) == figures


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_pdf_rule(built_repo: Path) -> None:
    snakemake(built_repo, "paper/note.pdf")
    pdf = built_repo / "paper/note.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 10_000



@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_pdf_keeps_each_table_caption_on_the_page_of_its_table(built_repo: Path) -> None:
    pypdf = pytest.importorskip("pypdf", reason="pypdf reads the printed pages (pip install pypdf)")
    pdf = built_repo / "paper/note.pdf"
    if not pdf.exists():
        snakemake(built_repo, "paper/note.pdf")
    pages = [p.extract_text() for p in pypdf.PdfReader(pdf).pages]
    for caption, first_row in (("Table 1.", "GPU memory"), ("Table 2.", "From GPU memory")):
        (page,) = [t for t in pages if caption in t]
        assert first_row in page.split(caption, 1)[1], f"{caption} is printed on a page without its table"


# A phone, a laptop, and print (A4 at 96 px per inch less Chromium's default margins).
WIDTHS = [(390, "screen"), (1280, "screen"), (718, "print")]
LAYOUT = """() => {
  const body = document.body, cs = getComputedStyle(body), br = body.getBoundingClientRect();
  const left = br.left + parseFloat(cs.paddingLeft), right = br.right - parseFloat(cs.paddingRight);
  const doc = document.documentElement, outside = [], uncaptioned = [], breaking = [];
  for (const el of document.querySelectorAll('table, figure, img, svg, pre, p, li, h1, h2, blockquote')) {
    const r = el.getBoundingClientRect();
    if (r.width && (r.left < left - 1 || r.right > right + 1))
      outside.push(`${el.tagName} ${Math.round(r.left)}..${Math.round(r.right)} not in ${Math.round(left)}..${Math.round(right)}: ${el.textContent.slice(0, 60)}`);
  }
  for (const t of document.querySelectorAll('table')) {
    const prev = t.closest('figure.table');
    const before = t.previousElementSibling;
    if (!prev && before && before.tagName === 'P' && /^Table \\d/.test(before.textContent)) uncaptioned.push(before.textContent.slice(0, 40));
  }
  for (const f of document.querySelectorAll('figure')) {
    const b = getComputedStyle(f).breakInside;
    if (matchMedia('print').matches && b !== 'avoid') breaking.push(f.id || f.textContent.slice(0, 40));
  }
  const tables = [...document.querySelectorAll('figure.table')].map(f => !!f.querySelector(':scope > figcaption') && !!f.querySelector('table'));
  return {scroll: doc.scrollWidth - doc.clientWidth, outside, uncaptioned, breaking, tables};
}"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width,media", WIDTHS, ids=[f"{w}-{m}" for w, m in WIDTHS])
@pytest.mark.parametrize("page", ["paper/note.html", "paper/validation.html", "paper/validation-pool.html",
                                  "paper/validation-inputs.html", "paper/lab.html", "paper/note.provenance.html"])
def test_layout_at_phone_laptop_and_print_widths(built_repo: Path, page: str, width: int, media: str) -> None:
    """No sideways scroll, every table and figure inside the text column, captions kept with
    their tables (one <figure> that print does not split)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": width, "height": 900})
        tab.emulate_media(media=media)
        tab.goto((built_repo / page).as_uri())
        tab.wait_for_load_state("load")
        got = tab.evaluate(LAYOUT)
        browser.close()
    assert got["scroll"] <= 0, f"{page} scrolls sideways by {got['scroll']} px at {width} px ({media})"
    assert not got["outside"], got["outside"][:5]
    assert not got["uncaptioned"], got["uncaptioned"]
    assert all(got["tables"]), got["tables"]
    assert not got["breaking"], got["breaking"]
    if page == "paper/note.html":
        assert len(got["tables"]) >= 2  # Table 1 and Table 2, each with its caption


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("doc", ["note", "validation", "validation-pool", "lab"])
def test_every_number_links_to_a_row_of_the_provenance_page(built_repo: Path, doc: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto((built_repo / f"paper/{doc}.html").as_uri())
        hrefs = tab.eval_on_selector_all("a.num", "els => els.map(e => e.getAttribute('href'))")
        height = tab.evaluate("document.documentElement.scrollHeight")
        tab.goto((built_repo / f"paper/{doc}.provenance.html").as_uri())
        ids = set(tab.eval_on_selector_all("tbody tr", "els => els.map(e => e.id)"))
        tab.fill("#q", "raw/eviction/C")  # the search box filters rows
        shown = tab.eval_on_selector_all("tbody tr", "els => els.filter(e => !e.hidden).length")
        browser.close()
    assert hrefs and all(h.startswith(f"{doc}.provenance.html#n-") for h in hrefs)
    assert {h.split("#", 1)[1] for h in hrefs} <= ids
    assert height < 40_000  # the note itself stays short: provenance is one click away
    if doc == "note":
        assert 0 < shown < len(ids)


# Issue 24: every figure readable on a phone and in print. Each figure of the built pages is put
# inline, as the pages size it (max-width 100% of the column), into a page of the note's width
# at 390 px and in print, and the smallest rendered text is measured: its font size in the SVG's
# own units times the scale the browser drew it at.
FIGURE_PAGE = """<!DOCTYPE html><meta name="viewport" content="width=device-width, initial-scale=1">
<style>body { max-width: 46em; margin: 2em auto; padding: 0 1em; } figure { margin: 1.5em 0; max-width: 100%; }
svg { max-width: 100%; height: auto; }</style>"""
SMALLEST = """() => [...document.querySelectorAll('figure')].map(f => {
  let least = Infinity, which = '';
  for (const t of f.querySelectorAll('text, tspan')) {
    if (t.querySelector('tspan')) continue;  // measure the innermost run: a superscript is a tspan
    const m = t.getScreenCTM(), size = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
    if (t.textContent.trim() && size < least) { least = size; which = t.textContent; }
  }
  return [f.id, least, which, f.querySelectorAll('text').length];
})"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width,media,least_px", [(390, "screen", 9.0), (718, "print", 7 * 96 / 72)],
                         ids=["390-screen", "print"])
def test_every_figure_text_is_legible_at_phone_width_and_in_print(built_repo: Path, width: int, media: str,
                                                                 least_px: float) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    figures = sorted((built_repo / "figures").glob("*.svg"))
    assert figures
    body = "".join(f'<figure id="{f.stem}">{f.read_text(encoding="utf-8").split("?>", 1)[-1]}</figure>' for f in figures)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": width, "height": 900})
        tab.emulate_media(media=media)
        tab.set_content(FIGURE_PAGE + body)
        got = tab.evaluate(SMALLEST)
        browser.close()
    assert len(got) == len(figures)
    assert all(n > 0 for _, _, _, n in got), "a figure has no text elements (text drawn as paths cannot be measured)"
    small = [(name, round(px, 2), text) for name, px, text, _ in got if px < least_px - 0.01]
    assert not small, f"text under {least_px:.1f} px at {width} px ({media}): {small}"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("page", ["paper/note.html", "paper/validation.html", "paper/validation-pool.html", "paper/lab.html"])
def test_every_figure_has_an_alt_text_that_says_what_it_shows(built_repo: Path, page: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": 390, "height": 844})
        tab.goto((built_repo / page).as_uri())
        alts = tab.eval_on_selector_all("figure img", "els => els.map(e => [e.closest('figure').id, e.alt])")
        browser.close()
    assert alts
    for fig_id, alt in alts:
        assert alt != fig_id and "svg" not in alt and len(alt.split()) >= 8, (fig_id, alt)
        assert "<" not in alt and "●" not in alt and "◇" not in alt and "△" not in alt, (fig_id, alt)
