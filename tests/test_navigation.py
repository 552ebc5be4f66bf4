"""Issue 34, items 5 and 6, read off the built pages as a reviewer meets them (the session's
built_repo, not the checkout's paper/): at most four signs to learn; every "Table N" / "Figure N"
lands on an anchor; numbers never collide across pages; the validation page opens with the
claims' status and a contents list; no page longer than 25 phone screens; no CPU-build column
in a row with a GPU setup's without a rule between them and a caption that says why."""

from __future__ import annotations

import re
import shutil
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import pytest

PAGES = ["note", "validation", "validation-pool", "validation-inputs", "lab"]
REFERENCE = re.compile(r"\b(?:Table|Figure) [VL]?\d+[a-z]?\b")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Page(HTMLParser):
    """The page's text runs with the link (if any) each sits in, every id, each table's and
    figure's enclosing ids, and the classes used on numbers."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.runs: list[tuple[str, str | None, tuple[str, ...]]] = []  # text, href, open tags
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.tables_without_anchor = 0
        self.num_classes: set[str] = set()
        self.added = 0
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag in ("style", "script", "title"):
            self.skip += 1
        if tag == "table" and not any(t == "figure" and d.get("id") for t, d in self.stack):
            self.tables_without_anchor += 1
        if tag == "a" and "num" in a.get("class", "").split():
            self.num_classes.add(a["class"])
        if tag == "ins" and "added" in a.get("class", ""):
            self.added += 1
        if tag not in ("img", "br", "meta", "wbr", "hr", "input", "link"):
            self.stack.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script", "title"):
            self.skip -= 1
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        href = next((d.get("href") for t, d in reversed(self.stack) if t == "a"), None)
        self.runs.append((data, href, tuple(t for t, _ in self.stack)))


def read(built_repo: Path, name: str) -> Page:
    page = Page()
    page.feed((built_repo / "paper" / f"{name}.html").read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def pages(built_repo: Path) -> dict[str, Page]:
    return {name: read(built_repo, name) for name in PAGES}


def marks_of(page: Page) -> set[str]:
    """The signs a reader must learn: the glyphs after numbers and in the text (geometric shapes,
    check marks, stars, daggers), and the highlight of added text."""
    text = "".join(t for t, _, tags in page.runs if "code" not in tags and "pre" not in tags)  # a glob is no mark
    glyphs = {c for c in text if 0x25A0 <= ord(c) <= 0x25FF or 0x2713 <= ord(c) <= 0x2718
              or c in "★☆†‡*" or unicodedata.name(c, "").startswith(("BLACK STAR", "WHITE STAR"))}
    return glyphs | ({"added highlight"} if page.added else set())


def test_at_most_four_signs_across_all_pages(pages: dict[str, Page]) -> None:
    signs = set().union(*(marks_of(p) for p in pages.values()))
    assert len(signs) <= 4, sorted(signs)
    # and the class is the glyph alone: no colour or underline of its own per class
    assert all(c == "num" or c.startswith("num ") for p in pages.values() for c in p.num_classes)


def test_the_legend_explains_every_sign_once_per_page(built_repo: Path, pages: dict[str, Page]) -> None:
    for name, page in pages.items():
        text = "".join(t for t, _, _ in page.runs)
        legend = text[text.index("Four signs"):][:700]
        for sign in marks_of(page) - {"added highlight"}:
            assert sign in legend, (name, sign)
        assert "lowest–highest over the launches" in legend, name  # the one meaning of a range
        assert text.count("Four signs") == 1, name


def test_no_words_used_as_marks(pages: dict[str, Page]) -> None:
    for name, page in pages.items():
        text = "".join(t for t, _, _ in page.runs)
        for word in ("(flagged)", "(fitted)", "✓", "95% CI", "% confidence interval"):
            assert word not in text, (name, word)


def test_every_table_and_figure_has_an_anchor(built_repo: Path, pages: dict[str, Page]) -> None:
    for name, page in pages.items():
        assert page.tables_without_anchor == 0, name
        html = (built_repo / "paper" / f"{name}.html").read_text(encoding="utf-8")
        for fig in re.findall(r"<figure\b[^>]*>", html):
            assert re.search(r'\bid="[^"]+"', fig), (name, fig)
        for label in re.findall(r"<figcaption><strong>((?:Table|Figure) [VL]?\d+[a-z]?)\.?</strong>", html):
            assert "-".join(label.lower().split()) in page.ids, (name, label)


def test_numbering_is_unique_across_pages(built_repo: Path) -> None:
    seen: dict[str, str] = {}
    for name in PAGES:
        html = (built_repo / "paper" / f"{name}.html").read_text(encoding="utf-8")
        for label in re.findall(r"<figcaption><strong>((?:Table|Figure) [VL]?\d+[a-z]?)\.?</strong>", html):
            assert label not in seen, f"{label} on {name} and on {seen[label]}"
            seen[label] = name
    assert any(k.startswith("Table V") for k in seen) and any(k.startswith("Table L") for k in seen)


def test_every_reference_lands_on_its_anchor(pages: dict[str, Page]) -> None:
    """Each "Table N" / "Figure N" in the text is a link to an anchor that exists: on its own
    page, or on the page the link names; a caption's own label is the anchor itself."""
    problems = []
    for name, page in pages.items():
        for i, (text, href, tags) in enumerate(page.runs):
            for m in REFERENCE.finditer(text):
                anchor = "-".join(m.group(0).lower().split())
                if href is None:
                    own_label = tags[-2:] == ("figcaption", "strong") and m.start() == 0
                    if not (own_label and anchor in page.ids):
                        problems.append((name, m.group(0), "not a link"))
                    continue
                target, _, frag = href.partition("#")
                target_page = pages.get(target.removesuffix(".html")) if target else page
                if frag != anchor or target_page is None or anchor not in target_page.ids:
                    problems.append((name, m.group(0), href))
    assert not problems, problems[:20]


def test_the_validation_page_opens_with_the_claims_status_and_a_contents_list(built_repo: Path) -> None:
    html = (built_repo / "paper/validation.html").read_text(encoding="utf-8")
    body = html[html.index("</h1>"):]
    first_table = body.index("<table")
    first_list = body.index("<ul")
    assert first_table < first_list < body.index("<h2"), "status table, then contents, before any section"
    status = body[:body.index("</table>")]
    assert 'id="claim-status"' in status
    for status_words in ("from measured records", "from replica records", "needs a GPU"):
        assert status_words in status, status_words
    # the counts add up to the claims file's, and the measured column to what the ledger says
    import json

    from kvtier.claims import load_claims
    claims = load_claims(built_repo / "config/claims.yaml")
    ledger = json.loads((built_repo / "results/provenance.json").read_text())
    total = re.search(r"<td>All claims</td>\s*<td[^>]*>(\d+)</td>\s*<td[^>]*>(\d+)</td>\s*<td[^>]*>(\d+)</td>", status)
    assert total and int(total.group(1)) == len(claims)
    measured = sum(ledger["numbers"][c.key]["inputs_class"] in ("measured", "mixed") for c in claims)
    assert int(total.group(2)) == measured
    replica = sum(ledger["numbers"][c.key]["inputs_class"] in ("replica", "part-replica") for c in claims)
    assert int(total.group(3)) == replica
    contents = body[first_list:body.index("</ul>", first_list)]
    for target in ("#evict-cpu", "#longctx", "validation-pool.html#sweep", "validation-pool.html#model",
                   "validation-inputs.html#inputs"):
        assert f'href="{target}"' in contents, target
    # the model that failed comes after the measurements it was checked against
    pool = (built_repo / "paper/validation-pool.html").read_text(encoding="utf-8")
    assert pool.index('id="sweep"') < pool.index('id="model"')
    # the intro names the note's abridged tables by their own numbers, not the page's
    assert "Table 3, Table 4 and Table 5 abridged" not in html


def test_no_cpu_column_beside_a_gpu_setup_without_a_rule_and_a_reason(built_repo: Path) -> None:
    for name in PAGES:
        html = (built_repo / "paper" / f"{name}.html").read_text(encoding="utf-8")
        for fig in re.findall(r'<figure class="table".*?</figure>', html, re.S):
            heads = re.findall(r"<th[^>]*>(.*?)</th>", fig.split("</tr>", 1)[0], re.S)
            gpu = any(re.search(r"setup [AC]\b|GPU|production", h) for h in heads)
            cpu = [h for h in heads if "CPU" in h]
            if gpu and cpu:
                assert 'class="cpu-apart"' in fig, (name, heads)
                assert "not comparable" in fig.lower() or "Not comparable" in fig, (name, heads)
    validation = (built_repo / "paper/validation.html").read_text(encoding="utf-8")
    caption = validation[validation.index('id="figure-v2"'):].split("</figcaption>", 1)[0]
    assert "not comparable" in caption
    svg = (built_repo / "figures/longctx.svg").read_text(encoding="utf-8")
    assert svg.count('id="axes_') == 2, "the CPU build and the GPU setups on axes of their own"
    assert "hatch" not in (built_repo / "figures/fig1b_C.svg").read_text(encoding="utf-8")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_no_page_longer_than_25_phone_screens(built_repo: Path) -> None:
    """At 390 px wide, each page is at most 25 screens of 844 px (a phone held upright); a link to
    a table lands on the table (it is scrolled to the top of the screen), not on the page's top."""
    sync_api = pytest.importorskip("playwright.sync_api")
    heights = {}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": 390, "height": 844})
        for name in PAGES:
            tab.goto((built_repo / "paper" / f"{name}.html").as_uri())
            tab.wait_for_load_state("load")
            heights[name] = tab.evaluate("document.documentElement.scrollHeight") / 844
        tab.goto((built_repo / "paper/note.html").as_uri())
        link = tab.locator('a[href="validation-pool.html#figure-v5"]').first
        link.click()
        tab.wait_for_load_state("load")
        top = tab.evaluate("document.getElementById('figure-v5').getBoundingClientRect().top")
        browser.close()
    assert all(h <= 25 for h in heights.values()), heights
    assert abs(top) < 50, top
